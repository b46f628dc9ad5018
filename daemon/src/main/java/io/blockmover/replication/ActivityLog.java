package io.blockmover.replication;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.StampedLock;

import org.agrona.concurrent.UnsafeBuffer;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.io.DurableFiles;

/**
 * The activity log of a source group: the regions being written, a small persisted hot set (as DRBD keeps), so
 * that after a crash of this host only those regions are resent instead of every region of every volume. The log
 * and the page cache are lost in such a crash, so nothing else says where the last writes went.
 * <p>
 * A write marks its regions hot, durably, before it is appended ({@link #mark}): in the common case they already
 * are, and that costs a few reads; a cold region costs one force of the hot set's file, shared by every write that
 * marks one meanwhile. A resync marks the region it sends before it clears the region's dirty bit, whose clearing
 * may reach the disk before the partner holds the record. Regions leave the hot set only at a checkpoint, once it
 * holds more than its limit: the regions not written since the checkpoint began (at LSN P), with no write in
 * flight, are cleared once every write through P is durable on the partner and on the local volumes. The LSN of
 * the last such checkpoint is kept ({@link #settledLsn}): after a crash, a partner that holds less than that lost
 * writes whose regions may no longer be hot, and only a resend of every region is safe.
 * <p>
 * Files: {@code activity.<volume>} (the {@link DirtyBitmap} format, a bit per region) and {@code activity.settled}
 * (the settled LSN). Threads: {@link #mark}, {@link #touch} and {@link #release} on writers; the checkpoint
 * methods on one thread at a time (the conductor's housekeeping).
 */
public final class ActivityLog implements AutoCloseable
{
    private static final String SETTLED_FILE = "activity.settled";

    private final DirtyBitmap[] hot;
    /** Regions written (given an LSN) since the current checkpoint began; in memory only. */
    private final ConcurrentBitSet[] touched;
    /** Regions a checkpoint may clear, chosen before the volumes are forced; in memory only. */
    private final ConcurrentBitSet[] candidates;
    /** Writers hold it shared from their mark to their touch, so a checkpoint never clears a region between the two. */
    private final StampedLock clearing = new StampedLock();
    private final Object forceLock = new Object();
    private final AtomicLong marked = new AtomicLong();
    private final AtomicIntegerArray unforced;
    private final Path settledFile;
    private final boolean existed;
    private volatile long forcedMark;
    private volatile long settledLsn;

    private ActivityLog(final DirtyBitmap[] hot, final Path settledFile, final long settledLsn, final boolean existed)
    {
        this.hot = hot;
        this.settledFile = settledFile;
        this.settledLsn = settledLsn;
        this.existed = existed;
        this.touched = new ConcurrentBitSet[hot.length];
        this.candidates = new ConcurrentBitSet[hot.length];
        this.unforced = new AtomicIntegerArray(hot.length);
        for (int i = 0; i < hot.length; i++)
        {
            touched[i] = inMemory(hot[i].bits().bitCount());
            candidates[i] = inMemory(hot[i].bits().bitCount());
        }
    }

    private static ConcurrentBitSet inMemory(final long bits)
    {
        return new ConcurrentBitSet(new UnsafeBuffer(ByteBuffer.allocateDirect(ConcurrentBitSet.wordsLength(bits))),
            0, bits);
    }

