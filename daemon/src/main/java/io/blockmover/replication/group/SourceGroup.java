package io.blockmover.replication.group;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

import org.HdrHistogram.ConcurrentHistogram;
import org.agrona.BufferUtil;

import io.blockmover.buffer.Slab;
import io.blockmover.frontend.nbd.DirectIo;
import io.blockmover.frontend.nbd.NbdErrorException;
import io.blockmover.frontend.nbd.NbdExport;
import io.blockmover.frontend.nbd.NbdProtocol;
import io.blockmover.frontend.nbd.WriteCompletion;
import io.blockmover.io.BlockDevices;
import io.blockmover.io.LinuxAio;
import io.blockmover.io.Volume;
import io.blockmover.io.ZeroCheck;
import io.blockmover.replication.ActivityLog;
import io.blockmover.replication.ConcurrentBitSet;
import io.blockmover.replication.DirtyBitmap;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.replication.verify.VerifyRecord;

/**
 * The source side of a group while its daemon runs: its volumes, their dirty bitmaps, the group's record log and
 * the LSN sequence. Writes come in through {@link #export(int)} on the NBD server's worker threads; the
 * {@link Shipper} sends the log on the network agent's thread; the {@link Resyncer} turns dirty regions into
 * records. The invariant that makes every recovery a resend: the log and the bitmaps together always cover every
 * byte the destination may not hold durably.
 * <ul>
 *   <li>A write is appended to the log (or, when the log is full, marked in the bitmaps) before it is written to
 *   the volume, under the append lock that also hands out LSNs, so LSN order is log order is wire order.</li>
 *   <li>A region being read for resync is fenced: writes to it wait, and in-flight writes to it finish first. So
 *   the region's record gets an LSN after every write it contains and before every write it does not.</li>
 *   <li>A bit is cleared when its region's record enters the log; the log keeps the record until the destination
 *   says it is durable.</li>
 * </ul>
 */
public final class SourceGroup implements AutoCloseable
{
    /** Record flag on the wire and in the log: the record is a whole region sent by resync, not a client write. */
    public static final int RECORD_RESYNC = io.blockmover.replication.log.RecordFlags.RESYNC;
    /** Log-only flag: the record's bytes reached the local volume (a record without it is replayed at start). */
    public static final int RECORD_WRITTEN = io.blockmover.replication.log.RecordFlags.WRITTEN;
    /** {@link #appendFencedRegion}: the region is dirty, its resend is pending. */
    public static final long REGION_DIRTY = -2;
    private static final long HIGHEST_LATENCY_NS = TimeUnit.SECONDS.toNanos(60);
    /** A log resize waits this long at most, holding the append lock, for the writes in flight to end. */
    private static final long DRAIN_ATTEMPT_NS = TimeUnit.MILLISECONDS.toNanos(50);
    /** Housekeeping reclaims log space at most this often while half the log or more is free. */
    static final long RECLAIM_INTERVAL_NS = TimeUnit.SECONDS.toNanos(1);
    /** One zero range of the log: about 150 us here, for which appends to the log wait. */
    private static final long DISCARD_SLICE_BYTES = 512 * 1024;
    /** The most {@link #reclaimLogSpaceWhenDue} discards in one call: 160 MiB/s at ten calls a second. */
    private static final long DISCARD_BYTES_PER_CALL = 16L << 20;
    /** Writers waiting at once with targeted wake-ups: NBD workers plus connection readers, with room to spare. */
    private static final int WAITER_SLOTS = 64;
    // Sync writes waiting for the partner's ACK without a thread (DeferredAcks): LSNs between the oldest and the
    // newest. 256 were 16 connections at queue depth 16; a 17th's writes then each held its reaper until the ACK.
    private static final int DEFERRED_SLOTS = 4096;
    /**
     * Regions a sender going through a range in order (a resync, a TRIM or WRITE_ZEROES of many regions) makes hot in
     * the activity log at once: one force of it for them all, not one per region.
     */
    private static final int MARK_AHEAD = 64;
    /** A waiting writer re-checks whether it should still wait at least this often. */
    private static final long MAX_PARTNER_PARK_NS = TimeUnit.MILLISECONDS.toNanos(100);
    /**
     * Records sent within this long after a client's FLUSH or FUA write tell a sync partner that clients are flushing
     * (RecordFlags.FLUSHING): it then forces after every batch, so that the next FLUSH rarely waits for a round trip
     * and a force. Where FLUSHes come less often than this, the round trip costs little against the time between
     * them, while a force after every batch costs a device flush each, which on a shared disk held queue depth 16
     * at 0.5-0.65 of an unreplicated export.
     */
    static final long FLUSHING_WINDOW_NS = TimeUnit.MILLISECONDS.toNanos(10);
    // Spinning pays only with a core to spare: on two cores the spinner takes the CPU from the shipper that is
    // about to deliver the ACK it waits for.
    private static final long SPIN_BEFORE_WAIT_NS =
        Runtime.getRuntime().availableProcessors() > 2 ? TimeUnit.MICROSECONDS.toNanos(50) : 0;

    private final GroupConfig config;
    private final Volume[] volumes;
    private final DirtyBitmap[] bitmaps;
    // Replaced only by a resize (finishLogCopy), under the append and force locks with no write in flight: read it
    // under one of them, or for its counters only (capacity, free and used bytes are plain fields of either log).
    private volatile RecordLog log;
    private final ReplicatedExport[] exports;
    // Writes between their append and the end of their volume write: per region, for resync fences and the activity
    // log; per block, for the order of overlapping writes.
    private final AtomicIntegerArray[] inflight;
    private final InFlightWrites inFlight = new InFlightWrites();
    // Writes whose records are staged in the log, not yet written (writeStaged). Guarded by appendLock.
    // As many as the log has staged (RecordLog#stagedRecords).
    private final WriteInProgress[] staged = new WriteInProgress[MAX_STAGED_RECORDS];
    // Monitors, not ReentrantLocks: a contended ReentrantLock allocates a queue node, and the write path must not
    // allocate.
    private final Object appendLock = new Object();
    private final Object forceLock = new Object();
    private final Object progress = new Object();
    // Writers waiting for the partner's ACK, and for its DURABLE: woken only when their LSN is reached.
    private final LsnWaiters ackWaiters = new LsnWaiters(WAITER_SLOTS);
    private final LsnWaiters durableWaiters = new LsnWaiters(WAITER_SLOTS);
    private final DeferredAcks deferredAcks = new DeferredAcks(DEFERRED_SLOTS);
    private final FlushLogForcer flushLogForcer;
    private final ByteBuffer zeros;

    // Guarded by appendLock.
    private long lastLsn;
    private int fencedVolume = -1;
    /**
     * Writers waiting in the append lock for an overlapping write or a fence. Volatile: a write that ends reads it
     * without the lock and takes the lock to wake them only when there are any (see volumeWriteDone).
     */
    private volatile int waiters;
    /**
     * A log resize waits for every write in flight to end ({@link #finishLogCopy}): a front end holding appended
     * writes it has not submitted yet must submit them at once ({@link DirectVolumeIo#drainWanted()}).
     */
    private volatile boolean drainWanted;
    private long fencedRegion = -1;

    private volatile long publishedLsn;
    private volatile long ackedLsn;
    private volatile long durableLsn;
    private volatile long flushWantedLsn;
    // When a client last asked for a FLUSH or wrote with FUA (System.nanoTime()): see FLUSHING_WINDOW_NS.
    private volatile long lastFlushNs = System.nanoTime() - 2 * FLUSHING_WINDOW_NS;
    private volatile boolean linked;
    private volatile boolean partnerCurrent;
    private volatile boolean suspended;
    private volatile boolean closed;
    private volatile boolean frozen;
    private volatile boolean bitmapsTouched;
    /** A resync made regions hot since the last checkpoint began. */
    private volatile boolean resyncMarked;
    private volatile boolean partnerApplyFailing;
    private volatile Runnable shipperWakeup = () -> { };
    private volatile Verifier verifier;
    private volatile long caughtUpMs = System.currentTimeMillis();
    private final ActivityLog activity;
    // The LSN of the activity log's checkpoint under way (-1: none); the conductor's housekeeping thread only.
    private long checkpointLsn = -1;
    // Opened after a crash of this host, with an activity log that says which regions to resend: until a session
    // starts, continuity lost with the partner is expected and needs only those (restartAfterHostCrash).
    private volatile boolean hostCrashRecovery;
    private long rpoMarkLsn = -1; // Shipper thread only, like rpoMarkMs.
    private long logReplacePauseNs; // Conductor thread only.
    private long rpoMarkMs;

    /** Most records staged for one pwrite: more than a connection's requests in flight, fewer than a batch holds. */
    private static final int MAX_STAGED_RECORDS = 64;
    /** A log's copy goes on while writes do until no more than this is left for the part writes wait for. */
    private static final long LOG_COPY_LAST_BYTES = 1L << 20;
    /** Longest {@link #close} waits for client writes and FLUSHes under way to end. */
    private static final long CLOSE_WAIT_NS = TimeUnit.SECONDS.toNanos(10);
    private final AtomicInteger clientOperations = new AtomicInteger();
    private long closeWaitNs = CLOSE_WAIT_NS;
    /** Set by a close that found client operations still under way after closeWaitNs: the last to end closes. */
    private volatile boolean closeDeferred;
    private final AtomicBoolean filesClosed = new AtomicBoolean();
    final AtomicLong writes = new AtomicLong();
    final AtomicLong bytesWritten = new AtomicLong();
    final AtomicLong untrackedByLog = new AtomicLong();
    /** Writes whose local volume write failed after their record was logged; their regions are resynced. */
    final AtomicLong failedWrites = new AtomicLong();
    /** Client writes whose record the log's disk refused; tracked by the bitmaps instead. */
    final AtomicLong logAppendFailures = new AtomicLong();
    /** Why the last of them was refused, or null. */
    volatile String logAppendError;
    /** Writes that waited before their append for a write to the same bytes, or for a resync of their region. */
    final AtomicLong writesWaited = new AtomicLong();
    final AtomicLong flushes = new AtomicLong();
    /** FLUSHes that needed the log durable and had it so by the volume's own device flush (flushWhileOpen). */
    final AtomicLong logForcesSharedWithVolume = new AtomicLong();
    /** By volume: whether its device flush reaches the disk the group's log is on (BlockDevices.flushCovers). */
    private final boolean[] flushCoversLog;
    final AtomicLong regionsResent = new AtomicLong();
    /** Bytes of zeros logged (and sent) as their length only: a client's WRITE_ZEROES, a resync's empty regions. */
    final AtomicLong zeroBytesLogged = new AtomicLong();
    /** Bytes of clients' TRIMs deallocated here and replicated (where a volume deallocates, and held data). */
    final AtomicLong trimmedBytes = new AtomicLong();
    // The resyncer's: whether a region it read is empty, and the zero record that says so.
    private final ZeroCheck resyncZeroCheck = new ZeroCheck();
    private final ByteBuffer resyncZeroPayload = ByteBuffer.allocateDirect(ZeroRecord.PAYLOAD_LENGTH);
    /** Records the partner got damaged and asked for again (NACK). */
    final AtomicLong recordsResent = new AtomicLong();
    /** Records found damaged in this host's own log when the partner asked for them again, and mended. */
    final AtomicLong recordsMended = new AtomicLong();
    final ConcurrentHistogram localWriteNs = new ConcurrentHistogram(HIGHEST_LATENCY_NS, 2);
    final ConcurrentHistogram partnerAckNs = new ConcurrentHistogram(HIGHEST_LATENCY_NS, 2);
    final ConcurrentHistogram remoteFlushNs = new ConcurrentHistogram(HIGHEST_LATENCY_NS, 2);

