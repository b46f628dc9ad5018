package io.blockmover.replication.group;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LsnWaitersTest
{
    private static final long LONG_PARK_NS = TimeUnit.SECONDS.toNanos(30);

    /**
     * Progress to one LSN wakes the writers waiting for it and leaves the others asleep: the point of the class
     * (a notifyAll woke every NBD worker on every ACK).
     */
    @Test
    @Timeout(20)
    void shouldWakeOnlyTheWritersWhoseLsnWasReached() throws InterruptedException
    {
        final LsnWaiters waiters = new LsnWaiters(8);
        final AtomicLong progress = new AtomicLong();
        final AtomicLongArray wakeups = new AtomicLongArray(2);
        final CountDownLatch parked = new CountDownLatch(2);
        final Thread[] threads = new Thread[2];
        for (int i = 0; i < 2; i++)
        {
            final int index = i;
            final long lsn = 10 * (i + 1);
            threads[i] = new Thread(() ->
            {
                final int slot = waiters.enter(lsn);
                parked.countDown();
                while (progress.get() < lsn)
                {
                    waiters.park(slot, LONG_PARK_NS);
                    wakeups.incrementAndGet(index);
                }
                waiters.leave(slot);
            });
            threads[i].start();
        }
        parked.await();
        awaitParked(threads[0]);
        awaitParked(threads[1]);

        progress.set(10);
        waiters.signal(10);
        threads[0].join(10_000);
        assertFalse(threads[0].isAlive(), "the writer waiting for LSN 10 woke");
        awaitParked(threads[1]);
        assertEquals(0, wakeups.get(1), "the writer waiting for LSN 20 slept on");

        progress.set(20);
        waiters.signal(20);
        threads[1].join(10_000);
        assertFalse(threads[1].isAlive());
    }

    /**
     * The race that loses wake-ups in a naive design: progress published between the writer's check and its park.
     * Millions of hand-offs with the longest park at 30 s: a single lost wake-up fails the test by its timeout.
     */
    @Test
    @Timeout(60)
    void shouldNeverLoseAWakeUpBetweenTheCheckAndThePark() throws InterruptedException
    {
        final LsnWaiters waiters = new LsnWaiters(4);
        final AtomicLong progress = new AtomicLong();
        final AtomicLong wanted = new AtomicLong();
        final long rounds = 200_000;
        final Thread writer = new Thread(() ->
        {
            for (long lsn = 1; lsn <= rounds; lsn++)
            {
                wanted.set(lsn);
                final int slot = waiters.enter(lsn);
                while (progress.get() < lsn)
                {
                    waiters.park(slot, LONG_PARK_NS);
                }
                waiters.leave(slot);
            }
        });
        writer.start();
        for (long lsn = 1; lsn <= rounds; lsn++)
        {
            while (wanted.get() < lsn)
            {
                Thread.onSpinWait();
            }
            progress.set(lsn);
            waiters.signal(lsn);
        }
        writer.join(30_000);
        assertFalse(writer.isAlive());
    }

    @Test
    void shouldFallBackToShortParksWhenEverySlotIsTaken()
    {
        final LsnWaiters waiters = new LsnWaiters(1);
        final int first = waiters.enter(5);
        assertTrue(first >= 0);
        assertEquals(-1, waiters.enter(6), "no slot left");
        final long start = System.nanoTime();
        waiters.park(-1, LONG_PARK_NS);
        assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(5), "a slotless park is short");
        waiters.leave(first);
        assertTrue(waiters.enter(6) >= 0, "a slot left is free again");
    }

    private static void awaitParked(final Thread thread) throws InterruptedException
    {
        awaitTrue(thread.getName() + " parked", () -> thread.getState() == Thread.State.TIMED_WAITING);
    }
}
