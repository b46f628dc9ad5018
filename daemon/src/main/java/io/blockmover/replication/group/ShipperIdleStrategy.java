package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.channels.ClosedSelectorException;

import org.agrona.concurrent.IdleStrategy;

/**
 * Idles the shipper in its connection's selector, like {@link io.blockmover.transport.ConnectionIdleStrategy},
 * but tells writers it is asleep so that only then does a write pay for a selector wake-up; a write that arrives
 * between the declaration and the wait is caught by re-checking for work.
 */
final class ShipperIdleStrategy implements IdleStrategy
{
    private static final int SPINS = 50;
    private static final long MAX_WAIT_MS = 1;

    private final Shipper shipper;
    private int spins;

    ShipperIdleStrategy(final Shipper shipper)
    {
        this.shipper = shipper;
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
        shipper.sleeping(true);
        try
        {
            if (!shipper.hasWork())
            {
                shipper.connection().awaitIo(MAX_WAIT_MS);
            }
        }
        catch (final IOException | ClosedSelectorException ex)
        {
            // The connection broke: the next duty cycle finds out and ends the session.
            Thread.yield();
        }
        finally
        {
            shipper.sleeping(false);
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
        return "shipper";
    }
}