    /**
     * Opens a source group's files. New bitmaps start all dirty: the initial sync is a resync of everything.
     *
     * @param config     the group.
     * @param dir        the group's state directory.
     * @param volumes    the source volumes, opened writable, in the group's order.
     * @param log        the group's log, recovered.
     * @param allDirty   whether every region must travel (a new group, or continuity with the partner lost).
     */
    public SourceGroup(final GroupConfig config, final Path dir, final Volume[] volumes, final RecordLog log,
        final boolean allDirty)
    {
        this.config = config;
        this.volumes = volumes;
        this.log = log;
        this.bitmaps = new DirtyBitmap[volumes.length];
        this.exports = new ReplicatedExport[volumes.length];
        this.flushLogForcer = new FlushLogForcer(this::forceLogRecords, "log-force-" + config.name);
        this.flushCoversLog = new boolean[volumes.length];
        for (int i = 0; i < volumes.length; i++)
        {
            flushCoversLog[i] = BlockDevices.flushCovers(volumes[i].path(), dir);
        }
        this.inflight = new AtomicIntegerArray[volumes.length];
        final long[] regionCounts = new long[volumes.length];
        for (int i = 0; i < volumes.length; i++)
        {
            regionCounts[i] = regionCount(i);
        }
        this.activity = ActivityLog.open(dir, regionCounts, config.regionLength);
        try
        {
            for (int i = 0; i < volumes.length; i++)
            {
                final Path file = dir.resolve("bitmap." + i);
                final long regions = regionCount(i);
                bitmaps[i] = allDirty || !java.nio.file.Files.exists(file) ?
                    DirtyBitmap.createAllDirty(file, regions, config.regionLength) :
                    DirtyBitmap.open(file, regions, config.regionLength);
                inflight[i] = new AtomicIntegerArray((int)regions);
                exports[i] = new ReplicatedExport(i);
            }
        }
        catch (final RuntimeException ex)
        {
            for (final DirtyBitmap b : bitmaps)
            {
                if (b != null)
                {
                    b.close();
                }
            }
            activity.close();
            throw ex;
        }
        this.lastLsn = log.tailLsn();
        this.publishedLsn = lastLsn;
        this.ackedLsn = log.headLsn() - 1;
        this.durableLsn = log.headLsn() - 1;
        this.suspended = config.suspended;
        this.zeros = BufferUtil.allocateDirectAligned(config.regionLength, Slab.ALIGNMENT);
    }

    public GroupConfig config()
    {
        return config;
    }

    public RecordLog log()
    {
        return log;
    }

    public int volumeCount()
    {
        return volumes.length;
    }

    public Volume volume(final int index)
    {
        return volumes[index];
    }

    public ConcurrentBitSet dirty(final int index)
    {
        return bitmaps[index].bits();
    }

    public NbdExport export(final int index)
    {
        return exports[index];
    }

    long regionCount(final int volumeIndex)
    {
        return (config.volumes.get(volumeIndex).size + config.regionLength - 1) / config.regionLength;
    }

    /**
     * Writes to the local volumes the logged records whose local write may not have happened: after a kill -9,
     * the log can hold a record whose write was still in flight. Replaying it keeps the volume and the partner
     * equal; it was never acknowledged, so either outcome is allowed, but both sides must have the same one.
     *
     * @return records replayed.
     * @throws IOException on a volume error.
     */
    public long replayUnwritten() throws IOException
    {
        final RecordLog.Cursor cursor = log.newCursor();
        cursor.position(log.headPosition());
        final ByteBuffer buffer = BufferUtil.allocateDirectAligned(log.maxRecordLength(), Slab.ALIGNMENT);
        long replayed = 0;
        while (cursor.next())
        {
            // A VERIFY record (digests, no data) is never written to a volume; one left by this group's time
            // as a destination has no WRITTEN flag.
            if ((cursor.flags() & (RECORD_WRITTEN | VerifyRecord.RECORD_VERIFY)) == 0)
            {
                if (ZeroRecord.isZeroes(cursor.flags()))
                {
                    volumes[cursor.volume()].write(cursor.offset(), zeros.duplicate(),
                        ZeroRecord.volumeLength(cursor, log.maxRecordLength()));
                    log.markFlag(cursor.position(), RECORD_WRITTEN);
                    replayed++;
                    continue;
                }
                buffer.clear();
                buffer.put(cursor.payload()).flip();
                volumes[cursor.volume()].write(cursor.offset(), buffer, cursor.length());
                log.markFlag(cursor.position(), RECORD_WRITTEN);
                replayed++;
            }
        }
        if (replayed > 0)
        {
            for (final Volume v : volumes)
            {
                v.force();
            }
        }
        return replayed;
    }

    // ----------------------------------------------------------------------------------------------------------
    // Front end (NBD worker threads)
    // ----------------------------------------------------------------------------------------------------------

    /**
     * One client write from its append to its acknowledgement: what each step hands the next. A worker's write
     * runs all steps on its thread ({@link #write}); a write the NBD front end submits to the volume itself
     * ({@link DirectVolumeIo}) appends on the connection's reader and finishes on its reaper. Reused: one per
     * worker thread, one per connection slot.
     */
    private static final class WriteInProgress
    {
        int vol;
        long offset;
        int length;
        boolean fua;
        int recordFlags;
        int firstRegion;
        int lastRegion;
        long startNs;
        /** The record's LSN, or -1 when the log was full and the regions went to the bitmap instead. */
        long lsn;
        /** The record's place in {@link #appendedTo}, or -1. */
        long position;
        RecordLog appendedTo;
        /** The payload of a zero record ({@link ZeroRecord}), for a write of zeros. */
        final ByteBuffer zeroPayload = ByteBuffer.allocateDirect(ZeroRecord.PAYLOAD_LENGTH);
    }

    /** Each worker thread's write in progress: a thread runs one write at a time. */
    private final ThreadLocal<WriteInProgress> workerWrites = ThreadLocal.withInitial(WriteInProgress::new);

    /**
     * @param completion when not null, a sync write may leave its acknowledgement to it instead of waiting here.
     * @return true when the write may be acknowledged; false when {@code completion} will be called instead.
     */
    private boolean write(final int vol, final long offset, final ByteBuffer src, final int length, final boolean fua,
        final int recordFlags, final WriteCompletion completion) throws IOException
    {
        return write(vol, offset, src, length, fua, recordFlags, completion, false);
    }

    /**
     * @param deallocate whether the volume's range is deallocated rather than written, where it can be (a zero
     *                   record's, for a discard); {@code src} is written where it cannot.
     */
    private boolean write(final int vol, final long offset, final ByteBuffer src, final int length, final boolean fua,
        final int recordFlags, final WriteCompletion completion, final boolean deallocate) throws IOException
    {
        enter();
        try
        {
            return acknowledge(writeUnacknowledged(vol, offset, src, length, fua, recordFlags, deallocate),
                completion);
        }
        finally
        {
            exit();
        }
    }

    /**
     * A write's first two steps (its record appended, its volume written); the caller acknowledges it, between
     * {@link #enter} and {@link #exit}.
     *
     * @return this thread's write, its LSN set (or not positive when its regions went to the bitmap).
     */
    private WriteInProgress writeUnacknowledged(final int vol, final long offset, final ByteBuffer src,
        final int length, final boolean fua, final int recordFlags, final boolean deallocate) throws IOException
    {
        final WriteInProgress w = workerWrites.get();
        w.vol = vol;
        w.offset = offset;
        w.length = length;
        w.fua = fua;
        w.recordFlags = recordFlags;
        append(w, src, true, false);
        Throwable failure = null;
        try
        {
            if (!deallocate || !volumes[vol].deallocate(offset, length))
            {
                volumes[vol].write(offset, src, length);
            }
        }
        catch (final IOException | RuntimeException ex)
        {
            failure = ex;
        }
        volumeWriteDone(w, failure);
        return w;
    }

