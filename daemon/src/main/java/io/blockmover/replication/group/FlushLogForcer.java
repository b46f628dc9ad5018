package io.blockmover.replication.group;

import java.io.IOException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import io.blockmover.frontend.nbd.NbdErrorException;
import io.blockmover.frontend.nbd.NbdProtocol;

/**
 * Forces a source group's own log for the FLUSHes that need it (an async group's, or a sync group's while its
 * partner is away) on a thread of its own, while the flushing thread forces the volume: the two fdatasyncs
 * overlap instead of running one after the other. Serially, an async FLUSH cost two device flushes end to end and
 * async groups did half the IOPS of an unreplicated export at queue depth 1 with a FLUSH after every write, while
 * two concurrent write+fdatasync streams on this disk each keep 0.94 of one stream's rate. FLUSHes that ask during
 * one force share the next (group commit). Where the volume's device flush reaches the log's disk, a FLUSH writes
 * the log's pages out and lets that one flush serve both instead (SourceGroup.flushWhileOpen), and comes here only
 * when the log needs a force of its own (RecordLog.writeOutForDeviceFlush).
 * <p>
 * A FLUSH takes a ticket ({@link #request}) and later waits for it ({@link #await}). The thread reads the newest
 * ticket before it forces, so a force it then completes began after every ticket up to that one was taken, and
 * covers every record appended before them. Allocates nothing once started; the thread starts at the first
 * request, as groups whose FLUSHes never need it (a sync group with its partner) should not carry one.
 */
final class FlushLogForcer implements AutoCloseable
{
    private static final long MAX_PARK_NS = TimeUnit.MILLISECONDS.toNanos(100);

    private final Runnable force;
    private final String threadName;
    private final LsnWaiters waiters = new LsnWaiters(64);
    private final AtomicLong requested = new AtomicLong();
    private volatile long forced;
    /** Tickets up to this one were answered by a force that failed. */
    private volatile long failedThrough;
    private volatile RuntimeException failure;
    private volatile boolean closed;
    private volatile Thread thread;

    /**
     * @param force      forces the log: the records appended so far become durable; throws when it cannot.
     * @param threadName the thread's name.
     */
    FlushLogForcer(final Runnable force, final String threadName)
    {
        this.force = force;
        this.threadName = threadName;
    }

    /**
     * Asks for a force that begins after this call.
     *
     * @return the ticket to {@link #await}.
     */
    long request()
    {
        final long ticket = requested.incrementAndGet();
        Thread t = thread;
        if (t == null)
        {
            t = start();
        }
        LockSupport.unpark(t);
        return ticket;
    }

    /**
     * Waits until a force that began after the ticket was taken has ended.
     *
     * @param ticket from {@link #request}.
     * @throws IOException when that force failed, or the group closed first.
     */
    void await(final long ticket) throws IOException
    {
        if (forced < ticket)
        {
            final int slot = waiters.enter(ticket);
            try
            {
                while (forced < ticket)
                {
                    if (closed)
                    {
                        throw new NbdErrorException(NbdProtocol.NBD_ESHUTDOWN, "the group is stopping");
                    }
                    waiters.park(slot, MAX_PARK_NS);
                }
            }
            finally
            {
                waiters.leave(slot);
            }
        }
        if (failedThrough >= ticket)
        {
            final RuntimeException cause = failure;
            throw new IOException(cause == null ? "log force failed" : cause.getMessage(), cause);
        }
    }

    /**
     * @return the thread; null once closed (the caller's {@link #await} then fails).
     */
    private synchronized Thread start()
    {
        if (thread == null && !closed)
        {
            final Thread t = new Thread(this::run, threadName);
            t.setDaemon(true);
            t.start();
            thread = t;
        }
        return thread;
    }

    private void run()
    {
        while (!closed)
        {
            final long target = requested.get();
            if (target == forced)
            {
                LockSupport.park(this);
                continue;
            }
            try
            {
                force.run();
            }
            catch (final RuntimeException ex)
            {
                failure = ex;
                failedThrough = target;
            }
            forced = target;
            waiters.signal(target);
        }
    }

    /**
     * Ends the thread after a force in progress; waiters not yet answered get ESHUTDOWN. Any thread.
     */
    @Override
    public void close()
    {
        closed = true;
        waiters.signalAll();
        final Thread t;
        synchronized (this)
        {
            t = thread;
        }
        if (t != null)
        {
            LockSupport.unpark(t);
            try
            {
                t.join(TimeUnit.SECONDS.toMillis(30));
            }
            catch (final InterruptedException ex)
            {
                Thread.currentThread().interrupt();
            }
        }
    }
}
