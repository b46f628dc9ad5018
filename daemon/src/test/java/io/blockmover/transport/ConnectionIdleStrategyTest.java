package io.blockmover.transport;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The idle strategy waits as long as its agent says (an idle group's agents wake 50 times a second, not a
 * thousand), never when work arrived between the agent's last look and its declaring sleep, and tells the agent
 * when it sleeps.
 */
class ConnectionIdleStrategyTest
{
    @Test
    void shouldWaitAsLongAsTheSleeperSaysAndNotAtAllWhenWorkArrived()
    {
        final Recording connection = new Recording();
        final List<Boolean> asleep = new ArrayList<>();
        final long[] maxWait = {20};
        final boolean[] work = {false};
        final ConnectionIdleStrategy idle = new ConnectionIdleStrategy(connection, new ConnectionIdleStrategy.Sleeper()
        {
            @Override
            public void sleeping(final boolean value)
            {
                asleep.add(value);
            }

            @Override
            public boolean hasWork()
            {
                return work[0];
            }

            @Override
            public long maxWaitMs()
            {
                return maxWait[0];
            }
        }, 0);

        idle.idle(0);
        maxWait[0] = 1;
        idle.idle(0);
        work[0] = true;
        idle.idle(0);
        idle.idle(1);
        assertEquals(List.of(20L, 1L), connection.waits, "one wait per idle without work, as long as asked");
        assertEquals(List.of(true, false, true, false, true, false), asleep);

        final Recording plain = new Recording();
        final ConnectionIdleStrategy withoutSleeper = new ConnectionIdleStrategy(plain, null, 0);
        withoutSleeper.idle(0);
        assertEquals(List.of(ConnectionIdleStrategy.MAX_WAIT_MS), plain.waits);
    }

    /**
     * Records the waits asked of it.
     */
    private static final class Recording extends NullFrameConnection
    {
        final List<Long> waits = new ArrayList<>();

        @Override
        public void awaitIo(final long timeoutMs)
        {
            waits.add(timeoutMs);
        }
    }
}