    /**
     * Zeros over a range of a volume, as a TRIM or a WRITE_ZEROES asks: a zero record per region the range touches
     * (its length only, see {@link ZeroRecord}), each region's volume step done in turn, and then one wait for them
     * all, the partner's ACK of the last record or a FLUSH's force for FUA: a range of many regions costs one round
     * trip to the partner, not one per region (an fstrim of a thin volume's free space spans thousands).
     *
     * @param trim          a TRIM's: only where the volume can deallocate ({@link Volume#deallocates}) and does not
     *                      hold a hole already; deallocated rather than written, and counted in {@code trimmed_bytes}.
     *                      Nothing at all on a volume that cannot.
     * @param mayDeallocate a WRITE_ZEROES's: whether it may be deallocated rather than written, where the volume can.
     */
    private void writeZeroes(final int vol, final long offset, final long length, final boolean fua,
        final boolean trim, final boolean mayDeallocate) throws IOException
    {
        final Volume volume = volumes[vol];
        final long region = config.regionLength;
        final long end = Math.min(offset + length, volume.size());
        enter();
        try
        {
            WriteInProgress last = null;
            long lastLsn = 0;
            final int lastRegion = (int)((end - 1) / region);
            long at = offset;
            while (at < end)
            {
                final long regionEnd = (at / region + 1) * region;
                final int n = (int)(Math.min(end, regionEnd) - at);
                // A TRIM changes nothing where the volume keeps its data or would keep it (a piece of a thin
                // volume's chunk), as NBD allows, and sends nothing for a hole (fstrim trims the same free space
                // again at every run): zeros on both sides already.
                if (!trim || volume.deallocates(at, n) && !volume.isHole(at, n))
                {
                    // Each record marks its region hot, as any write does, and a cold one costs a force of the
                    // activity log: a cold region marks the range's next ones with it, one force for them all.
                    final int r = (int)(at / region);
                    activity.release(activity.markAhead(vol, r, Math.min(MARK_AHEAD, lastRegion - r + 1)));
                    last = writeUnacknowledged(vol, at, zeros.duplicate(), n, false, RecordFlags.ZEROES,
                        trim || mayDeallocate && volume.deallocates(at, n));
                    lastLsn = Math.max(lastLsn, last.lsn);
                    if (trim)
                    {
                        trimmedBytes.addAndGet(n);
                    }
                }
                at = Math.min(end, regionEnd);
            }
            if (fua)
            {
                flushWhileOpen(vol);
            }
            else if (last != null)
            {
                last.lsn = lastLsn;
                acknowledge(last, null);
            }
        }
        finally
        {
            exit();
        }
    }

    /**
     * A client's write or FLUSH begins: refused once the group closes, and counted until it ends, so that
     * {@link #close} unmaps the log and the bitmaps only once no client thread can touch them (an unmapped page
     * touched is a crash of the whole daemon, not an error).
     */
    private void enter() throws NbdErrorException
    {
        clientOperations.incrementAndGet();
        if (closed)
        {
            exit();
            throw new NbdErrorException(NbdProtocol.NBD_ESHUTDOWN, "group " + config.name + " is stopping");
        }
    }

    private void exit()
    {
        if (clientOperations.decrementAndGet() == 0 && closeDeferred)
        {
            try
            {
                closeFiles(); // The last operation a timed-out close left behind.
            }
            catch (final RuntimeException ex)
            {
                // Not this operation's failure, and nobody waits for the close any more: said, not thrown.
                System.getLogger("blockmoverd").log(System.Logger.Level.WARNING, "group " + config.name +
                    ": cannot close its files after its last write ended: " + ex);
            }
        }
    }

    /**
     * The first step of a write, before its volume write: its regions hot, its record in the log (or its regions in
     * the bitmap when the log is full), its regions counted in flight.
     *
     * @param mayWait whether it may wait for an overlapping write in flight or a resync fence; when not, it returns
     *                false instead, having changed nothing that matters (its regions may be hot: harmless).
     * @param stage   whether to stage the record for the front end's next {@link DirectIo#beforeSubmit}, which
     *                writes every staged record with one pwrite, rather than write it now.
     * @return true once appended.
     */
    private boolean append(final WriteInProgress w, final ByteBuffer src, final boolean mayWait, final boolean stage)
        throws IOException
    {
        final int vol = w.vol;
        final long offset = w.offset;
        final int length = w.length;
        final long startNs = System.nanoTime();
        final int regionLength = config.regionLength;
        final int firstRegion = (int)(offset / regionLength);
        final int lastRegion = (int)((offset + length - 1) / regionLength);
        final AtomicIntegerArray counts = inflight[vol];
        // A write of zeros logs only their length; the volume is written as for any write.
        final boolean zeroes = ZeroRecord.isZeroes(w.recordFlags);
        final ByteBuffer payload = zeroes ? ZeroRecord.encode(w.zeroPayload, length) : src;
        final int payloadLength = zeroes ? ZeroRecord.PAYLOAD_LENGTH : length;
        long lsn = -1;
        long position = -1;
        boolean wasStaged = false;
        RecordLog appendedTo = null;
        // Hot before the append, so before the partner or the volume may see the write: a crash of this host
        // resends the regions of the activity log, not every region.
        final long activityStamp = activity.mark(vol, firstRegion, lastRegion);
        w.startNs = startNs;
        w.firstRegion = firstRegion;
        w.lastRegion = lastRegion;
        if (w.fua)
        {
            lastFlushNs = startNs; // Before the append: the record itself tells the partner.
        }
        try
        {
            synchronized (appendLock)
            {
                if (frozen)
                {
                    // Checked under the append lock: once freeze() returns, no write can append any more.
                    throw new NbdErrorException(NbdProtocol.NBD_ESHUTDOWN, "group " + config.name +
                        " refuses writes: it is switching roles with " + config.peer + ", or frozen (a cluster " +
                        "demoted it; 'blockmover group thaw')");
                }
                // Overlapping writes must reach the volume in LSN order, the order the destination applies them in:
                // a write waits while its regions are fenced for resync or another write to its bytes is in flight.
                if (mustWait(vol, offset, length, firstRegion, lastRegion))
                {
                    if (!mayWait)
                    {
                        return false;
                    }
                    writesWaited.incrementAndGet();
                    do
                    {
                        waiters++;
                        try
                        {
                            // Checked again after counting itself: a write that ended meanwhile either saw the count
                            // and wakes this one, or ended before the count, and this check sees it.
                            if (mustWait(vol, offset, length, firstRegion, lastRegion))
                            {
                                awaitFenceLifted();
                            }
                        }
                        finally
                        {
                            waiters--;
                        }
                    }
                    while (mustWait(vol, offset, length, firstRegion, lastRegion));
                }
                for (int r = firstRegion; r <= lastRegion; r++)
                {
                    counts.incrementAndGet(r);
                }
                inFlight.add(vol, offset, length);
                activity.touch(vol, firstRegion, lastRegion);
                appendedTo = log;
                try
                {
                    position = stage && log.stagedRecords() < staged.length ?
                        log.stage(lastLsn + 1, vol, offset, w.recordFlags, payload, 0, payloadLength) :
                        RecordLog.NOT_STAGED;
                    if (position == RecordLog.NOT_STAGED || position == RecordLog.NO_SPACE)
                    {
                        writeStaged();
                        position = log.tryAppend(lastLsn + 1, vol, offset, w.recordFlags, payload, 0, payloadLength);
                        if (position < 0 && reclaimLogSpace())
                        {
                            position = log.tryAppend(lastLsn + 1, vol, offset, w.recordFlags, payload, 0,
                                payloadLength);
                        }
                    }
                    else if (position >= 0)
                    {
                        staged[log.stagedRecords() - 1] = w;
                        wasStaged = true;
                    }
                }
                catch (final UncheckedIOException ex)
                {
                    // The log's disk refused the record (it is preallocated, so a failing disk, not a full one). The
                    // write goes on as when the log is full, its regions in the bitmap: failing it would make the
                    // volume unwritable for a fault of another disk. Nothing was published; the next append
                    // overwrites whatever part of the record reached the file.
                    position = -1;
                    logAppendFailures.incrementAndGet();
                    logAppendError = ex.getMessage();
                }
                catch (final RuntimeException | Error ex)
                {
                    // A bug: the write ends here, so it must not stay counted in flight, or every later write to its
                    // bytes, a resync of its region and a resize of the log would wait for it forever.
                    endInFlight(vol, offset, length, firstRegion, lastRegion);
                    throw ex;
                }
                if (position >= 0)
                {
                    lsn = ++lastLsn;
                    if (zeroes)
                    {
                        zeroBytesLogged.addAndGet(length);
                    }
                    if (!wasStaged)
                    {
                        publishedLsn = lsn; // A staged record is published with its batch (writeStaged).
                    }
                }
                else
                {
                    trackInBitmap(w);
                }
                // Under the lock: writing a batch that failed (writeStaged, any appender) rewrites them.
                w.lsn = lsn;
                w.position = position;
                w.appendedTo = appendedTo;
            }
        }
        finally
        {
            activity.release(activityStamp);
        }
        if (lsn > 0 && !wasStaged)
        {
            shipperWakeup.run();
        }
        return true;
    }

    /**
     * The second step, once the volume write has ended: the record marked written, the regions released.
     *
     * @param failure why the volume write failed, or null.
     * @throws IOException the failure, or one marking the record.
     */
    private void volumeWriteDone(final WriteInProgress w, final Throwable failure) throws IOException
    {
        Throwable failed = failure;
        if (w.position >= 0 && w.position >= w.appendedTo.tailPosition())
        {
            // Still staged: its front end ended it without beforeSubmit (it never should). Written now, or its flag
            // would go to bytes that the batch then overwrites.
            publishStaged();
        }
        try
        {
            if (failed == null && w.position >= 0)
            {
                // Flagged before the regions are released: a later overlapping write cannot complete before this
                // record is marked, so replay after a crash never puts an older write over a newer one. In the log
                // it was appended to: a resize waits for this write before it replaces that log.
                w.appendedTo.markFlag(w.position, RECORD_WRITTEN);
            }
        }
        catch (final RuntimeException ex)
        {
            failed = ex;
        }
        if (failed != null && w.position >= 0)
        {
            // The client is told the write failed, yet its record is in the log and may reach the partner
            // already: resync the regions from what this volume holds, or the two would differ in silence
            // (a thin volume that ran out of space fails exactly like this).
            resyncAfterFailedWrite(w.vol, w.firstRegion, w.lastRegion);
        }
        endInFlight(w.vol, w.offset, w.length, w.firstRegion, w.lastRegion);
        if (failed instanceof IOException)
        {
            throw (IOException)failed;
        }
        if (failed != null)
        {
            throw (RuntimeException)failed;
        }
        final long writtenNs = System.nanoTime();
        localWriteNs.recordValue(Math.min(writtenNs - w.startNs, HIGHEST_LATENCY_NS));
        writes.incrementAndGet();
        bytesWritten.addAndGet(w.length);
    }

    /**
     * The last step: FUA forces, and a sync group's write waits for the partner's ACK, or leaves it to
     * {@code completion}.
     *
     * @return true when the write may be acknowledged; false when {@code completion} will be called instead.
     */
    private boolean acknowledge(final WriteInProgress w, final WriteCompletion completion) throws IOException
    {
        final long lsn = w.lsn;
        if (w.fua)
        {
            flush(w.vol);
        }
        else if (lsn > 0 && waitsForPartner())
        {
            if (completion != null && ackedLsn < lsn && defer(lsn, completion, w.startNs))
            {
                return false;
            }
            awaitPartner(lsn, false);
            partnerAckNs.recordValue(Math.min(System.nanoTime() - w.startNs, HIGHEST_LATENCY_NS));
        }
        return true;
    }

