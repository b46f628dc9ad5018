package io.blockmover.transport;

import java.io.IOException;
import java.nio.channels.ClosedSelectorException;

import org.agrona.concurrent.IdleStrategy;

/**
 * Idles a network agent on its connection: a few spins for the cheap case, then a wait in the kernel until the
 * socket is readable or writable, another stage calls {@link FrameConnection#wakeup()}, or a millisecond passes
 * (which bounds the heartbeat and timeout checks). Spinning on non-blocking socket calls instead cost a Sender
 * most of a core in system time.
 */
public final class ConnectionIdleStrategy implements IdleStrategy
{
    private static final int SPINS = 20;
    private static final long MAX_WAIT_MS = 1;

    private final FrameConnection connection;
    private int spins;

    public ConnectionIdleStrategy(final FrameConnection connection)
    {
        this.connection = connection;
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
        if (spins < SPINS)
        {
            spins++;
            Thread.onSpinWait();
            return;
        }
        try
        {
            connection.awaitIo(MAX_WAIT_MS);
        }
        catch (final IOException | ClosedSelectorException ex)
        {
            // The connection broke or closed: the agent's next duty cycle finds out and ends the session.
            Thread.yield();
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
