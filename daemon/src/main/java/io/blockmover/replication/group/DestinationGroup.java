package io.blockmover.replication.group;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

import org.HdrHistogram.ConcurrentHistogram;
import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.UnsafeBuffer;

import io.blockmover.buffer.Slab;
import io.blockmover.io.Volume;
import io.blockmover.io.ZeroCheck;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.replication.verify.DestinationVerifier;
import io.blockmover.replication.verify.VerifyRecord;

/**
 * The destination side of a group: its volumes (never writable by anyone else while it is a destination), its
 * record log, and the applier, the agent that writes logged records to the volumes strictly in LSN order. Between
 * forces the volumes hold a prefix of the source's writes; a record's log space is released only after the volume
 * that received it was forced, so a crash replays from the last release and ends on the same prefix.
 */
public final class DestinationGroup implements Agent, AutoCloseable
{
    static final long HIGHEST_LATENCY_NS = TimeUnit.SECONDS.toNanos(60);
    /** The longest the applier sleeps with nothing to do (bounds how late it notices anything not signalled). */
    private static final long IDLE_NAP_NS = TimeUnit.MILLISECONDS.toNanos(20);
    /** The receiver wakes the applier once this much is waiting; less waits at most {@link #APPLY_DELAY_NS}. */
    private static final long APPLY_BATCH_BYTES = 256 * 1024;
    private static final long APPLY_DELAY_NS = TimeUnit.MILLISECONDS.toNanos(2);
    private final GroupConfig config;
    private final Volume[] volumes;
    // Replaced only by the applier, between two duty cycles, while no session runs (requestLogReplacement).
    private volatile RecordLog log;
    private RecordLog.Cursor cursor;
    /**
     * Records at least this long are written to the volume with O_DIRECT, from a copy in {@link #buffer}: one such
     * write keeps the device busy on its own, and through the page cache it cost the applier the page cache's
     * bookkeeping, the write-back at the next force, and the drop of the pages after it.
     */
    static final int DIRECT_APPLY_LENGTH = 256 * 1024;

    // For VERIFY records: the region read back (O_DIRECT, so aligned) to be digested. For long records: their
    // aligned copy.
    private final ByteBuffer buffer;
    private final UnsafeBuffer bufferView;
    /** Short aligned records on their way to the volumes, written together; null: all through the page cache. */
    private final ApplyBatch batch;
    // The record a failure names: the cursor's, or the batched one whose write failed.
    private long failingLsn;
    private int failingVolume;
    private final NanoClock clock;
    private final long configuredForceBytes;
    private long forceBytes;
    private final long forceIntervalNs;
    private final boolean[] unforced;
    private final DestinationVerifier verifier;
    private final WakeableIdleStrategy idle = new WakeableIdleStrategy(this::hasWork, this::napNs);
    private long unforcedBytes;
    private long firstUnforcedNs;
    private long appliedPosition = -1;
    // The forced position that holds back records not yet durable in the log, and since when (-1: none held
    // back; forceLogIfHeldBack).
    private long heldBackAt = -1;
    private long heldBackSinceNs;
    // Where the applier's cursor stood after its last duty cycle, for the receiver's wake-up decision.
    private volatile long applyingFrom;
    private volatile long appliedLsn;
    private volatile long recordsApplied;
    // Bytes of records of zeros applied by deallocating their range (Volume#deallocate), not by writing them.
    private volatile long bytesDeallocated;
    private final ZeroCheck zeroCheck = new ZeroCheck();
    private volatile String failure;
    // A record damaged in this log (0: none): it and every record after it are dropped once the session is closed.
    private volatile long damagedLsn;
    private volatile boolean dropRequested;
    private boolean dropForceFailed;
    private volatile long recordsDropped;
    private volatile List<long[]> droppedRegions;
    /**
     * At most this many region ranges go to the source after a drop (about 20 KiB of the OPENED frame's 64 KiB);
     * more, and it resends every region.
     */
    static final int MAX_DROPPED_RANGES = 1024;
    private volatile long applyFailures;
    /** Records that arrived damaged (payload CRC), over all sessions: each one ended its session. */
    final AtomicLong damagedRecords = new AtomicLong();
    /** Frames that arrived unreadable (header CRC, magic, length), over all sessions: each one ended its session. */
    final AtomicLong badFrames = new AtomicLong();
    // The receiver forces the log for what it receives, the applier for the head it released while the receiver
    // has nothing to force: one at a time.
    private final Object forceLock = new Object();
    private long releasedNs;
    /** After a failed apply or force, when the applier tries again. */
    private final RetryBackoff retry = new RetryBackoff();
    // VERIFY records through this LSN were checked and answered before a failure; a retry applies them again
    // from the log but must not answer twice.
    private long verifiedThroughLsn = -1;
    /** Time to write one record to its volume (apply stage). */
    final ConcurrentHistogram applyNs = new ConcurrentHistogram(HIGHEST_LATENCY_NS, 2);
    /** Time to force the log, which makes received records durable (the destination's side of remote flush). */
    final ConcurrentHistogram logForceNs = new ConcurrentHistogram(HIGHEST_LATENCY_NS, 2);
    // Test failover: the conductor requests a hook, the applier arms it between two records (an LSN boundary),
    // once it has applied through the LSN asked for.
    private volatile ApplyHook requestedHook;
    private volatile long requestedHookFromLsn = -1;
    private volatile ApplyHook armedHook;
    private volatile long armedLsn = -1;
    private ApplyHook hook;
    // Consistency of the volumes: the LSN through which the source confirmed it had nothing left to resync
    // (receiver thread; -1 = not known since start), and the last resync record applied (applier thread).
    private volatile long cleanLsn = -1;
    private volatile long lastResyncLsn = -1;
    /** The same answer kept across restarts, for a failover without the source. */
    private final DurableConsistency durable;
    private final SourceReport sourceReport = new SourceReport();
    /** A log of another size to move to (its source's): none, requested, being swapped in, done, failed. */
    public static final int REPLACEMENT_NONE = 0;
    public static final int REPLACEMENT_REQUESTED = 1;
    public static final int REPLACEMENT_SWAPPING = 2;
    public static final int REPLACEMENT_DONE = 3;
    public static final int REPLACEMENT_FAILED = 4;
    private final AtomicInteger replacementState = new AtomicInteger(REPLACEMENT_NONE);
    private volatile RecordLog replacementLog;
    private volatile Path replacementTarget;
    private volatile Runnable onReplacementEnded;
    private volatile Consumer<RecordLog> replacedLogCloser;
    private volatile String replacementError;