    /**
     * Leaves a sync write's acknowledgement to whoever publishes the partner's ACK for it.
     *
     * @return true when deferred; false when the caller must finish the write itself (no slot free, or the ACK came,
     * or waiting stopped applying, while it was being deferred).
     */
    private boolean defer(final long lsn, final WriteCompletion completion, final long startNs)
    {
        final int slot = deferredAcks.defer(lsn, completion, startNs);
        if (slot < 0)
        {
            return false;
        }
        // Re-checked after publishing the slot: whoever changed these published first and then completes the
        // deferred writes (partnerProgress, resolveDeferred), so either it sees the slot or this sees the change.
        if (ackedLsn >= lsn || closed || !waitsForPartner())
        {
            return !deferredAcks.takeBack(slot, lsn);
        }
        return true;
    }

    /**
     * A write counted in flight by its append has ended: writes waiting for its bytes may go on.
     */
    private void endInFlight(final int vol, final long offset, final int length, final int firstRegion,
        final int lastRegion)
    {
        inFlight.remove(vol, offset, length);
        final AtomicIntegerArray counts = inflight[vol];
        for (int r = firstRegion; r <= lastRegion; r++)
        {
            counts.decrementAndGet(r);
        }
        // The lock only when a writer waits: it counts itself in waiters, then checks the regions again, so either it
        // sees them released or this sees it. Taken for nothing, the lock held a front end's reaper, which ends
        // many writes in a row, behind a log resize that waits, holding it, for those very writes to end.
        if (waiters > 0)
        {
            synchronized (appendLock)
            {
                appendLock.notifyAll();
            }
        }
    }

    /**
     * The log could not take the write's record (full, or its disk refused it): its regions go to the bitmaps
     * instead. Nothing is lost; the RPO grows until resync. Under the append lock.
     */
    private void trackInBitmap(final WriteInProgress w)
    {
        final ConcurrentBitSet bits = bitmaps[w.vol].bits();
        for (int r = w.firstRegion; r <= w.lastRegion; r++)
        {
            bits.set(r);
        }
        bitmapsTouched = true;
        untrackedByLog.incrementAndGet();
    }

    /**
     * Writes the records a front end staged ({@link DirectVolumeIo#beginWrite}) with one pwrite and publishes them.
     * Under the append lock, before anything else appends or the front end submits their volume writes. If the log's
     * disk refuses them, their writes go on as when the log is full, their regions in the bitmaps; their LSNs are
     * taken back, as nothing after them was appended.
     *
     * @return records written.
     */
    private int writeStaged()
    {
        final int n = log.stagedRecords();
        if (n == 0)
        {
            return 0;
        }
        try
        {
            log.writeBatch();
            publishedLsn = lastLsn;
        }
        catch (final UncheckedIOException ex)
        {
            lastLsn -= n;
            logAppendFailures.addAndGet(n);
            logAppendError = ex.getMessage();
            for (int i = 0; i < n; i++)
            {
                final WriteInProgress w = staged[i];
                w.lsn = -1;
                w.position = -1;
                trackInBitmap(w);
            }
            return 0;
        }
        finally
        {
            Arrays.fill(staged, 0, n, null);
        }
        return n;
    }

    /**
     * Writes the staged records, then wakes the shipper once for all of them: one wake-up, one send.
     */
    private void publishStaged()
    {
        final int written;
        synchronized (appendLock)
        {
            written = writeStaged();
        }
        if (written > 0)
        {
            shipperWakeup.run();
        }
    }

    private void resyncAfterFailedWrite(final int vol, final int firstRegion, final int lastRegion)
    {
        markForResync(vol, firstRegion, lastRegion);
        failedWrites.incrementAndGet();
    }

    private void markForResync(final int vol, final int firstRegion, final int lastRegion)
    {
        synchronized (appendLock)
        {
            final ConcurrentBitSet bits = bitmaps[vol].bits();
            for (int r = firstRegion; r <= lastRegion; r++)
            {
                bits.set(r);
            }
            bitmapsTouched = true;
        }
    }

    /**
     * The partner got this record damaged, and so is this log's copy: its payload no longer matches the CRC taken
     * when it was appended (the disk or memory under the log changed it), so sending it again cannot help, and
     * before this every session asked for it {@link GroupReceiver#MAX_NACKS_PER_RECORD} times, ended and began
     * again, forever. A client write reached the volume from the client's buffer, not from the log, so the volume
     * holds its bytes or newer ones: the record is mended with the volume's bytes and sent again, and its regions
     * are marked for resync. Records then carry UNCLEAN until the resync has sent those regions, so the partner
     * knows it is not a consistent prefix meanwhile (the volume's bytes may be newer than the record's LSN).
     * Shipper thread; allocates (a rare path).
     *
     * @param record a cursor on the damaged record.
     * @return false when the record cannot be mended yet: its local volume write has not finished (its flags may
     *     still change, and the volume may not hold it yet).
     * @throws IOException when the volume cannot be read.
     */
    boolean mendDamagedRecord(final RecordLog.Cursor record) throws IOException
    {
        final int flags = record.flags();
        if ((flags & VerifyRecord.RECORD_VERIFY) != 0)
        {
            voidDamagedVerifyRecord(record);
            return true;
        }
        if ((flags & RECORD_WRITTEN) == 0)
        {
            return false;
        }
        if (ZeroRecord.isZeroes(flags))
        {
            mendDamagedZeroRecord(record);
            return true;
        }
        final int vol = record.volume();
        final long offset = record.offset();
        final int length = record.length();
        // Marked first: the mended record is then sent as UNCLEAN, and the resync covers the regions even when the
        // volume's bytes were read while a newer write to them was landing.
        markForResync(vol, (int)(offset / config.regionLength), (int)((offset + length - 1) / config.regionLength));
        final ByteBuffer bytes = BufferUtil.allocateDirectAligned(
            (length + Slab.ALIGNMENT - 1) & -Slab.ALIGNMENT, Slab.ALIGNMENT);
        volumes[vol].read(offset, bytes, length);
        log.rewritePayload(record.position(), bytes);
        recordsMended.incrementAndGet();
        return true;
    }

    /**
     * A zero record's payload is its length, and a damaged one no longer says it: every region the record may have
     * covered (at most the log's longest record from its offset) is resent, and it becomes a record of the shortest
     * range of zeros the partner takes, which that resync then overwrites (the record is sent as UNCLEAN).
     */
    private void mendDamagedZeroRecord(final RecordLog.Cursor record)
    {
        final int vol = record.volume();
        final long offset = record.offset();
        final long size = config.volumes.get(vol).size;
        markForResync(vol, (int)(offset / config.regionLength),
            (int)((Math.min(size, offset + log.maxRecordLength()) - 1) / config.regionLength));
        final ByteBuffer payload = ByteBuffer.allocateDirect(ZeroRecord.PAYLOAD_LENGTH);
        log.rewritePayload(record.position(), ZeroRecord.encode(payload, ZeroRecord.shortestAt(size, offset)));
        recordsMended.incrementAndGet();
    }

    /**
     * A VERIFY record carries digests of its region at its point of the write history, which cannot be taken again
     * later (the region may have been written since, and the partner would report a difference that is not). Its
     * payload becomes zeros, job id 0: the partner neither compares nor answers such a record, and it keeps the LSN
     * sequence whole. The running verify compares the region again, at a new point ({@link Verifier#voided}):
     * before, this record was sent damaged again and again, every session ended on it, and the group never
     * replicated again. Shipper thread; allocates (a rare path).
     */
    private void voidDamagedVerifyRecord(final RecordLog.Cursor record)
    {
        log.rewritePayload(record.position(), ByteBuffer.allocateDirect(record.length()));
        recordsMended.incrementAndGet();
        final Verifier v = verifier;
        if (v != null)
        {
            v.voided(record.volume(), record.offset());
        }
    }

    private void flush(final int vol) throws IOException
    {
        enter();
        try
        {
            flushWhileOpen(vol);
        }
        finally
        {
            exit();
        }
    }

    private void flushWhileOpen(final int vol) throws IOException
    {
        final long lsn = publishedLsn;
        final boolean partner = waitsForPartner();
        final boolean remote = partner && lsn > durableLsn;
        final long startNs = System.nanoTime();
        // Whether the records the partner lacks went out marked (RecordFlags.FLUSHING), so that it forces them on
        // its own: only if a client flushed within the window before this FLUSH, as the window is the marks'.
        final boolean partnerForcesUnasked = clientsFlushing();
        lastFlushNs = startNs;
        if (remote && !partnerForcesUnasked)
        {
            // The first FLUSH after a while without one: ask now, so that the partner's force runs beside ours.
            askPartnerToForce(lsn);
        }
        // Async, or the partner is away: the source log itself must survive a crash of this host. Where the
        // volume's device flush reaches the log's disk, the log's pages are written out first and that one flush
        // makes both durable: a disk serves its flushes one at a time, and two cost an async group half the IOPS
        // of an unreplicated export at queue depth 1 with a FLUSH after every write. Elsewhere the log's force
        // runs alongside the volume's (FlushLogForcer). Not when the partner already holds every record durably
        // (its DURABLE often comes before the FLUSH): a second device flush for nothing.
        final RecordLog sharing = partner || !flushCoversLog[vol] ? null : log;
        final long logWritten = sharing == null ? -1 : writeLogOutForDeviceFlush(sharing);
        final long logTicket = partner || logWritten >= 0 ? 0 : flushLogForcer.request();
        volumes[vol].force();
        if (logWritten >= 0)
        {
            logFlushedThrough(sharing, logWritten);
        }
        if (bitmapsTouched)
        {
            bitmapsTouched = false;
            for (final DirtyBitmap b : bitmaps)
            {
                b.force();
            }
        }
        if (remote && partnerForcesUnasked && durableLsn < lsn)
        {
            // While clients flush, the partner of a sync group forces on its own after every batch (GroupReceiver),
            // so its DURABLE is usually here by the time our own force is done: asking costs a wake-up of the
            // shipper and a frame each way, so ask only when it has not come.
            askPartnerToForce(lsn);
        }
        if (remote && awaitPartner(lsn, true))
        {
            remoteFlushNs.recordValue(Math.min(System.nanoTime() - startNs, HIGHEST_LATENCY_NS));
        }
        else if (logTicket > 0)
        {
            flushLogForcer.await(logTicket);
        }
        else if (remote)
        {
            forceLogRecords(); // The partner went away while this FLUSH waited for it.
        }
        flushes.incrementAndGet();
    }