    /**
     * Opens the group's activity log in its directory, creating it empty (and the settled LSN 0) where it does not
     * exist yet.
     *
     * @param dir          the group's directory.
     * @param regionCounts regions of each volume.
     * @param regionLength bytes in a region.
     * @return the open log; see {@link #existed}.
     */
    public static ActivityLog open(final Path dir, final long[] regionCounts, final int regionLength)
    {
        final Path settledFile = dir.resolve(SETTLED_FILE);
        final boolean existed = Files.exists(settledFile);
        final DirtyBitmap[] hot = new DirtyBitmap[regionCounts.length];
        try
        {
            for (int i = 0; i < hot.length; i++)
            {
                final Path file = dir.resolve("activity." + i);
                if (existed && Files.exists(file))
                {
                    hot[i] = DirtyBitmap.open(file, regionCounts[i], regionLength);
                }
                else
                {
                    hot[i] = DirtyBitmap.create(file, regionCounts[i], regionLength, false);
                }
            }
            long settled = 0;
            if (existed)
            {
                settled = Long.parseLong(Files.readString(settledFile).trim());
            }
            else
            {
                // Written last: its presence says the bitmaps beside it were kept by every write since.
                DurableFiles.replace(settledFile, "0\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            }
            return new ActivityLog(hot, settledFile, settled, existed);
        }
        catch (final IOException | NumberFormatException | BlockmoverException ex)
        {
            for (final DirtyBitmap b : hot)
            {
                if (b != null)
                {
                    b.close();
                }
            }
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open the activity log in " + dir + ": " +
                ex.getMessage() + " (delete " + SETTLED_FILE + " and activity.* there to start it empty; a crash of " +
                "this host before it next shrinks then resends every region)", ex);
        }
    }

    /**
     * Deletes a group's activity log, so that the next open starts one empty that speaks only for what follows.
     *
     * @param dir     the group's directory.
     * @param volumes volumes in the group.
     */
    public static void delete(final Path dir, final int volumes)
    {
        try
        {
            // The settled LSN first: without it, the bitmaps are not trusted (see open).
            Files.deleteIfExists(dir.resolve(SETTLED_FILE));
            for (int i = 0; i < volumes; i++)
            {
                Files.deleteIfExists(dir.resolve("activity." + i));
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot delete the activity log in " + dir + ": " +
                ex.getMessage(), ex);
        }
    }

    /**
     * @return whether the log existed before this open: only then does it say which regions a crash may have left
     *     different. A group made by a version without it must resend every region after a crash of this host.
     */
    public boolean existed()
    {
        return existed;
    }

    /**
     * @return the LSN through which every write was durable on the partner and the local volumes when the hot set
     *     last shrank.
     */
    public long settledLsn()
    {
        return settledLsn;
    }

    /**
     * @param vol a volume's index.
     * @return the volume's hot set: regions a crash of this host may leave different on the partner.
     */
    public ConcurrentBitSet hot(final int vol)
    {
        return hot[vol].bits();
    }

    /**
     * @return hot regions over every volume.
     */
    public long hotRegions()
    {
        long n = 0;
        for (final DirtyBitmap b : hot)
        {
            n += b.bits().cardinality();
        }
        return n;
    }

    /**
     * Makes a write's regions durably hot before it is appended (and so before the partner or the volume can see
     * it). Pair with {@link #release} in a finally block, after {@link #touch}.
     *
     * @return the stamp for {@link #release}.
     */
    public long mark(final int vol, final int firstRegion, final int lastRegion)
    {
        final long stamp = clearing.readLock();
        final ConcurrentBitSet bits = hot[vol].bits();
        boolean cold = false;
        for (int r = firstRegion; r <= lastRegion; r++)
        {
            if (!bits.get(r))
            {
                bits.set(r);
                cold = true;
            }
        }
        if (cold)
        {
            unforced.set(vol, 1);
            try
            {
                forceMarks(marked.incrementAndGet());
            }
            catch (final RuntimeException ex)
            {
                // The write fails (EIO to its client); a stamp kept would stop every checkpoint for good.
                clearing.unlockRead(stamp);
                throw ex;
            }
        }
        return stamp;
    }

    /**
     * {@link #mark} for a sender that goes through regions in order (a resync, a TRIM of many regions): a cold
     * region makes the next {@code ahead - 1} hot with it, one force for them all; a hot one costs a read.
     *
     * @return the stamp for {@link #release}.
     */
    public long markAhead(final int vol, final int region, final int ahead)
    {
        final ConcurrentBitSet bits = hot[vol].bits();
        return mark(vol, region, bits.get(region) ? region : (int)Math.min((long)region + ahead - 1,
            bits.bitCount() - 1));
    }

    /**
     * Records that a write to these regions was given an LSN, under the lock that gives it: a checkpoint begun
     * before keeps them hot. Between {@link #mark} and {@link #release}.
     */
    public void touch(final int vol, final int firstRegion, final int lastRegion)
    {
        final ConcurrentBitSet bits = touched[vol];
        for (int r = firstRegion; r <= lastRegion; r++)
        {
            bits.set(r);
        }
    }

    /**
     * @param stamp from {@link #mark}.
     */
    public void release(final long stamp)
    {
        clearing.unlockRead(stamp);
    }

    /**
     * Group commit: a writer that finds a force covering its mark done returns at once.
     */
    private void forceMarks(final long mark)
    {
        synchronized (forceLock)
        {
            if (forcedMark >= mark)
            {
                return;
            }
            final long newest = marked.get();
            for (int i = 0; i < hot.length; i++)
            {
                if (unforced.getAndSet(i, 0) != 0)
                {
                    hot[i].force();
                }
            }
            forcedMark = newest;
        }
    }

    /**
     * Begins a checkpoint: from now on, writes given an LSN count as touched after it. Under the lock that gives
     * LSNs, with the LSN published last (P).
     */
    public void beginCheckpoint()
    {
        for (final ConcurrentBitSet bits : touched)
        {
            bits.clearAll();
        }
    }

    /**
     * Chooses the regions the checkpoint may clear: hot, not touched since it began, and with no write in flight
     * (one that began before P and has not finished may not be on the volume when it is forced). Call before
     * forcing the volumes: a write that finished before this call is covered by that force.
     *
     * @param inflight writes in flight per region, per volume.
     * @return how many regions were chosen.
     */
    public long chooseCandidates(final AtomicIntegerArray[] inflight)
    {
        long n = 0;
        for (int vol = 0; vol < hot.length; vol++)
        {
            final ConcurrentBitSet bits = hot[vol].bits();
            final ConcurrentBitSet chosen = candidates[vol];
            chosen.clearAll();
            for (long r = bits.nextSetBit(0); r >= 0; r = bits.nextSetBit(r + 1))
            {
                if (!touched[vol].get(r) && inflight[vol].get((int)r) == 0)
                {
                    chosen.set(r);
                    n++;
                }
            }
        }
        return n;
    }

    /**
     * Ends a checkpoint once every write through its LSN is durable on the partner and the local volumes (and the
     * dirty bitmaps are forced, so a region tracked only there stays tracked): persists that LSN, then clears the
     * chosen regions that no write touched meanwhile.
     *
     * @param lsn the checkpoint's LSN, P.
     * @return regions cleared, or -1 when writers were between their mark and touch throughout (try again later).
     * @throws IOException when the settled LSN cannot be written.
     */
    public long endCheckpoint(final long lsn) throws IOException
    {
        if (lsn > settledLsn)
        {
            // First: a crash after the clear and before this would judge the partner against an older LSN.
            DurableFiles.replace(settledFile, (lsn + "\n").getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            settledLsn = lsn;
        }
        long stamp = 0;
        for (int attempt = 0; attempt < 1000 && stamp == 0; attempt++)
        {
            // Never waits: a waiting exclusive lock would hold back every new writer behind one that waits in
            // the append lock (a resync fence).
            stamp = clearing.tryWriteLock();
            if (stamp == 0)
            {
                Thread.onSpinWait();
            }
        }
        if (stamp == 0)
        {
            return -1;
        }
        long cleared = 0;
        try
        {
            for (int vol = 0; vol < hot.length; vol++)
            {
                final ConcurrentBitSet bits = hot[vol].bits();
                final ConcurrentBitSet chosen = candidates[vol];
                for (long r = chosen.nextSetBit(0); r >= 0; r = chosen.nextSetBit(r + 1))
                {
                    if (!touched[vol].get(r) && bits.clear(r))
                    {
                        cleared++;
                    }
                }
                chosen.clearAll();
            }
        }
        finally
        {
            clearing.unlockWrite(stamp);
        }
        // Clears need no force to be safe (a bit left set only resends more), but forcing keeps the set small
        // after a crash.
        for (final DirtyBitmap b : hot)
        {
            b.force();
        }
        return cleared;
    }

    @Override
    public void close()
    {
        for (final DirtyBitmap b : hot)
        {
            b.force();
            b.close();
        }
    }
}
