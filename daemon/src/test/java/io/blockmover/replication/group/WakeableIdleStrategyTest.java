package io.blockmover.replication.group;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class WakeableIdleStrategyTest
{
    /**
     * Work published and signalled while the agent is between its check and its park is never slept through:
     * with 30 s naps, one lost wake-up fails the test by its timeout.
     */
    @Test
    @Timeout(60)
    void shouldNeverSleepThroughPublishedWork() throws InterruptedException
    {
        final AtomicLong published = new AtomicLong();
        final AtomicLong consumed = new AtomicLong();
        final WakeableIdleStrategy idle = new WakeableIdleStrategy(
            () -> published.get() > consumed.get(), () -> TimeUnit.SECONDS.toNanos(30));
        final long rounds = 100_000;
        final Thread agent = new Thread(() ->
        {
            while (consumed.get() < rounds)
            {
                if (published.get() > consumed.get())
                {
                    consumed.incrementAndGet();
                }
                else
                {
                    idle.idle(0);
                }
            }
        });
        agent.start();
        for (long n = 1; n <= rounds; n++)
        {
            while (consumed.get() < n - 1)
            {
                Thread.onSpinWait();
            }
            published.set(n);
            idle.wake();
        }
        agent.join(30_000);
        assertFalse(agent.isAlive());
    }

    @Test
    @Timeout(10)
    void shouldNotParkPastTheAgentsOwnDeadline()
    {
        final WakeableIdleStrategy idle = new WakeableIdleStrategy(() -> false, () -> 0);
        final long start = System.nanoTime();
        for (int i = 0; i < 1000; i++)
        {
            idle.idle(0);
        }
        assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(1), "a due deadline means no park");
    }
}