    /**
     * @param vol a volume of the group.
     * @return whether that volume's device flush also makes the group's log durable (one disk), so that a FLUSH
     *     that needs the log durable flushes the disk once.
     */
    public boolean flushCoversLog(final int vol)
    {
        return flushCoversLog[vol];
    }

    private long writeLogOutForDeviceFlush(final RecordLog sharing)
    {
        synchronized (forceLock)
        {
            return log == sharing ? sharing.writeOutForDeviceFlush() : -1;
        }
    }

    /**
     * The volume's device flush is done: the log's records written out before it are durable. A log a resize put
     * in its place meanwhile is forced instead, as it holds the records copied from the one written out.
     */
    private void logFlushedThrough(final RecordLog sharing, final long position)
    {
        synchronized (forceLock)
        {
            if (log == sharing)
            {
                sharing.flushedThrough(position);
                logForcesSharedWithVolume.incrementAndGet();
                return;
            }
        }
        forceLogRecords();
    }

    /**
     * Makes the log's records durable; the released head waits until due (RecordLog.forceRecords): a FLUSH needs
     * the records, not the head.
     */
    private void forceLogRecords()
    {
        synchronized (forceLock)
        {
            log.forceRecords();
        }
    }

    /**
     * Makes log space the partner released reusable, by persisting the log's head alone: the records after it are
     * not forced (a FLUSH does that where this host's log must hold them). Called from housekeeping and when an
     * append finds no room, under the append lock; never on the shipper's thread, where a flush would delay
     * acknowledgements.
     *
     * @return whether space was reclaimed.
     */
    public boolean reclaimLogSpace()
    {
        return reclaimLogSpace(false);
    }

    /**
     * @param forDiscard keep the released room from appends until housekeeping has discarded it (see
     *                   RecordLog#persistHeadForDiscard); an append short of room must not wait for that.
     */
    private boolean reclaimLogSpace(final boolean forDiscard)
    {
        if (log.capacity() - log.usedBytes() <= log.freeBytes())
        {
            return false;
        }
        synchronized (forceLock)
        {
            if (forDiscard)
            {
                log.persistHeadForDiscard();
            }
            else
            {
                log.persistHead();
            }
        }
        return true;
    }

    /**
     * Housekeeping's {@link #reclaimLogSpace}: only once less than half the log is free for appends, or a second
     * after the head was last persisted. Each reclaim is a device flush; run on every housekeeping tick (ten a
     * second) under a steady write load, they stalled this host's disk: with the partner on another disk, 16 KiB
     * writes at queue depth 16 had a p99 of 13-21 ms against 5-7 ms without them. The price is replay after a
     * crash: recovery reads from the persisted head, so up to a second of records the partner already holds
     * (or half the log) is read again and skipped. Appends and resync still reclaim at once when out of room.
     *
     * @return whether space was reclaimed.
     */
    public boolean reclaimLogSpaceWhenDue()
    {
        final boolean due;
        synchronized (forceLock)
        {
            due = log.freeBytes() < log.capacity() / 2 ||
                System.nanoTime() - log.headPersistedNs() >= RECLAIM_INTERVAL_NS;
        }
        final boolean reclaimed = due && reclaimLogSpace(true);
        discardReleasedLog();
        return reclaimed;
    }

    /**
     * Spares this host's disk the released records the kernel would otherwise write back (RecordLog#discardReleased),
     * a slice at a time under the force lock, so that a FLUSH waiting for it waits for one slice at most. Bounded
     * per call (housekeeping calls ten times a second): what is left is written back as before.
     */
    private void discardReleasedLog()
    {
        long budget = DISCARD_BYTES_PER_CALL;
        while (budget > 0)
        {
            final long done;
            synchronized (forceLock)
            {
                done = log.discardReleased(Math.min(budget, DISCARD_SLICE_BYTES));
            }
            if (done == 0)
            {
                return;
            }
            budget -= done;
        }
    }

    /**
     * @return whether a write must wait before its append: its region is fenced for resync, or a write to the same
     *     bytes is still in flight. Under the append lock.
     */
    private boolean mustWait(final int vol, final long offset, final int length, final int firstRegion,
        final int lastRegion)
    {
        return (fencedVolume == vol && fencedRegion >= firstRegion && fencedRegion <= lastRegion) ||
            inFlight.overlaps(vol, offset, length);
    }

    private void awaitFenceLifted() throws NbdErrorException
    {
        try
        {
            appendLock.wait();
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            throw new NbdErrorException(NbdProtocol.NBD_EIO, "interrupted");
        }
    }

    void forceLog()
    {
        synchronized (forceLock)
        {
            log.force();
        }
    }

    /**
     * Asks the partner to force its log through {@code lsn} now, not at its next flush.interval: for a client's
     * FLUSH, or a source waiting on something only that force gives (the end of an initial sync, a switch's drain, a
     * verify's answers). Asking again for what was asked already does nothing: the shipper was woken then, and
     * sends the request once it has sent that far. Any thread.
     *
     * @param lsn the last LSN to make durable.
     */
    public void askPartnerToForce(final long lsn)
    {
        synchronized (progress)
        {
            if (lsn <= flushWantedLsn)
            {
                return;
            }
            flushWantedLsn = lsn;
        }
        shipperWakeup.run();
    }

    /**
     * @return whether a write must wait for the partner: a sync group whose partner is current, or any group told
     * to block while its partner is away.
     */
    private boolean waitsForPartner()
    {
        if (config.mode != GroupMode.SYNC || suspended)
        {
            return false;
        }
        return partnerCurrent || config.blockOnDisconnect;
    }

    /**
     * Waits until the partner holds (or holds durably) everything through lsn, or until waiting no longer applies.
     *
     * @return whether the partner confirmed.
     */
    private boolean awaitPartner(final long lsn, final boolean durable) throws IOException
    {
        // The partner usually answers within a few hundred microseconds: spin briefly before paying for a
        // monitor wait and the wake-up after it.
        final long spinUntilNs = System.nanoTime() + SPIN_BEFORE_WAIT_NS;
        while ((durable ? durableLsn : ackedLsn) < lsn)
        {
            if (System.nanoTime() > spinUntilNs || !waitsForPartner())
            {
                break;
            }
            Thread.onSpinWait();
        }
        if ((durable ? durableLsn : ackedLsn) >= lsn)
        {
            return true;
        }
        final LsnWaiters waiters = durable ? durableWaiters : ackWaiters;
        final int slot = waiters.enter(lsn);
        try
        {
            while ((durable ? durableLsn : ackedLsn) < lsn)
            {
                if (closed)
                {
                    throw new NbdErrorException(NbdProtocol.NBD_ESHUTDOWN, "group " + config.name + " is stopping");
                }
                if (!waitsForPartner())
                {
                    return false;
                }
                if (Thread.currentThread().isInterrupted())
                {
                    throw new NbdErrorException(NbdProtocol.NBD_EIO, "interrupted");
                }
                waiters.park(slot, MAX_PARTNER_PARK_NS);
            }
        }
        finally
        {
            waiters.leave(slot);
        }
        return true;
    }

    // ----------------------------------------------------------------------------------------------------------
    // Resync (the resyncer's thread)
    // ----------------------------------------------------------------------------------------------------------

    /**
     * Reads one dirty region and appends it to the log as a record, fenced against writes to the same region.
     *
     * @param vol    volume index.
     * @param region region index, dirty.
     * @param buffer aligned buffer of at least one region.
     * @return whether the region entered the log (false: no room yet, try later).
     * @throws IOException on a read error.
     */
    boolean resyncRegion(final int vol, final long region, final ByteBuffer buffer) throws IOException
    {
        final long offset = region * config.regionLength;
        final int length = (int)Math.min(config.regionLength, config.volumes.get(vol).size - offset);
        // Client writes come first: the resync appends only while half the log stays free after its record. It used
        // to fill the log to within two regions, so a steady writer's records found no room and fell back to the
        // bitmaps, dirtying again the regions just sent: the resync never finished (GroupIT on CI, a 16 MiB log).
        final long needed = Math.max(2L * (length + 128), log.capacity() / 2 + length + 128);
        if (log.freeBytes() < needed && (!reclaimLogSpace() || log.freeBytes() < needed))
        {
            return false;
        }
        synchronized (appendLock)
        {
            fencedVolume = vol;
            fencedRegion = region;
        }
        boolean appended = false;
        try
        {
            awaitQuiescent(vol, region);
            // An empty region (most of a new thin volume's) goes as the length of its zeros, not as its zeros; one
            // that is a hole of its file is not even read.
            final boolean zeroes = volumes[vol].isHole(offset, length) || readIsAllZeros(vol, offset, buffer, length);
            final ByteBuffer payload = zeroes ? ZeroRecord.encode(resyncZeroPayload, length) : buffer;
            final int payloadLength = zeroes ? ZeroRecord.PAYLOAD_LENGTH : length;
            // The region's dirty bit is cleared below, as its record enters the log, and the cleared bit may reach
            // the disk before the partner holds the record: a crash of this host loses the record with the log,
            // and only the activity log then says that the region must be sent again. So it is made hot first, as
            // a write's regions are; a cold region marks the next ones with it, one force for MARK_AHEAD.
            resyncMarked = true;
            final long activityStamp = activity.markAhead(vol, (int)region, MARK_AHEAD);
            try
            {
                synchronized (appendLock)
                {
                    writeStaged();
                    final long position = log.tryAppend(lastLsn + 1, vol, offset,
                        RECORD_RESYNC | RECORD_WRITTEN | (zeroes ? RecordFlags.ZEROES : 0), payload, 0, payloadLength);
                    if (position >= 0)
                    {
                        if (zeroes)
                        {
                            zeroBytesLogged.addAndGet(length);
                        }
                        activity.touch(vol, (int)region, (int)region);
                        publishedLsn = ++lastLsn;
                        bitmaps[vol].bits().clear(region);
                        appended = true;
                    }
                }
            }
            finally
            {
                activity.release(activityStamp);
            }
        }
        finally
        {
            liftFence();
        }
        if (appended)
        {
            regionsResent.incrementAndGet();
            shipperWakeup.run();
        }
        return appended;
    }

    /**
     * Reads a fenced region once the writes already in flight to it have reached the volume.
     */
    private void readQuiescent(final int vol, final long region, final long offset, final ByteBuffer buffer,
        final int length) throws IOException
    {
        awaitQuiescent(vol, region);
        volumes[vol].read(offset, buffer, length);
    }

