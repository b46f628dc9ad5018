package io.blockmover.replication.group;

import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;

import org.agrona.concurrent.IdleStrategy;

/**
 * Idles an agent whose work comes from another thread that can say so: it parks until {@link #wake()} or a
 * deadline, instead of backing off through spins, yields and ever longer naps. On a two-core host a backing-off
 * applier switched context six times per replicated write, taking the CPU from the threads that carry the write.
 * Allocates nothing.
 */
final class WakeableIdleStrategy implements IdleStrategy
{
    private final BooleanSupplier hasWork;
    private final LongSupplier maxParkNs;
    private volatile Thread sleeper;

    /**
     * @param hasWork   checked after declaring sleep, so a {@link #wake()} between the check and the park is never
     *                  lost.
     * @param maxParkNs the longest nap, asked before each (the agent's own deadlines: timed work, a force).
     */
    WakeableIdleStrategy(final BooleanSupplier hasWork, final LongSupplier maxParkNs)
    {
        this.hasWork = hasWork;
        this.maxParkNs = maxParkNs;
    }

    /**
     * Wakes the agent if it sleeps; call after publishing its work. Any thread.
     */
    void wake()
    {
        // Orders the publication before the read of sleeper (the agent orders its sleeper store before its check).
        VarHandle.fullFence();
        final Thread thread = sleeper;
        if (thread != null)
        {
            LockSupport.unpark(thread);
        }
    }

    @Override
    public void idle(final int workCount)
    {
        if (workCount <= 0)
        {
            idle();
        }
    }

    @Override
    public void idle()
    {
        final long parkNs = maxParkNs.getAsLong();
        if (parkNs <= 0)
        {
            return;
        }
        sleeper = Thread.currentThread();
        try
        {
            if (!hasWork.getAsBoolean())
            {
                LockSupport.parkNanos(this, parkNs);
            }
        }
        finally
        {
            sleeper = null;
        }
    }

    @Override
    public void reset()
    {
    }

    @Override
    public String alias()
    {
        return "wakeable";
    }
}
