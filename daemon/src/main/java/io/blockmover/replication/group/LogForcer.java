package io.blockmover.replication.group;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.IdleStrategy;

/**
 * Forces a destination's log on a thread of its own, so that its {@link GroupReceiver} goes on taking in and
 * acknowledging records while the disk works. Forcing on the receiver's thread stopped it for the whole force:
 * with 1 MiB writes at queue depth 16 a force took 6 ms at the median and 94 ms at p99 on a disk shared with
 * the volumes, and every write of the source waited that long for its ACK. Records that arrive during one force
 * share the next (group commit).
 * <p>
 * The receiver asks for a force through an LSN it has appended ({@link #request}); this agent forces and
 * publishes the LSN now durable ({@link #forcedLsn}), then wakes the receiver, which answers DURABLE. Allocates
 * nothing.
 */
public final class LogForcer implements Agent
{
    private final DestinationGroup group;
    private final WakeableIdleStrategy idle;
    private volatile long requestedLsn;
    private volatile long forcedLsn;
    private volatile boolean stopping;
    private volatile Runnable onForced = () -> { };

    /**
     * @param group        the destination group whose log is forced.
     * @param appendedLsn  the log's tail LSN: held already, needs no force of this session.
     */
    public LogForcer(final DestinationGroup group, final long appendedLsn)
    {
        this.group = group;
        this.requestedLsn = appendedLsn;
        this.forcedLsn = appendedLsn;
        this.idle = new WakeableIdleStrategy(this::hasWork, () -> Long.MAX_VALUE);
    }

    /**
     * @return how this agent waits: parked until a request.
     */
    public IdleStrategy idleStrategy()
    {
        return idle;
    }

    /**
     * @param onForced run on this agent's thread after each force (the receiver's wake-up). Before the start.
     */
    void onForced(final Runnable onForced)
    {
        this.onForced = onForced;
    }

    /**
     * Asks for the log to be forced through {@code lsn}, a record already committed. The receiver's thread.
     *
     * @param lsn the LSN that must become durable.
     */
    void request(final long lsn)
    {
        requestedLsn = lsn;
        idle.wake();
    }

    /**
     * @return the highest LSN forced through at this agent's request.
     */
    long forcedLsn()
    {
        return forcedLsn;
    }

    /**
     * @return whether every force asked for is done.
     */
    boolean isIdle()
    {
        return forcedLsn == requestedLsn;
    }

    /**
     * The log restarted its LSN sequence: nothing of the new one is forced yet. The receiver's thread, only when
     * {@link #isIdle()}: this agent then reads nothing it writes here before the next {@link #request}.
     *
     * @param lsn the LSN before the new sequence's first.
     */
    void restart(final long lsn)
    {
        // Requested first: an agent that reads the pair between the two stores forces once for nothing.
        requestedLsn = lsn;
        forcedLsn = lsn;
    }

    /**
     * Ends this agent at its next duty cycle (after a force in progress), waking it if it waits: call before
     * closing its runner, which would otherwise wait for a park that nothing ends. Any thread.
     */
    public void stop()
    {
        stopping = true;
        idle.wake();
    }

    private boolean hasWork()
    {
        return stopping || requestedLsn != forcedLsn;
    }

    @Override
    public int doWork()
    {
        if (stopping)
        {
            throw new AgentTerminationException();
        }
        final long lsn = requestedLsn;
        if (lsn == forcedLsn)
        {
            return 0;
        }
        final long startNs = System.nanoTime();
        // Forces the tail as it is now: the requested record and any committed since.
        group.forceRecords();
        group.logForceNs.recordValue(Math.min(System.nanoTime() - startNs, DestinationGroup.HIGHEST_LATENCY_NS));
        forcedLsn = lsn;
        onForced.run();
        return 1;
    }

    @Override
    public String roleName()
    {
        return "forcer-" + group.config().name;
    }
}
