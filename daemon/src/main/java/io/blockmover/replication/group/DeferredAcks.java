package io.blockmover.replication.group;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.HdrHistogram.ConcurrentHistogram;

import io.blockmover.frontend.nbd.WriteCompletion;

/**
 * Sync writes whose reply waits for the partner's ACK without a thread waiting with it: the NBD worker leaves the
 * write's {@link WriteCompletion} here and takes its next request, and the thread that publishes the partner's
 * progress completes every write it covers. At queue depth 16 on two cores, a worker parked per write and woken
 * per ACK cost a context switch each way, and context switches are most of the source's CPU here.
 * <p>
 * A slot is free, claimed (being filled or being completed), or holds a published LSN. Whoever moves a published
 * slot to claimed, by compare-and-set, owns its completion: the completer after an ACK, or the writer taking its
 * own write back when it finds, after publishing, that the ACK came first or waiting no longer applies. The writer
 * publishes, then re-checks; the completer publishes progress, then scans; both sides are volatile, so one of them
 * sees the other. Allocates nothing.
 * <p>
 * A write's slot is its LSN modulo the slot count, and a completer scans only the LSNs the progress has passed
 * since its last scan, not every slot: per ACK, the cost is the writes it covers. So the slots can be many (one
 * group's exports serving a few hundred connections at queue depth 16) without every ACK scanning them all. It
 * needs what {@link #completeUpTo} scanned through to never exceed the progress a writer can read: progress only
 * moves back through {@link #rewind}, called first, and the caller holds this object's monitor across reading the
 * progress and completing up to it (SourceGroup does). A write whose slot holds an older write still waiting
 * (more LSNs in flight than slots) waits on its own thread, as when all were taken.
 */
final class DeferredAcks
{
    private static final long FREE = 0;
    private static final long CLAIMED = Long.MAX_VALUE;
    /** The progress that completes every write waiting (the group closes, or stopped waiting): a full scan. */
    static final long EVERY_WRITE = Long.MAX_VALUE - 1;

    private final int mask;
    private final AtomicLongArray lsns;
    private final AtomicReferenceArray<WriteCompletion> completions;
    // Written before the slot's LSN is published and read after it is claimed: the volatile LSN orders both.
    private final long[] startNs;
    private final AtomicInteger pending = new AtomicInteger();
    // Guarded by this: the completions of one completeUpTo, dispatched once all are completed.
    private final WriteCompletion[] batch;
    // Guarded by this: the progress the last scan went through; no waiting write at or below it, but those a
    // writer takes back itself (it saw progress at least this high when it re-checked).
    private long scanned;

    /**
     * @param slots a power of two: the most LSNs between the oldest write waiting and the newest; a writer whose
     *              slot is taken waits on its thread instead.
     */
    DeferredAcks(final int slots)
    {
        if (Integer.bitCount(slots) != 1)
        {
            throw new IllegalArgumentException("slots must be a power of two: " + slots);
        }
        mask = slots - 1;
        lsns = new AtomicLongArray(slots);
        completions = new AtomicReferenceArray<>(slots);
        startNs = new long[slots];
        batch = new WriteCompletion[slots];
    }

    /**
     * Leaves a write to be completed once the partner holds {@code lsn}. The caller must then re-check whether it
     * still waits, and call {@link #takeBack} if not.
     *
     * @param lsn        the write's LSN, positive.
     * @param completion its acknowledgement.
     * @param writeStartNs when the write began, for the partner-ACK latency.
     * @return the slot, or -1 when it holds an older write still waiting (the caller waits on its own thread).
     */
    int defer(final long lsn, final WriteCompletion completion, final long writeStartNs)
    {
        final int slot = (int)(lsn & mask);
        if (lsns.get(slot) == FREE && lsns.compareAndSet(slot, FREE, CLAIMED))
        {
            completions.set(slot, completion);
            startNs[slot] = writeStartNs;
            pending.incrementAndGet();
            lsns.set(slot, lsn);
            return slot;
        }
        return -1;
    }

    /**
     * The writer takes its own write back, to answer it itself.
     *
     * @param slot from {@link #defer}.
     * @param lsn  the LSN it was deferred with.
     * @return true when taken back (nobody else will complete it); false when a completer already owns it.
     */
    boolean takeBack(final int slot, final long lsn)
    {
        if (lsns.get(slot) == lsn && lsns.compareAndSet(slot, lsn, CLAIMED))
        {
            release(slot);
            return true;
        }
        return false;
    }

    /**
     * Progress is about to move back (a partner that dropped records it held): the next scan starts from there.
     * Call before that progress is published, holding this object's monitor until it is.
     *
     * @param progress the lower progress.
     */
    synchronized void rewind(final long progress)
    {
        scanned = Math.min(scanned, progress);
    }

    /**
     * Completes every write the partner now holds, then dispatches them (WriteCompletion): their replies leave
     * together. Synchronized for the batch array and the scan's start: the shipper's thread is the one frequent
     * caller.
     *
     * @param acked       the partner's progress, already published, read under this object's monitor; or
     *                    {@link #EVERY_WRITE}.
     * @param error       0, or the NBD error every completed write fails with.
     * @param ackLatency  records each completed write's time since it began, or null.
     * @param nowNs       the time now.
     * @return how many were completed.
     */
    int completeUpTo(final long acked, final int error, final ConcurrentHistogram ackLatency, final long nowNs)
    {
        if (pending.get() == 0)
        {
            return 0;
        }
        synchronized (this)
        {
            final int completed = completeBatch(acked, error, ackLatency, nowNs);
            for (int i = 0; i < completed; i++)
            {
                batch[i].dispatch();
                batch[i] = null;
            }
            return completed;
        }
    }

    private int completeBatch(final long acked, final int error, final ConcurrentHistogram ackLatency,
        final long nowNs)
    {
        int completed = 0;
        if (acked == EVERY_WRITE || acked - scanned > mask)
        {
            // Every slot: all that wait, or progress that passed more LSNs than there are slots.
            for (int slot = 0; slot <= mask; slot++)
            {
                completed = complete(slot, acked, error, ackLatency, nowNs, completed);
            }
        }
        else
        {
            for (long lsn = scanned + 1; lsn <= acked; lsn++)
            {
                completed = complete((int)(lsn & mask), acked, error, ackLatency, nowNs, completed);
            }
        }
        if (acked != EVERY_WRITE && acked > scanned)
        {
            scanned = acked;
        }
        return completed;
    }

    private int complete(final int slot, final long acked, final int error, final ConcurrentHistogram ackLatency,
        final long nowNs, final int completed)
    {
        final long lsn = lsns.get(slot);
        if (lsn != FREE && lsn != CLAIMED && lsn <= acked && lsns.compareAndSet(slot, lsn, CLAIMED))
        {
            final WriteCompletion completion = completions.get(slot);
            if (ackLatency != null)
            {
                ackLatency.recordValue(Math.min(Math.max(nowNs - startNs[slot], 0),
                    ackLatency.getHighestTrackableValue()));
            }
            release(slot);
            completion.complete(error);
            batch[completed] = completion;
            return completed + 1;
        }
        return completed;
    }

    /**
     * @return writes deferred and not yet completed or taken back.
     */
    int pending()
    {
        return pending.get();
    }

    private void release(final int slot)
    {
        completions.set(slot, null);
        pending.decrementAndGet();
        lsns.set(slot, FREE);
    }
}