    /**
     * Waits until the writes already in flight to a fenced region have reached the volume.
     */
    private void awaitQuiescent(final int vol, final long region)
    {
        while (inflight[vol].get((int)region) > 0)
        {
            Thread.onSpinWait();
        }
    }

    /**
     * @return whether the region read into {@code buffer} holds only zeros.
     */
    private boolean readIsAllZeros(final int vol, final long offset, final ByteBuffer buffer, final int length)
        throws IOException
    {
        volumes[vol].read(offset, buffer, length);
        return resyncZeroCheck.isAllZeros(buffer.clear().limit(length));
    }

    private void liftFence()
    {
        synchronized (appendLock)
        {
            fencedVolume = -1;
            fencedRegion = -1;
            appendLock.notifyAll();
        }
    }

    /**
     * Verify hook: fences a region exactly as {@link #resyncRegion} does, reads it, lets {@code digester} turn its
     * bytes into a record payload, and appends that record with the given flags (and {@link #RECORD_WRITTEN}, so a
     * replay never writes it to a volume). Its LSN is after every write the region holds and before every write
     * it does not, which is what makes a comparison on the destination meaningful while writes flow. Resyncer
     * thread only, so its fence never overlaps a resync fence.
     *
     * @param vol      volume index.
     * @param region   region index.
     * @param buffer   aligned buffer of at least one region.
     * @param payload  buffer the digester fills from index 0.
     * @param flags    record flags.
     * @param digester builds the payload from the region's bytes.
     * @return the record's LSN; {@link RecordLog#NO_SPACE} when there is no room or the group is frozen (try
     * later); {@link #REGION_DIRTY} when the region is dirty (its resend is pending, nothing to compare).
     * @throws IOException on a read error.
     */
    public long appendFencedRegion(final int vol, final long region, final ByteBuffer buffer, final ByteBuffer payload,
        final int flags, final RegionDigester digester) throws IOException
    {
        final long offset = region * config.regionLength;
        final int length = (int)Math.min(config.regionLength, config.volumes.get(vol).size - offset);
        if (log.freeBytes() < 2L * (config.regionLength + 128) && !reclaimLogSpace())
        {
            return RecordLog.NO_SPACE;
        }
        synchronized (appendLock)
        {
            if (frozen || bitmaps[vol].bits().get(region))
            {
                return frozen ? RecordLog.NO_SPACE : REGION_DIRTY;
            }
            fencedVolume = vol;
            fencedRegion = region;
        }
        long lsn = RecordLog.NO_SPACE;
        try
        {
            readQuiescent(vol, region, offset, buffer, length);
            final int n = digester.digest(buffer, length, payload);
            synchronized (appendLock)
            {
                // A write that fell back to the bitmap since the check above has no LSN: nothing to compare.
                writeStaged();
                if (bitmaps[vol].bits().get(region))
                {
                    lsn = REGION_DIRTY;
                }
                else if (log.tryAppend(lastLsn + 1, vol, offset, flags | RECORD_WRITTEN, payload, 0, n) >= 0)
                {
                    lsn = ++lastLsn;
                    publishedLsn = lsn;
                }
            }
        }
        finally
        {
            liftFence();
        }
        if (lsn > 0)
        {
            shipperWakeup.run();
        }
        return lsn;
    }

    /**
     * @param value the verify job runner of this group, or null.
     */
    public void verifier(final Verifier value)
    {
        verifier = value;
    }

    /**
     * @return the verify job runner of this group, or null.
     */
    public Verifier verifier()
    {
        return verifier;
    }

    /**
     * Verify's two hooks into the source's agents (see io.blockmover.replication.verify).
     */
    public interface Verifier
    {
        /**
         * One step of the running verify, on the resyncer's thread when no region is dirty (resync goes first).
         *
         * @return work done.
         */
        int doWork();

        /**
         * A VERIFY_RESULT from the partner, on the shipper's thread.
         *
         * @param header  the frame.
         * @param payload its payload, position 0..limit.
         */
        void onResult(io.blockmover.protocol.FrameHeader header, ByteBuffer payload);

        /**
         * A VERIFY record was found damaged in this host's log and voided: no result will come for it, so the job
         * it belongs to, if it still runs, compares its region again. On the shipper's thread.
         *
         * @param volume the record's volume.
         * @param offset the record's offset: its region's first byte.
         */
        void voided(int volume, long offset);
    }

    /**
     * Turns the bytes of a fenced region into a record payload (see {@link #appendFencedRegion}).
     */
    @FunctionalInterface
    public interface RegionDigester
    {
        /**
         * @param region  the region's bytes from position 0.
         * @param length  bytes of the region.
         * @param payload where to write the payload, from index 0.
         * @return the payload length.
         */
        int digest(ByteBuffer region, int length, ByteBuffer payload);
    }

    // ----------------------------------------------------------------------------------------------------------
    // Partner progress (the shipper's thread)
    // ----------------------------------------------------------------------------------------------------------

    void linked(final Runnable wakeup)
    {
        shipperWakeup = wakeup;
        linked = true;
    }

    void unlinked()
    {
        linked = false;
        partnerApplyFailing = false;
        shipperWakeup = () -> { };
        partnerCurrent = false;
        wakeAllWaiters();
    }

    void partnerProgress(final long acked, final long durable)
    {
        synchronized (progress)
        {
            if (acked > ackedLsn)
            {
                ackedLsn = acked;
            }
            if (durable > durableLsn)
            {
                durableLsn = durable;
            }
        }
        progressPublished();
    }

    /**
     * A session starts: the partner holds exactly this, durably (it forces its log before answering OPEN). Usually
     * more than the group heard of; less when the partner dropped records damaged in its log: those are no longer
     * durable there, so a FLUSH waits for them again and {@link #isInSync} says no until they are resent. Shipper
     * thread, before it sends.
     *
     * @param held the highest LSN the partner holds.
     */
    void partnerHolds(final long held)
    {
        synchronized (deferredAcks)
        {
            // Progress may move back here: the deferred writes' next scan starts no higher, before anyone reads it.
            deferredAcks.rewind(held);
            synchronized (progress)
            {
                ackedLsn = held;
                durableLsn = held;
            }
        }
        progressPublished();
    }

    /**
     * Wakes the writers and FLUSHes that what the partner holds now covers, and completes deferred writes.
     */
    private void progressPublished()
    {
        ackWaiters.signal(ackedLsn);
        durableWaiters.signal(durableLsn);
        resolveDeferred();
    }

    /**
     * @param failing what the partner said last: its applier cannot write its volumes. Shipper thread.
     */
    void partnerApplyFailing(final boolean failing)
    {
        partnerApplyFailing = failing;
    }

    /**
     * @return whether the linked partner reported that it cannot apply to its volumes. Any thread.
     */
    public boolean isPartnerApplyFailing()
    {
        return partnerApplyFailing;
    }

    /**
     * Wakes every waiting writer to re-check whether it should wait at all.
     */
    private void wakeAllWaiters()
    {
        ackWaiters.signalAll();
        durableWaiters.signalAll();
        resolveDeferred();
    }

    /**
     * Completes the deferred writes that no longer wait: all of them, failed, once the group closes; all of them,
     * acknowledged, once waiting stops applying (as {@link #awaitPartner} returns then); else those acknowledged.
     * Runs after each change to what it reads: the partner's progress, and everything that wakes all waiters.
     */
    private void resolveDeferred()
    {
        final long nowNs = System.nanoTime();
        if (closed)
        {
            deferredAcks.completeUpTo(DeferredAcks.EVERY_WRITE, NbdProtocol.NBD_ESHUTDOWN, null, nowNs);
        }
        else if (!waitsForPartner())
        {
            deferredAcks.completeUpTo(DeferredAcks.EVERY_WRITE, 0, null, nowNs);
        }
        else if (deferredAcks.pending() > 0)
        {
            // The progress read under the monitor: a completer that read it earlier and came second would scan
            // past writes deferred since it moved back (DeferredAcks).
            synchronized (deferredAcks)
            {
                deferredAcks.completeUpTo(ackedLsn, 0, partnerAckNs, nowNs);
            }
        }
    }

    /**
     * Sync writes wait for the partner only once it is current: no dirty region left and a short backlog, so a
     * write does not queue behind a whole catch-up.
     */
    void updateCurrent(final long backlogLimitBytes)
    {
        // Hysteresis: a partner becomes current once its backlog is short, and stays current while linked and
        // clean, whatever the load (sync writes wait for it then, so the backlog cannot run away); otherwise a
        // busy group would flip between waiting and not waiting, and its RPO with it.
        final boolean clean = linked && !suspended && dirtyRegions() == 0;
        final boolean current = clean && (partnerCurrent || (publishedLsn - ackedLsn) * 4096L < backlogLimitBytes);
        if (current != partnerCurrent)
        {
            partnerCurrent = current;
            wakeAllWaiters();
        }
        if (!linked)
        {
            rpoMarkLsn = -1;
            return;
        }
        // RPO in seconds is the age of the oldest write the partner may lack. Under a steady stream of writes the
        // partner is never fully drained, so a mark remembers when LSN rpoMarkLsn was the newest: once that LSN is
        // durable there, every write older than the mark is, and the RPO is at most the mark's age.
        final long durable = durableLsn;
        final long published = publishedLsn;
        if (durable >= published || (rpoMarkLsn >= 0 && durable >= rpoMarkLsn))
        {
            if (dirtyRegions() == 0)
            {
                final long nowMs = System.currentTimeMillis();
                caughtUpMs = durable >= published ? nowMs : rpoMarkMs;
                rpoMarkLsn = durable >= published ? -1 : published;
                rpoMarkMs = nowMs;
            }
        }
        else if (rpoMarkLsn < 0)
        {
            rpoMarkLsn = published;
            rpoMarkMs = System.currentTimeMillis();
        }
    }

    /**
     * @return whether a client asked for a FLUSH or wrote with FUA within {@link #FLUSHING_WINDOW_NS}: the records
     *     sent now say so to the partner.
     */
    boolean clientsFlushing()
    {
        return System.nanoTime() - lastFlushNs < FLUSHING_WINDOW_NS;
    }

    /**
     * @return the highest LSN the partner was asked to make durable (a client's FLUSH, {@link #askPartnerToForce}).
     */
    public long flushWantedLsn()
    {
        return flushWantedLsn;
    }

