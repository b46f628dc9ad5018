package io.blockmover.replication.group;

import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.LockSupport;

/**
 * Writers waiting for the partner to reach an LSN, woken one by one: progress to LSN n unparks only the writers
 * waiting for n or less. A monitor's notifyAll woke all sixteen NBD workers on every ACK, most only to wait again:
 * five context switches per write at queue depth 16 on a two-core host. Allocates nothing.
 * <p>
 * A writer takes a slot, publishes the LSN it wants, checks the progress, then parks; the signaller publishes the
 * progress, then reads the slots. Both sides are volatile, so one of them sees the other: no lost wake-up. With
 * every slot taken a writer naps in short parks instead (still correct, only slower).
 */
final class LsnWaiters
{
    /** Slot value: free. */
    private static final long FREE = 0;
    /** Slot value: taken, the LSN not yet published. */
    private static final long CLAIMED = Long.MAX_VALUE;
    private static final long FALLBACK_PARK_NS = 50_000;

    private final AtomicLongArray wanted;
    private final AtomicReferenceArray<Thread> threads;

    /**
     * @param slots the most writers that wait with targeted wake-ups at once.
     */
    LsnWaiters(final int slots)
    {
        wanted = new AtomicLongArray(slots);
        threads = new AtomicReferenceArray<>(slots);
    }

    /**
     * Registers the calling thread as waiting for {@code lsn}. Pair with {@link #leave}.
     *
     * @param lsn the LSN wanted, positive.
     * @return the slot, or -1 if all are taken.
     */
    int enter(final long lsn)
    {
        final int n = wanted.length();
        final int start = (int)(Thread.currentThread().getId() % n);
        for (int i = 0; i < n; i++)
        {
            final int slot = (start + i) % n;
            if (wanted.get(slot) == FREE && wanted.compareAndSet(slot, FREE, CLAIMED))
            {
                threads.set(slot, Thread.currentThread());
                wanted.set(slot, lsn);
                return slot;
            }
        }
        return -1;
    }

    /**
     * Parks until woken, or at most {@code maxNs}; the caller re-checks its condition after.
     *
     * @param slot  from {@link #enter}.
     * @param maxNs the longest park.
     */
    void park(final int slot, final long maxNs)
    {
        LockSupport.parkNanos(this, slot < 0 ? Math.min(maxNs, FALLBACK_PARK_NS) : maxNs);
    }

    /**
     * @param slot from {@link #enter}, or -1.
     */
    void leave(final int slot)
    {
        if (slot >= 0)
        {
            threads.set(slot, null);
            wanted.set(slot, FREE);
        }
    }

    /**
     * Wakes every writer waiting for {@code lsn} or less. Call after publishing the progress.
     *
     * @param lsn the progress reached.
     */
    void signal(final long lsn)
    {
        for (int i = 0, n = wanted.length(); i < n; i++)
        {
            final long w = wanted.get(i);
            if (w != FREE && w <= lsn)
            {
                final Thread thread = threads.get(i);
                if (thread != null)
                {
                    LockSupport.unpark(thread);
                }
            }
        }
    }

    /**
     * Wakes every waiting writer, so each re-checks whether it should wait at all (unlinked, suspended, closing).
     */
    void signalAll()
    {
        signal(CLAIMED - 1);
    }
}