    /**
     * @param config          the group.
     * @param volumes         the destination volumes, opened writable, in the group's order.
     * @param log             the group's log, recovered.
     * @param clock           clock.
     * @param forceBytes      force the volumes after this many applied bytes (a quarter of the log at most)...
     * @param forceIntervalNs ...or this long after the first unforced write.
     * @param durable         the group's durable consistency state.
     */
    public DestinationGroup(final GroupConfig config, final Volume[] volumes, final RecordLog log,
        final NanoClock clock, final long forceBytes, final long forceIntervalNs, final DurableConsistency durable)
    {
        this.config = config;
        this.volumes = volumes;
        this.log = log;
        this.clock = clock;
        // Nothing is released before its volume is forced: with a log under four times flush.bytes (256 MiB by
        // default) only the interval released it, and a full log held the receiver, and with it a sync source's
        // writes, until then (a 16 MiB log passed 64-80 MiB/s in 200 ms bursts).
        this.configuredForceBytes = forceBytes;
        this.forceBytes = forceBytesFor(configuredForceBytes, log);
        this.forceIntervalNs = forceIntervalNs;
        this.cursor = log.newCursor();
        this.cursor.position(log.headPosition());
        this.applyingFrom = log.headPosition();
        this.buffer = BufferUtil.allocateDirectAligned(log.maxRecordLength(), Slab.ALIGNMENT);
        this.bufferView = new UnsafeBuffer(buffer);
        this.batch = ApplyBatch.openOrNull();
        this.unforced = new boolean[volumes.length];
        this.appliedLsn = log.headLsn() - 1;
        this.verifier = new DestinationVerifier(config.regionLength);
        this.durable = durable;
    }

    /**
     * @param configured flush.bytes.
     * @param log        the group's log.
     * @return how many bytes may wait unforced, the volumes' (applier) or the log's (receiver): a quarter of the log
     *     at most, whatever flush.bytes says, as the log's space is given back only after a force.
     */
    static long forceBytesFor(final long configured, final RecordLog log)
    {
        return Math.min(configured, Math.max(1, log.capacity() / 4));
    }