    public long publishedLsn()
    {
        return publishedLsn;
    }

    /**
     * @return the highest LSN the partner acknowledged holding. Any thread.
     */
    public long ackedLsn()
    {
        return ackedLsn;
    }

    public long durableLsn()
    {
        return durableLsn;
    }

    public boolean isLinked()
    {
        return linked;
    }

    public boolean isPartnerCurrent()
    {
        return partnerCurrent;
    }

    boolean isSuspended()
    {
        return suspended;
    }

    public void suspended(final boolean value)
    {
        suspended = value;
        wakeAllWaiters();
    }

    /**
     * The group's on-disconnect setting changed: writes waiting for an absent partner re-check whether they still
     * wait (to continue: they go on, tracked).
     */
    public void onDisconnectChanged()
    {
        wakeAllWaiters();
    }

    /**
     * Refuses new writes (a role switch is draining the group), or accepts them again.
     *
     * @param value whether writes are refused.
     */
    public void freeze(final boolean value)
    {
        synchronized (appendLock)
        {
            frozen = value;
        }
    }

    /**
     * Begins moving the group to a new log, of another size, with nothing resent: every record not yet released
     * is copied into {@code next} byte for byte (LSNs, flags, CRCs), while writes go on ({@link #continueLogCopy}),
     * then the last of them while writes wait ({@link #finishLogCopy}), which renames {@code next} over the old
     * log's file and hands the old log to be closed. None is refused, and a write's record is in the old log or the
     * new one, never lost between. Conductor thread, with no session from here to the end: the shipper alone releases
     * records, which the copy needs kept, and a new session reads the new log from where the partner is.
     *
     * @param next the new log, open and empty.
     * @return where the copy goes on from, or -1 when the records need more than half of {@code next}.
     */
    public long startLogCopy(final RecordLog next)
    {
        return next.startCopyFrom(log);
    }

    /**
     * Copies more of the records, writes going on: space before the old log's head may be reclaimed and reused
     * meanwhile, never the records after it.
     *
     * @param next     the new log.
     * @param resumeAt what the last step returned.
     * @param maxBytes how much to copy at most.
     * @return where the copy goes on from, or -1 when the appends outgrew {@code next} ({@code next} is empty
     *     again: start again once they fit).
     */
    public long continueLogCopy(final RecordLog next, final long resumeAt, final long maxBytes)
    {
        return next.continueCopyFrom(log, resumeAt, maxBytes);
    }

    /**
     * @param resumeAt what the last step of the copy returned.
     * @return whether so little is left that writes may wait for it ({@link #finishLogCopy}).
     */
    public boolean isLogCopyNearlyDone(final long resumeAt)
    {
        return log.tailPosition() - resumeAt <= LOG_COPY_LAST_BYTES;
    }

    /**
     * Ends the copy: writes wait while the records appended since the last step are copied and the flags of the
     * others taken again, with no write in flight (one between its append and its flag would mark the wrong log);
     * then {@code next} takes the old log's place and file.
     *
     * @param next     the new log.
     * @param resumeAt what the last step returned.
     * @param target   the group's log file.
     * @param closer   closes the old log once replaced (its file renamed over): the last close of a deleted file
     *                 frees its pages and blocks, 0.1-0.2 s for 256 MiB here, not for the caller to wait for.
     * @return records moved, or -1 when they now need more than half of {@code next}: nothing changed ({@code next}
     *     is empty again).
     */
    public long finishLogCopy(final RecordLog next, final long resumeAt, final Path target,
        final Consumer<RecordLog> closer)
    {
        final long pauseStartNs = System.nanoTime();
        final RecordLog old = log;
        long moved = Long.MIN_VALUE;
        drainWanted = true;
        try
        {
            while (moved == Long.MIN_VALUE)
            {
                synchronized (appendLock)
                {
                    // New writes wait at the lock; those under way end with their local volume write.
                    final long deadlineNs = System.nanoTime() + DRAIN_ATTEMPT_NS;
                    while (hasWritesInFlight() && System.nanoTime() - deadlineNs < 0)
                    {
                        LockSupport.parkNanos(20_000);
                    }
                    if (!hasWritesInFlight())
                    {
                        moved = replaceLog(old, next, resumeAt, target);
                    }
                }
                if (moved == Long.MIN_VALUE)
                {
                    // A front end's reader may wait at the lock holding appended writes it has not submitted yet
                    // (NBD over Linux AIO submits a socket read's worth at once): let it in, so that it sees
                    // drainWanted and submits them.
                    LockSupport.parkNanos(DRAIN_ATTEMPT_NS / 10);
                }
            }
        }
        finally
        {
            drainWanted = false;
        }
        logReplacePauseNs = System.nanoTime() - pauseStartNs;
        if (moved >= 0)
        {
            // Outside the locks: no thread can reach the old log any more (writes waited 122 ms for its close when
            // it was done under the append lock). Its file is gone: failing to close it loses nothing, and must not
            // look like a failed resize (the caller would close the new log, now the group's).
            closer.accept(old);
        }
        return moved;
    }

    /**
     * The log swap itself, under the append lock with no write in flight.
     *
     * @return records moved, or -1 (see {@link #finishLogCopy}).
     */
    private long replaceLog(final RecordLog old, final RecordLog next, final long resumeAt, final Path target)
    {
        writeStaged(); // None with no write in flight; cheap to be sure, as the copy takes published records only.
        synchronized (forceLock)
        {
            final long moved = next.finishCopyFrom(old, resumeAt);
            if (moved >= 0)
            {
                try
                {
                    next.renameTo(target);
                }
                finally
                {
                    if (next.path().equals(target))
                    {
                        log = next; // Its file is the group's now, even when its directory failed to force.
                    }
                }
            }
            return moved;
        }
    }

    /**
     * @return how long writes waited for the last {@link #finishLogCopy}, in nanoseconds. Conductor thread.
     */
    public long logReplacePauseNs()
    {
        return logReplacePauseNs;
    }

