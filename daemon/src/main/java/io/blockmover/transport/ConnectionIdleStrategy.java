package io.blockmover.transport;

import java.io.IOException;
import java.nio.channels.ClosedSelectorException;

import org.agrona.concurrent.IdleStrategy;

/**
 * Idles a network agent on its connection: a few spins for the cheap case, then a wait in the kernel until the
 * socket is readable or writable, another stage calls {@link FrameConnection#wakeup()}, or a millisecond passes
 * (which bounds the heartbeat and timeout checks; a {@link Sleeper} may choose longer, see its maxWaitMs).
 * Spinning on non-blocking socket calls instead cost a Sender most of a core in system time.
 */
public final class ConnectionIdleStrategy implements IdleStrategy
{
    private static final int SPINS = 20;
    /** Longest wait of an agent without a {@link Sleeper} (the copy pipeline's), or that polls. */
    public static final long MAX_WAIT_MS = 1;

    private final FrameConnection connection;
    private final Sleeper sleeper;
    private final int maxSpins;
    private int spins;

    /**
     * An agent that other threads wake only while it sleeps, so that they pay for a wake-up only then.
     */
    public interface Sleeper
    {
        /**
         * @param asleep whether the agent is about to wait (true) or has woken (false).
         */
        void sleeping(boolean asleep);

        /**
         * Checked after declaring sleep, so a wake-up between the check and the wait cannot be lost.
         *
         * @return whether work arrived meanwhile.
         */
        boolean hasWork();

        /**
         * @return the longest wait now, in milliseconds. An agent whose work always comes with a wake-up (bytes on
         * its socket, or another stage's {@link FrameConnection#wakeup()}) waits long, so an idle one costs
         * nothing; one that polls for something (a token bucket refilling, log space) waits short.
         */
        default long maxWaitMs()
        {
            return MAX_WAIT_MS;
        }
    }

    public ConnectionIdleStrategy(final FrameConnection connection)
    {
        this(connection, null, SPINS);
    }

    /**
     * @param connection the agent's connection.
     * @param sleeper    told when the agent sleeps, or null.
     * @param maxSpins   spins before waiting in the kernel.
     */
    public ConnectionIdleStrategy(final FrameConnection connection, final Sleeper sleeper, final int maxSpins)
    {
        this.connection = connection;
        this.sleeper = sleeper;
        this.maxSpins = maxSpins;
    }

    @Override
    public void idle(final int workCount)
    {
        if (workCount > 0)
        {
            spins = 0;
            return;
        }
        idle();
    }

    @Override
    public void idle()
    {
        if (spins < maxSpins)
        {
            spins++;
            Thread.onSpinWait();
            return;
        }
        if (sleeper != null)
        {
            sleeper.sleeping(true);
        }
        try
        {
            if (sleeper == null || !sleeper.hasWork())
            {
                connection.awaitIo(sleeper == null ? MAX_WAIT_MS : sleeper.maxWaitMs());
            }
        }
        catch (final IOException | ClosedSelectorException ex)
        {
            // The connection broke or closed: the agent's next duty cycle finds out and ends the session.
            Thread.yield();
        }
        finally
        {
            if (sleeper != null)
            {
                sleeper.sleeping(false);
            }
        }
    }

    @Override
    public void reset()
    {
        spins = 0;
    }

    @Override
    public String alias()
    {
        return "connection";
    }
}