    /**
     * @return this side of verify: results of VERIFY records, for the receiver to send.
     */
    public DestinationVerifier verifier()
    {
        return verifier;
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

    public long volumeSize(final int index)
    {
        return volumes[index].size();
    }

    /**
     * @return the highest LSN applied to the volumes (maybe not yet forced).
     */
    public long appliedLsn()
    {
        return appliedLsn;
    }

    public long recordsApplied()
    {
        return recordsApplied;
    }

    /**
     * @return bytes of records of zeros applied by deallocating their range rather than writing them.
     */
    public long bytesDeallocated()
    {
        return bytesDeallocated;
    }

    /**
     * @return bytes of records held but not yet applied (any thread).
     */
    public long unappliedBytes()
    {
        return log.tailPosition() - applyingFrom;
    }

    /**
     * @return why applying stopped (a damaged log record or a volume error), or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return the LSN of a record found damaged in this host's log, not yet dropped with the records after it
     *     ({@link #dropDamagedRecords}); 0 when none.
     */
    public long damagedLsn()
    {
        return damagedLsn;
    }

    /**
     * @return records dropped from this host's log since the daemon started, because one was damaged in it.
     */
    public long recordsDropped()
    {
        return recordsDropped;
    }

    /**
     * Drops the damaged record and every record after it from the log, on the applier's thread at its next duty
     * cycle, after forcing the volumes with every record before it: this side then holds a consistent prefix up to
     * the record before, and the source sends the rest again (or, when it no longer holds them, every region).
     * Before, the applier stopped there for good, and the group had to be deleted and created again. Call once no
     * session appends to the log any more; {@link #damagedLsn} reads 0 when done.
     */
    public void dropDamagedRecords()
    {
        dropRequested = true;
    }

    /**
     * @return failed applies or forces so far (each is retried; the records stay in the log).
     */
    public long applyFailures()
    {
        return applyFailures;
    }

    /**
     * @return records that arrived damaged (CRC32C mismatch) since the daemon started, over all sessions.
     */
    public long damagedRecords()
    {
        return damagedRecords.get();
    }

    /**
     * @return frames that arrived unreadable (header CRC, magic, length) since the daemon started, over all sessions.
     */
    public long badFrames()
    {
        return badFrames.get();
    }

    /**
     * @param index of the volume in the group.
     * @return the open volume: for readers that must see what the applier wrote (a test-failover view).
     */
    public Volume volume(final int index)
    {
        return volumes[index];
    }

    /**
     * Asks the applier to call {@code hook} before every record it applies from its next duty cycle on (null:
     * stop calling it). Any thread; see {@link #armedHook()} for when it took effect.
     *
     * @param hook to call, or null.
     */
    public void requestHook(final ApplyHook hook)
    {
        requestHook(hook, -1);
    }

    /**
     * As {@link #requestHook(ApplyHook)}, but the applier arms the hook only once it has applied through
     * {@code fromLsn}: the records before it are applied as ever, not through the hook. For a view of everything
     * this side held at a moment: force the log first, as the applier applies only what is durable there.
     *
     * @param hook    to call, not null.
     * @param fromLsn the LSN to apply through first.
     */
    public void requestHook(final ApplyHook hook, final long fromLsn)
    {
        requestedHookFromLsn = fromLsn;
        requestedHook = hook;
        idle.wake();
    }

    /**
     * @return whether the requested hook differs from the armed one and may be armed now (applier thread).
     */
    private boolean hookArmable()
    {
        return hookArmable(requestedHook);
    }

    private boolean hookArmable(final ApplyHook requested)
    {
        return requested != hook && (requested == null || appliedLsn >= requestedHookFromLsn);
    }

    /**
     * @return the hook the applier calls now: once it is the one requested, every record applied after
     * {@link #armedLsn()} passes through it.
     */
    public ApplyHook armedHook()
    {
        return armedHook;
    }

    /**
     * @return the applied LSN at the moment the applier armed the current hook.
     */
    public long armedLsn()
    {
        return armedLsn;
    }

    /**
     * @return what the source last said about how far ahead of this host it is (receiver: update; conductor: read).
     */
    public SourceReport sourceReport()
    {
        return sourceReport;
    }

    /**
     * The source says that, when it sent LSN {@code lsn}, it had nothing left to resync ({@code clean}) or not.
     * Receiver thread.
     * <p>
     * A clean point stays while it is valid (no resync record applied after it): every later point is clean as well
     * until the source says otherwise, and the earliest is the one the applier reaches first. A busy source says it of
     * record after record, each ahead of what this side has made durable and applied; moving the point with them,
     * the applier would never reach it.
     *
     * @param lsn   the last LSN the source had sent.
     * @param clean whether its dirty bitmaps were empty.
     */
    public void sourceState(final long lsn, final boolean clean)
    {
        if (!clean)
        {
            cleanLsn = -1;
        }
        else if (cleanLsn < 0 || lastResyncLsn > cleanLsn)
        {
            cleanLsn = lsn;
        }
    }

    /**
     * @return whether the volumes are known to hold a crash-consistent prefix of the source's writes now: at a
     * point the source confirmed as having nothing left to resync, already applied, no resync record came after
     * it. The point is the one the source confirmed since this daemon started, or the one kept durably.
     */
    public boolean isConsistent()
    {
        return isCleanAfter(cleanLsn) || isCleanAfter(durable.cleanThroughLsn());
    }

    private boolean isCleanAfter(final long clean)
    {
        return clean >= 0 && lastResyncLsn <= clean && appliedLsn >= clean;
    }

    /**
     * @return the LSN through which the source last confirmed it had nothing to resync, or -1.
     */
    public long cleanLsn()
    {
        return cleanLsn;
    }

    /**
     * @return the LSN through which the volumes are kept durably consistent, or
     * {@link DurableConsistency#INCONSISTENT}.
     */
    public long durableCleanLsn()
    {
        return durable.cleanThroughLsn();
    }

    @Override
    public String roleName()
    {
        return "applier-" + config.name;
    }

    /**
     * @return how the applier waits: asleep until a force of the log makes a batch durable (forceLog,
     * forceRecords), a test mount is requested, or its volumes' force falls due.
     */
    public IdleStrategy idleStrategy()
    {
        return idle;
    }

    /**
     * Wakes the applier once a batch it may apply waits: records durable in the log ({@link #applyLimit}). After
     * every force of the log, the only thing that moves that limit (records merely appended do not).
     */
    private void wakeIfABatchIsDurable()
    {
        if (log.forcedPosition() - applyingFrom >= APPLY_BATCH_BYTES)
        {
            idle.wake();
        }
    }

    /**
     * @return the position up to which the applier may apply: the log's forced position. The log is the volumes'
     *     write-ahead log. A record applied before it was durable there could reach the disk first (an O_DIRECT
     *     write at once, a buffered one whenever the kernel writes it back), and a power cut would leave the volume
     *     holding it without the records before it, which the log no longer held to replay: not a prefix.
     */
    private long applyLimit()
    {
        return log.forcedPosition();
    }

    private boolean hasWork()
    {
        // A failed applier waits for its retry: it must sleep, not spin.
        return failure == null && (applyLimit() - cursor.nextPosition() >= APPLY_BATCH_BYTES ||
            hookArmable() || replacementState.get() == REPLACEMENT_REQUESTED);
    }

    private long napNs()
    {
        if (failure != null)
        {
            return Math.max(0, Math.min(IDLE_NAP_NS, retry.untilDueNs(clock.nanoTime())));
        }
        // Records waiting below a batch are applied after a short nap rather than one wake-up each: nothing waits
        // for the apply (the log holds them durably), and on a small host every wake-up takes CPU from the threads
        // that acknowledge writes.
        long nap = applyLimit() > cursor.nextPosition() ? APPLY_DELAY_NS : IDLE_NAP_NS;
        if (unforcedBytes > 0)
        {
            nap = Math.min(nap, firstUnforcedNs + forceIntervalNs - clock.nanoTime());
        }
        return nap;
    }

    @Override
    public int doWork()
    {
        final ApplyHook requested = requestedHook;
        if (hookArmable(requested))
        {
            hook = requested;
            armedLsn = appliedLsn;
            armedHook = requested;
        }
        if (dropRequested)
        {
            return dropForceFailed && retry.untilDueNs(clock.nanoTime()) > 0 ? 0 : dropFromDamaged();
        }
        if (failure != null)
        {
            if (retry.untilDueNs(clock.nanoTime()) > 0)
            {
                return 0;
            }
            restartFromHead();
        }
        int work = 0;
        try
        {
            final long limit = applyLimit();
            // The limit is a record's end, so a record that starts before it ends there or before.
            while (work < 64 && cursor.nextPosition() < limit && cursor.next())
            {
                apply();
                work++;
            }
            writeBatch();
            applyingFrom = cursor.nextPosition();
            final long nowNs = clock.nanoTime();
            work += forceLogIfHeldBack(limit, nowNs);
            if (replacementState.get() == REPLACEMENT_REQUESTED && cursor.nextPosition() == log.tailPosition())
            {
                return work + replaceLog();
            }
            // Never force just because the log ran dry: at QD1 that is a volume flush per record, competing
            // for the disk with the receiver's log forces that sync writes wait for.
            if (unforcedBytes > 0 && (unforcedBytes >= forceBytes || nowNs - firstUnforcedNs >= forceIntervalNs))
            {
                forceAndRelease();
                work++;
            }
            if (appliedPosition < 0 && cursor.nextPosition() == log.tailPosition() && releasedNs != 0 &&
                nowNs - releasedNs >= forceIntervalNs)
            {
                work += persistReleasedHead();
            }
            final long clean = cleanLsn;
            if (durable.cleanThroughLsn() == DurableConsistency.INCONSISTENT && isCleanAfter(clean))
            {
                // The source confirmed an applied point clean: force now rather than at the next interval, so that a
                // failover from here on is safe as soon as possible. Once per finished (re)sync.
                if (unforcedBytes > 0)
                {
                    forceAndRelease();
                }
                durable.markClean(clean);
                work++;
            }
        }
        catch (final DamagedRecordException ex)
        {
            // Reading it again gives the same bytes: no retry. The conductor ends the session and has the record
            // dropped with those after it (dropDamagedRecords), so that the source sends them again.
            applyFailures++;
            retry.never();
            failure = "cannot apply LSN " + cursor.lsn() + ": " + ex.getMessage();
            damagedLsn = cursor.lsn();
        }
        catch (final IOException | UncheckedIOException ex)
        {
            // The records stay in the log (nothing is released before its volume is forced), so a volume that ran
            // out of space, or went away for a moment, is tried again later from the log's head.
            applyFailures++;
            final long delaySeconds = retry.failed(clock.nanoTime());
            discardBatch();
            failure = "cannot apply LSN " + failingLsn + " to " + config.volumes.get(failingVolume).target +
                ": " + ex.getMessage() + hint(ex) + "; the records stay in the log, tried again in " + delaySeconds +
                " s";
        }
        catch (final RuntimeException ex)
        {
            // A bug, not the volume: the same back-off and retry from the log's head, named as what it is. Thrown
            // on, the runner logged it and ran the next duty cycle into it again, at once and for ever.
            applyFailures++;
            final long delaySeconds = retry.failed(clock.nanoTime());
            discardBatch();
            failure = "cannot apply LSN " + failingLsn + ": " + ex + " (a bug); the records stay in the log, " +
                "tried again in " + delaySeconds + " s";
        }
        if (failure == null && unforcedBytes == 0)
        {
            retry.succeeded(); // Everything applied since the last failure is forced.
        }
        return work;
    }

    /**
     * The receiver forces the log at least every flush.interval while records arrive, and the applier follows.
     * Records it no longer forces (its session ended, the source gone for a failover) would wait for ever: the
     * applier forces them itself once the forced position stood still for two intervals, and at once for a move
     * to a new log, which waits for everything held to be applied.
     *
     * @return 1 when it forced.
     */
    private int forceLogIfHeldBack(final long limit, final long nowNs)
    {
        if (cursor.nextPosition() < limit || log.tailPosition() == limit)
        {
            heldBackAt = -1;
            return 0;
        }
        if (limit != heldBackAt)
        {
            // Counted from the last force seen: in a steady stream records always wait beyond the latest one.
            heldBackAt = limit;
            heldBackSinceNs = nowNs;
        }
        if (replacementState.get() != REPLACEMENT_REQUESTED && nowNs - heldBackSinceNs < 2 * forceIntervalNs)
        {
            return 0;
        }
        heldBackAt = -1;
        forceLog();
        return 1;
    }

    /**
     * Moves this side to a log of another size (its source's, after a resize there), on the applier's thread at
     * its next duty cycles: once every record held is applied, the volumes are forced and the records released,
     * so the new log starts empty at the next LSN, and it is renamed over the group's log. Call once no session
     * appends to the log any more; {@link #logReplacementState} says when it is done or failed.
     *
     * @param newLog  a new, empty log, written whole.
     * @param target  the group's log file, which it replaces.
     * @param onEnded called on the applier's thread once it is done or failed (to wake the conductor).
     * @param closer  closes the old log once replaced (its file renamed over): the last close of a deleted file
     *                frees its pages and blocks, 0.1-0.2 s for 256 MiB here, not for the applier to wait for.
     */
    public void requestLogReplacement(final RecordLog newLog, final Path target, final Runnable onEnded,
        final Consumer<RecordLog> closer)
    {
        replacedLogCloser = closer;
        replacementLog = newLog;
        replacementTarget = target;
        onReplacementEnded = onEnded;
        replacementError = null;
        replacementState.set(REPLACEMENT_REQUESTED);
        idle.wake();
    }

    /**
     * @return whether a requested replacement was withdrawn before the applier began it (then it never will).
     */
    public boolean cancelLogReplacement()
    {
        return replacementState.compareAndSet(REPLACEMENT_REQUESTED, REPLACEMENT_NONE);
    }

    /**
     * @return one of the REPLACEMENT_ states.
     */
    public int logReplacementState()
    {
        return replacementState.get();
    }

    /**
     * @return why the replacement failed (state FAILED).
     */
    public String logReplacementError()
    {
        return replacementError;
    }

    /**
     * Ends a replacement that is done or failed, for a new one.
     */
    public void endLogReplacement()
    {
        replacementLog = null;
        replacementState.set(REPLACEMENT_NONE);
    }

    /**
     * Everything held is applied: force, release, and move to the new log.
     */
    private int replaceLog() throws IOException
    {
        if (unforcedBytes > 0 || appliedPosition >= 0)
        {
            forceAndRelease();
        }
        if (!replacementState.compareAndSet(REPLACEMENT_REQUESTED, REPLACEMENT_SWAPPING))
        {
            return 1;
        }
        final RecordLog next = replacementLog;
        final RecordLog old = log;
        try
        {
            if (!log.isEmpty())
            {
                throw new IllegalStateException("records from LSN " + log.headLsn() + " are still unreleased");
            }
            synchronized (forceLock)
            {
                next.reset(log.tailLsn() + 1);
                try
                {
                    next.renameTo(replacementTarget);
                }
                finally
                {
                    if (next.path().equals(replacementTarget))
                    {
                        // Renamed, even if its directory's force failed: the file the group opens next is it.
                        swapTo(next);
                    }
                }
            }
            replacementError = null;
        }
        catch (final RuntimeException ex)
        {
            replacementError = ex.getMessage();
        }
        replacementState.set(replacementError == null ? REPLACEMENT_DONE : REPLACEMENT_FAILED);
        onReplacementEnded.run();
        if (log != old)
        {
            replacedLogCloser.accept(old);
        }
        return 1;
    }

    private void swapTo(final RecordLog next)
    {
        forceBytes = forceBytesFor(configuredForceBytes, next);
        cursor = next.newCursor();
        cursor.position(next.headPosition());
        applyingFrom = next.headPosition();
        appliedPosition = -1;
        releasedNs = 0;
        log = next;
    }

    private int dropFromDamaged()
    {
        final long lsn = damagedLsn;
        try
        {
            // Everything before the damaged record is applied (the cursor stopped at it): make it durable and
            // released, so that the log's new start follows a consistent prefix.
            if (unforcedBytes > 0 || appliedPosition >= 0)
            {
                forceAndRelease();
            }
        }
        catch (final IOException | UncheckedIOException ex)
        {
            dropForceFailed = true;
            final long delaySeconds = retry.failed(clock.nanoTime());
            failure = "cannot force the volumes before dropping the damaged record LSN " + lsn + ": " +
                ex.getMessage() + hint(ex) + "; tried again in " + delaySeconds + " s";
            return 1;
        }
        final long dropped = log.tailLsn() - lsn + 1;
        droppedRegions = regionsOfRecordsFromHead();
        synchronized (forceLock)
        {
            log.reset(lsn);
        }
        restartFromHead();
        recordsDropped += dropped;
        retry.succeeded();
        dropForceFailed = false;
        failure = null;
        dropRequested = false;
        damagedLsn = 0;
        return 1;
    }

    /**
     * The regions the records from the log's head on write (their headers, which their own CRC covers, are
     * intact: only the payload was found damaged), as ranges {volume, first region, last region}; null when there
     * are too many ranges to send, or a header makes no sense. The source, which has usually released those
     * records, resends these regions instead of every region. Allocates: a rare path.
     */
    private List<long[]> regionsOfRecordsFromHead()
    {
        final java.util.BitSet[] regions = new java.util.BitSet[volumes.length];
        final RecordLog.Cursor records = log.newCursor();
        while (records.next())
        {
            final int vol = records.volume();
            if (vol < 0 || vol >= volumes.length || records.offset() < 0 ||
                records.offset() >= config.volumes.get(vol).size)
            {
                return null;
            }
            if (regions[vol] == null)
            {
                regions[vol] = new java.util.BitSet();
            }
            final long end = Math.min(config.volumes.get(vol).size,
                records.offset() + Math.max(ZeroRecord.volumeLength(records, log.maxRecordLength()), 1));
            final int first = (int)(records.offset() / config.regionLength);
            final int last = (int)((end - 1) / config.regionLength);
            regions[vol].set(first, last + 1);
        }
        final List<long[]> ranges = new java.util.ArrayList<>();
        for (int vol = 0; vol < regions.length; vol++)
        {
            final java.util.BitSet bits = regions[vol];
            int first = bits == null ? -1 : bits.nextSetBit(0);
            while (first >= 0)
            {
                final int end = bits.nextClearBit(first);
                if (ranges.size() == MAX_DROPPED_RANGES)
                {
                    return null;
                }
                ranges.add(new long[] {vol, first, end - 1});
                first = bits.nextSetBit(end);
            }
        }
        return ranges;
    }

    /**
     * @return the regions of the records last dropped from the log, for the source's next OPEN, once; null when
     *     none or unknown (the source then resends every region it no longer holds the records for).
     */
    public List<long[]> takeDroppedRegions()
    {
        final List<long[]> regions = droppedRegions;
        droppedRegions = null;
        return regions;
    }

    /**
     * Forces the log's header when everything received is applied and released but the receiver had nothing
     * more to force since (it persists the head with its own forces while records arrive). Otherwise a restart
     * replays, and a failover waits for, everything applied since the receiver's last force: up to flush.bytes.
     *
     * @return 1 when it forced.
     */
    private int persistReleasedHead()
    {
        synchronized (forceLock)
        {
            releasedNs = 0;
            if (log.isHeadPersisted())
            {
                return 0;
            }
            log.force();
            return 1;
        }
    }

    /**
     * Forces the log (the receiver's thread; the conductor's before it answers an OPEN): records received and the head
     * released so far become durable.
     */
    public void forceLog()
    {
        synchronized (forceLock)
        {
            log.force();
        }
        wakeIfABatchIsDurable();
    }

    /**
     * Forces the records received so far, for a DURABLE answer; the released head only when it is due
     * ({@link RecordLog#forceRecords}). The receiver's thread.
     */
    public void forceRecords()
    {
        synchronized (forceLock)
        {
            log.forceRecords();
        }
        wakeIfABatchIsDurable();
    }

    /**
     * A record whose payload no longer matches its CRC in the log: not a passing disk condition.
     */
    static final class DamagedRecordException extends IOException
    {
        private static final long serialVersionUID = 1L;

        DamagedRecordException(final String message)
        {
            super(message);
        }
    }

    private static String hint(final Exception ex)
    {
        if (Volume.isOutOfSpace(ex))
        {
            return " (free space on the file system or thin pool that holds it)";
        }
        return "";
    }

    /**
     * Before a retry: applies again every record not yet released, not only the one that failed. A force that
     * failed may have lost earlier writes from the page cache (Linux marks pages whose write-back failed clean),
     * and a second force would report success; writing them again is the only safe way on.
     */
    private void restartFromHead()
    {
        discardBatch();
        verifiedThroughLsn = Math.max(verifiedThroughLsn, appliedLsn);
        cursor.position(log.headPosition());
        applyingFrom = log.headPosition();
        appliedLsn = log.headLsn() - 1;
        appliedPosition = -1;
        unforcedBytes = 0;
        java.util.Arrays.fill(unforced, false);
        failure = null;
    }

    private void apply() throws IOException
    {
        final ByteBuffer payload = cursor.payload();
        if (!cursor.verifyPayload())
        {
            // Every record before it applied first: the records from this one on are dropped, and the log with
            // them (dropFromDamaged), so those before must be on the volumes by then.
            writeBatch();
            // Checked on arrival and again here: a record damaged in the log is never applied.
            throw new DamagedRecordException("record damaged in this host's log " + log.path() + " (CRC32C " +
                "mismatch: its disk or memory changed it); it is dropped with every record after it, and the " +
                "source sends them again");
        }
        // Read once: each read of a record's flags is an acquire (they change after commit, on the source).
        final int flags = cursor.flags();
        if ((flags & VerifyRecord.RECORD_VERIFY) != 0)
        {
            writeBatch(); // The digest is of what the records before it wrote.
            // Digests, not data: this side's copy is compared at exactly this point of the write history.
            if (cursor.lsn() > verifiedThroughLsn)
            {
                verifier.check(cursor.lsn(), cursor.volume(), cursor.offset(), payload, volumes[cursor.volume()],
                    buffer);
            }
            // Counted towards the next release, though no volume needs forcing for it: a log that holds only
            // VERIFY records must still be given back.
            if (unforcedBytes == 0)
            {
                firstUnforcedNs = clock.nanoTime();
            }
            unforcedBytes += cursor.length();
            appliedPosition = cursor.position();
            appliedLsn = cursor.lsn();
            recordsApplied++;
            return;
        }
        final int vol = cursor.volume();
        final long offset = cursor.offset();
        final boolean zeroRecord = ZeroRecord.isZeroes(flags);
        // A zero record's length was checked on arrival (GroupReceiver) and its payload's CRC just now.
        final int length = zeroRecord ? (int)ZeroRecord.decode(payload) : cursor.length();
        final int directFd = volumes[vol].directFd();
        // A region of zeros (an empty region's initial sync, a client's WRITE_ZEROES): written, it filled a thin or
        // sparse destination where its source holds nothing. Only records of a region or more: the compare would
        // cost every short random write, and a hole of a few KiB saves little. Random data differs at once. A
        // source of an older version sends the zeros themselves rather than a zero record.
        // A zero record needs no compare: deallocated at any length (a TRIM's few KiB) where the volume can.
        final boolean deallocatable = zeroRecord ? ZeroCheck.mayDeallocate(volumes[vol], offset, length) :
            ZeroCheck.worthChecking(volumes[vol], offset, length);
        final boolean zeros = zeroRecord || deallocatable && zeroCheck.isAllZeros(payload);
        final boolean resync = (flags & SourceGroup.RECORD_RESYNC) != 0;
        // A resync record is a region (or chunk) as the source volume holds it: for a sparse or thin source, mostly
        // holes around some data. Written whole, it filled the destination's holes inside the region (after a
        // source's crash, every region of its activity log is resent). Its zero pieces are deallocated instead.
        final boolean holed = !zeros && resync && deallocatable &&
            zeroCheck.hasZeroPiece(volumes[vol], offset, payload);
        final boolean batched = !zeros && !holed && batch != null && ApplyBatch.batchable(directFd, offset, length);
        if (batch != null && (batched ? batch.mustDrainBefore(vol, offset, length) : batch.count() > 0))
        {
            // Before the hook too: it must see these bytes as the records before this one left them.
            writeBatch();
        }
        failingLsn = cursor.lsn();
        failingVolume = vol;
        final long startNs = clock.nanoTime();
        if (hook != null)
        {
            hook.beforeApply(vol, offset, length);
        }
        if (resync && cursor.lsn() > durable.cleanThroughLsn())
        {
            // Durable before the write that mixes old and new data: a crash after it must not look consistent. A
            // resync record at or below the clean point is a replay after a crash, part of that clean state.
            durable.markInconsistent();
        }
        if (batched)
        {
            batch.add(vol, directFd, offset, payload, cursor.position(), cursor.lsn(), resync, startNs);
            return;
        }
        if (zeros && deallocatable && volumes[vol].deallocate(offset, length))
        {
            bytesDeallocated += length;
        }
        else if (zeroRecord)
        {
            writeZeros(vol, offset, length);
        }
        else if (holed)
        {
            buffer.clear();
            buffer.put(payload);
            bytesDeallocated += zeroCheck.writeAroundZeroPieces(volumes[vol], offset, buffer, length);
        }
        else if (length >= DIRECT_APPLY_LENGTH && ApplyBatch.aligned(offset, length))
        {
            // The log's payload is not aligned for O_DIRECT; a copy is cheaper than the page cache's work.
            buffer.clear();
            buffer.put(payload);
            volumes[vol].write(offset, buffer, length);
        }
        else
        {
            // Straight from the log's mapping: the bytes just checked, with no copy on the way. Unaligned (or no
            // AIO here): the page cache takes it and the next force writes it back.
            volumes[vol].writeBuffered(offset, payload);
        }
        applied(vol, length, cursor.position(), cursor.lsn(), resync, startNs, clock.nanoTime());
    }

    /**
     * Writes a zero record's zeros where its range is not deallocated: from the apply buffer, cleared for it (a
     * region's memset is far cheaper than the write), with O_DIRECT where it is aligned, else to the page cache.
     */
    private void writeZeros(final int vol, final long offset, final int length) throws IOException
    {
        bufferView.setMemory(0, length, (byte)0);
        buffer.clear().limit(length);
        if (ApplyBatch.aligned(offset, length))
        {
            volumes[vol].write(offset, buffer, length);
        }
        else
        {
            volumes[vol].writeBuffered(offset, buffer);
        }
    }

    /**
     * Writes the batched records to their volumes, waits for them all, and counts them applied in LSN order.
     */
    private void writeBatch() throws IOException
    {
        final int n = batch == null ? 0 : batch.count();
        if (n == 0)
        {
            return;
        }
        try
        {
            batch.writeAll();
        }
        catch (final IOException ex)
        {
            final int failed = batch.failedIndex();
            if (failed >= 0)
            {
                failingLsn = batch.lsn(failed);
                failingVolume = batch.volume(failed);
            }
            throw ex;
        }
        final long nowNs = clock.nanoTime();
        for (int i = 0; i < n; i++)
        {
            applied(batch.volume(i), batch.length(i), batch.position(i), batch.lsn(i), batch.resync(i),
                batch.stagedAtNs(i), nowNs);
        }
        batch.clear();
    }

    /**
     * Forgets batched records that were not written (a failure: the applier starts again from the log's head).
     */
    private void discardBatch()
    {
        if (batch != null)
        {
            batch.clear();
        }
    }

    private void applied(final int vol, final int length, final long position, final long lsn, final boolean resync,
        final long startNs, final long endNs)
    {
        applyNs.recordValue(Math.min(endNs - startNs, HIGHEST_LATENCY_NS));
        if (unforcedBytes == 0)
        {
            firstUnforcedNs = endNs;
        }
        unforced[vol] = true;
        unforcedBytes += length;
        appliedPosition = position;
        appliedLsn = lsn;
        if (resync)
        {
            lastResyncLsn = lsn;
        }
        recordsApplied++;
    }

    private void forceAndRelease() throws IOException
    {
        writeBatch();
        for (int i = 0; i < volumes.length; i++)
        {
            if (unforced[i])
            {
                try
                {
                    volumes[i].force();
                }
                catch (final IOException ex)
                {
                    // Named here: the failure message otherwise names the volume of the last record applied.
                    throw new IOException("forcing " + config.volumes.get(i).target + " failed: " + ex.getMessage(),
                        ex);
                }
                unforced[i] = false;
            }
        }
        unforcedBytes = 0;
        if (appliedPosition >= 0)
        {
            log.release(appliedPosition);
            appliedPosition = -1;
            releasedNs = clock.nanoTime();
        }
    }

    @Override
    public void close()
    {
        if (batch != null)
        {
            batch.close();
        }
        log.close();
        for (final Volume v : volumes)
        {
            v.close();
        }
    }
}