    /**
     * @return whether a write is between its append and the end of its local volume write.
     */
    public boolean hasWritesInFlight()
    {
        for (final AtomicIntegerArray counts : inflight)
        {
            for (int i = 0; i < counts.length(); i++)
            {
                if (counts.get(i) != 0)
                {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * @return whether the partner's volumes may differ from ours outside what the log holds, so they are not a
     * consistent prefix of our writes: regions are dirty, or a seeded initial sync has not compared every region
     * yet (its bitmap is clean, yet any region not compared may differ). Any thread.
     */
    public boolean mayDifferBeyondLog()
    {
        return config.seeding || dirtyRegions() > 0;
    }

    /**
     * @return whether the partner holds durably every write and every region: safe to switch roles.
     */
    public boolean isInSync()
    {
        return linked && durableLsn >= publishedLsn && dirtyRegions() == 0;
    }

    long caughtUpMs()
    {
        return caughtUpMs;
    }

    /**
     * Continuity lost (the partner lost its log, or is ahead of ours after a crash of this host): forget the log
     * and send every region again, continuing the LSN sequence after both sides' highest.
     *
     * @param partnerLsn the highest LSN the partner holds.
     */
    public void restartFrom(final long partnerLsn)
    {
        restartFrom(partnerLsn, true);
    }

    /**
     * After a crash of this host (its log and page cache lost): the regions it was writing are dirty already
     * ({@link #recoverAfterHostCrash}), so a partner that holds more or less than the log now does, as it will,
     * needs only those resent, as long as it lost nothing it held when the activity log last shrank.
     *
     * @param partnerLsn the highest LSN the partner holds.
     * @return whether that was so, and the sequence continues after both sides' highest; false: call
     *     {@link #restartFrom(long)}.
     */
    public boolean restartAfterHostCrash(final long partnerLsn)
    {
        if (!hostCrashRecovery || partnerLsn < activity.settledLsn())
        {
            return false;
        }
        restartFrom(partnerLsn, false);
        return true;
    }

    /**
     * The partner dropped records from its log because one was damaged there, and holds less than this log's head:
     * this host released those records (the partner had them durably). Every record it no longer holds is among
     * the ones it dropped, whose regions it names, or still in this log: marking both dirty and continuing the
     * sequence after both sides' highest resends those regions instead of every region.
     *
     * @param partnerLsn the highest LSN the partner holds.
     * @param ranges     the partner's dropped regions, as {volume, first region, last region} lists.
     * @return false when a range does not fit this group's volumes: call {@link #restartFrom(long)}.
     */
    public boolean restartAfterPartnerDropped(final long partnerLsn, final List<?> ranges)
    {
        for (final Object range : ranges)
        {
            if (!(range instanceof List<?> r) || r.size() != 3 || !(r.get(0) instanceof Number v) ||
                !(r.get(1) instanceof Number first) || !(r.get(2) instanceof Number last) || v.intValue() < 0 ||
                v.intValue() >= volumes.length || first.longValue() < 0 || last.longValue() < first.longValue() ||
                last.longValue() >= regionCount(v.intValue()))
            {
                return false;
            }
        }
        for (final Object range : ranges)
        {
            final List<?> r = (List<?>)range;
            markForResync(((Number)r.get(0)).intValue(), ((Number)r.get(1)).intValue(),
                ((Number)r.get(2)).intValue());
        }
        final RecordLog.Cursor records = log.newCursor();
        while (records.next())
        {
            final int length = ZeroRecord.volumeLength(records, log.maxRecordLength());
            final long end = Math.min(config.volumes.get(records.volume()).size,
                records.offset() + Math.max(length, 1)) - 1;
            markForResync(records.volume(), (int)(records.offset() / config.regionLength),
                (int)(end / config.regionLength));
        }
        restartFrom(partnerLsn, false);
        return true;
    }

    /**
     * A session started: continuity after a crash of this host is settled one way or the other.
     */
    public void sessionStarted()
    {
        hostCrashRecovery = false;
    }

    /**
     * After a crash of this host: marks dirty the regions its activity log holds hot, which the writes lost with
     * the log and the page cache may have left different on the partner; every region when the activity log
     * cannot say (a group made before it existed). Before a session starts.
     *
     * @return regions marked dirty, or -1 when every region was.
     */
    public long recoverAfterHostCrash()
    {
        hostCrashRecovery = activity.existed();
        long marked = -1;
        synchronized (appendLock)
        {
            if (hostCrashRecovery)
            {
                marked = 0;
                for (int vol = 0; vol < bitmaps.length; vol++)
                {
                    final ConcurrentBitSet hot = activity.hot(vol);
                    final ConcurrentBitSet dirty = bitmaps[vol].bits();
                    for (long r = hot.nextSetBit(0); r >= 0; r = hot.nextSetBit(r + 1))
                    {
                        if (dirty.set(r))
                        {
                            marked++;
                        }
                    }
                }
            }
            for (final DirtyBitmap b : bitmaps)
            {
                if (!hostCrashRecovery)
                {
                    b.bits().setAll();
                }
                b.force();
            }
        }
        return marked;
    }

    /**
     * Housekeeping, on the conductor's thread: shrinks the activity log once it holds more than {@code limit}
     * regions. A checkpoint begins at the LSN published now; once the partner holds every write through it
     * durably, the regions not written since, with no write in flight, are cleared after a force of the volumes
     * (and of the dirty bitmaps, so a region tracked only there stays tracked). A device flush per checkpoint, so
     * only when the set outgrows its limit, or once a resync, which makes every region it sends hot, is done.
     *
     * @param limit the most hot regions (over every volume) kept without a checkpoint.
     * @return 1 when it did something.
     * @throws IOException when a volume cannot be forced.
     */
    public int checkpointActivity(final long limit) throws IOException
    {
        if (checkpointLsn < 0)
        {
            // A finished resync leaves every region it sent hot: once the partner holds them, a crash of this host
            // need not resend them, so they go at the next checkpoint, as a write's do past the limit.
            final boolean resyncDone = resyncMarked && dirtyRegions() == 0;
            if (activity.hotRegions() <= limit && !resyncDone)
            {
                return 0;
            }
            resyncMarked = false;
            synchronized (appendLock)
            {
                activity.beginCheckpoint();
                checkpointLsn = publishedLsn;
            }
            return 1;
        }
        if (durableLsn < checkpointLsn)
        {
            return 0; // The partner does not hold every write through it durably yet, or is away.
        }
        if (activity.chooseCandidates(inflight) > 0)
        {
            for (final Volume v : volumes)
            {
                v.force();
            }
            forceBitmaps();
            if (activity.endCheckpoint(checkpointLsn) < 0)
            {
                return 0; // Writers kept it from clearing: again at the next call, candidates chosen anew.
            }
        }
        checkpointLsn = -1;
        return 1;
    }

    /**
     * @return regions in the activity log: what a crash of this host would resend.
     */
    public long activityRegions()
    {
        return activity.hotRegions();
    }

    private void restartFrom(final long partnerLsn, final boolean everyRegion)
    {
        synchronized (appendLock)
        {
            for (final DirtyBitmap b : bitmaps)
            {
                if (everyRegion)
                {
                    b.bits().setAll();
                }
                b.force();
            }
            writeStaged();
            lastLsn = Math.max(lastLsn, partnerLsn);
            log.reset(lastLsn + 1);
            publishedLsn = lastLsn;
        }
        synchronized (progress)
        {
            ackedLsn = lastLsn;
            durableLsn = lastLsn;
        }
        wakeAllWaiters();
    }

    /**
     * @return records found damaged in this host's log and mended from the volume since the daemon started.
     */
    public long recordsMended()
    {
        return recordsMended.get();
    }

    public long dirtyRegions()
    {
        long n = 0;
        for (final DirtyBitmap b : bitmaps)
        {
            n += b.bits().cardinality();
        }
        return n;
    }

    /**
     * @return bytes the destination may not hold durably: the log not yet released plus dirty regions.
     */
    public long rpoBytes()
    {
        long n = log.usedBytes();
        for (int i = 0; i < bitmaps.length; i++)
        {
            n += DirtyBitmap.dirtyBytes(bitmaps[i].bits(), config.regionLength, config.volumes.get(i).size);
        }
        return n;
    }

    public void forceBitmaps()
    {
        for (final DirtyBitmap b : bitmaps)
        {
            b.force();
        }
    }

    /**
     * Stops accepting writes, forces what is open and closes the files. Safe to call twice.
     */
    @Override
    public void close()
    {
        if (closed)
        {
            return;
        }
        closed = true;
        wakeAllWaiters();
        // Writes and FLUSHes under way end soon (those waiting for the partner were just woken, and fail).
        final long deadlineNs = System.nanoTime() + closeWaitNs;
        while (clientOperations.get() > 0 && System.nanoTime() < deadlineNs)
        {
            LockSupport.parkNanos(100_000);
        }
        if (clientOperations.get() > 0)
        {
            // A disk that holds a write this long (failing, or a network disk gone) must not crash the daemon when
            // the write ends: its reaper would mark the record in an unmapped log. The files stay open until the
            // last such operation ends, which closes them (exit). Checked again after the flag is set: an exit
            // that ended before it saw the flag leaves the close to this thread.
            closeDeferred = true;
            if (clientOperations.get() > 0)
            {
                return;
            }
        }
        closeFiles();
    }

    /**
     * @return whether {@link #close} left the files open for client operations still under way, until they end.
     */
    public boolean isClosePending()
    {
        return closeDeferred && !filesClosed.get();
    }

    /**
     * @return how long {@link #close} waits for client operations under way before it leaves the files to the last
     *     of them.
     */
    public long closeWaitNs()
    {
        return closeWaitNs;
    }

    /**
     * Sets {@link #closeWaitNs()}: for tests, which cannot wait 10 s.
     */
    void closeWaitNs(final long nanos)
    {
        closeWaitNs = nanos;
    }

    /**
     * Forces and closes the files, once: from {@link #close}, or from the last client operation it left under way.
     */
    private void closeFiles()
    {
        if (!filesClosed.compareAndSet(false, true))
        {
            return;
        }
        flushLogForcer.close();
        forceLog();
        for (final DirtyBitmap b : bitmaps)
        {
            b.force();
            b.close();
        }
        activity.close();
        log.close();
        for (final Volume v : volumes)
        {
            v.close();
        }
    }

    /**
     * A read or write the NBD front end submits to the volume itself (Linux AIO, many per system call): for a write,
     * the steps of {@link #write} around it, the append on the connection's reader, the rest on its reaper. The
     * group counts either as a client operation from begin to end, so the volume's descriptor stays open meanwhile.
     * One per connection slot.
     */
    private final class DirectVolumeIo implements DirectIo
    {
        private final WriteInProgress w = new WriteInProgress();
        private final int vol;

        DirectVolumeIo(final int vol)
        {
            this.vol = vol;
        }

        @Override
        public boolean beginWrite(final long offset, final ByteBuffer src, final int length, final boolean mayWait)
            throws IOException
        {
            enter();
            boolean begun = false;
            try
            {
                w.vol = vol;
                w.offset = offset;
                w.length = length;
                w.fua = false;
                w.recordFlags = 0;
                begun = append(w, src, mayWait, true);
                return begun;
            }
            finally
            {
                if (!begun)
                {
                    exit();
                }
            }
        }

        @Override
        public boolean endWrite(final long result, final WriteCompletion completion) throws IOException
        {
            try
            {
                volumeWriteDone(w, result == w.length ? null : LinuxAio.failure(result, w.length));
                return acknowledge(w, completion);
            }
            finally
            {
                exit();
            }
        }

        @Override
        public void beginRead() throws IOException
        {
            enter();
        }

        @Override
        public void endRead()
        {
            exit();
        }

        @Override
        public boolean drainWanted()
        {
            return drainWanted;
        }

        @Override
        public void beforeSubmit()
        {
            publishStaged();
        }
    }

    /**
     * One volume of the group as the NBD server sees it.
     */
    private final class ReplicatedExport implements NbdExport
    {
        private final int index;
        private final String name;

        ReplicatedExport(final int index)
        {
            this.index = index;
            this.name = config.name + "/" + config.volumes.get(index).exportSuffix();
        }

        @Override
        public String name()
        {
            return name;
        }

        @Override
        public long size()
        {
            return config.volumes.get(index).size;
        }

        @Override
        public boolean isReadOnly()
        {
            return false;
        }

        @Override
        public void read(final long offset, final ByteBuffer dst, final int length) throws IOException
        {
            volumes[index].read(offset, dst, length);
        }

        @Override
        public int directFd()
        {
            return volumes[index].directFd();
        }

        @Override
        public DirectIo newDirectIo()
        {
            return new DirectVolumeIo(index);
        }

        @Override
        public void write(final long offset, final ByteBuffer src, final int length, final boolean fua)
            throws IOException
        {
            SourceGroup.this.write(index, offset, src, length, fua, 0, null);
        }

        @Override
        public boolean writeDeferrable(final long offset, final ByteBuffer src, final int length, final boolean fua,
            final WriteCompletion completion) throws IOException
        {
            return SourceGroup.this.write(index, offset, src, length, fua, 0, completion);
        }

        @Override
        public void flush() throws IOException
        {
            SourceGroup.this.flush(index);
        }

        @Override
        public long allocationRun(final long offset, final long end)
        {
            return volumes[index].allocationRun(offset, end);
        }

        /**
         * Advisory in NBD: what a trimmed range reads afterwards is unspecified. Where this volume deallocates (a
         * sparse file, a thin LV, a device with WRITE ZEROES) the range is given back, here and on the partner: a
         * zero record per region it touches, in write order with the writes around it, deallocated on both sides;
         * a VM's discards keep both thin, the few KiB of a file system's online discard too. Elsewhere, and on a
         * thin LV where a piece is not made of whole chunks of its pool, the data stays as it was, and nothing is
         * replicated. Where a deallocation is refused after all (once per volume), the zeros are written, so that
         * both sides still hold the same bytes.
         */
        @Override
        public void trim(final long offset, final long length) throws IOException
        {
            SourceGroup.this.writeZeroes(index, offset, length, false, true, false);
        }

        @Override
        public void writeZeroes(final long offset, final long length, final boolean fua) throws IOException
        {
            writeZeroes(offset, length, fua, false);
        }

        /**
         * Replicated as records of zeros, one per region the range touches, so order and recovery stay the same;
         * each record holds the length of its zeros, not the zeros (ZeroRecord). The volume's zeros are written,
         * or, where the client lets us deallocate, deallocated where the volume can (as for a TRIM): a VM's zeroing
         * (qemu's detect-zeroes=unmap) keeps a thin source thin.
         */
        @Override
        public void writeZeroes(final long offset, final long length, final boolean fua, final boolean mayDeallocate)
            throws IOException
        {
            SourceGroup.this.writeZeroes(index, offset, length, fua, false, mayDeallocate);
        }
    }
}
