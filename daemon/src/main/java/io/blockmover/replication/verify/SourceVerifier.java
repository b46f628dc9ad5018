package io.blockmover.replication.verify;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.atomic.AtomicLong;

import org.agrona.BufferUtil;

import io.blockmover.buffer.Slab;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.log.RecordLog;

/**
 * The source's side of a verify job of one group. The resyncer's thread calls {@link #doWork()} when no region is
 * dirty: it takes the next region, fences it against writes, reads and digests it, and logs a VERIFY record (see
 * {@link SourceGroup#appendFencedRegion}); at most {@link #WINDOW} regions wait for their result, so verify
 * advances at the pace the destination applies and never floods the log, and a fence lasts one region's read.
 * The shipper's thread hands in the partner's results ({@link #onResult}). The conductor starts jobs and reads
 * progress. One job at a time.
 * <p>
 * A repairing job marks a region dirty the moment its result says it differs, so the resyncer resends it through
 * the ordered stream, fenced against writes, while the scan goes on: every different region is repaired, however
 * many there are (the list of ranges kept for the report is bounded, the repair is not). That is also how a
 * seeded group's initial sync runs: compare everything, resend what differs.
 * <p>
 * A VERIFY record found damaged in the source's own log is voided there (see {@link SourceGroup}): its region is
 * compared again, at a later point of the write history, so the job still compares every region once.
 */
public final class SourceVerifier implements SourceGroup.Verifier
{
    /** Regions whose VERIFY record is logged but whose result has not come back, at most. */
    public static final int WINDOW = 32;
    /** Mismatching ranges kept for the report; beyond that they are only counted. */
    public static final int MAX_REPORTED = 10_000;

    private final SourceGroup group;
    private final GroupConfig config;
    private final int subBlock;
    private final ByteBuffer regionBuffer;
    private final ByteBuffer payload = ByteBuffer.allocateDirect(VerifyRecord.MAX_LENGTH);
    private final VerifyRecord record = new VerifyRecord();
    private final SourceGroup.RegionDigester digester = this::digest;
    private final List<long[]> mismatches = new ArrayList<>();
    private final AtomicLong issued = new AtomicLong();
    private final AtomicLong answered = new AtomicLong();
    private final AtomicLong different = new AtomicLong();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong stale = new AtomicLong();
    private volatile long jobId;
    private volatile boolean scanDone;
    private volatile String failure;
    private volatile long lastResultNs;
    private volatile long regionIntervalNs;
    private volatile boolean repair;
    private volatile long startRegion;
    private final AtomicLong markedDirty = new AtomicLong();
    // Regions (counted across volumes) whose record was voided: to log again (resyncer), and awaiting a result,
    // so that answeredThrough() never passes one (shipper; the resyncer removes one it finds dirty). Rare: allocates.
    private final ConcurrentLinkedQueue<Long> toCompareAgain = new ConcurrentLinkedQueue<>();
    private final ConcurrentSkipListSet<Long> comparingAgain = new ConcurrentSkipListSet<>();
    private volatile long issuedThrough = -1;
    private volatile long highestAnswered = -1;
    private long nextRegionNs;
    // The LSN of the last VERIFY record logged, and how many were logged since the partner was last asked to
    // force them (resyncer's thread).
    private long loggedLsn;
    private int unaskedRecords;
    private long runningJob;
    private int volume;
    private long region;

    /**
     * @param group the source group.
     */
    public SourceVerifier(final SourceGroup group)
    {
        this.group = group;
        this.config = group.config();
        this.subBlock = VerifyRecord.subBlockLength(config.regionLength);
        this.regionBuffer = BufferUtil.allocateDirectAligned(config.regionLength, Slab.ALIGNMENT);
    }

    /**
     * @return the sub-block length: the resolution at which mismatches are located.
     */
    public int subBlockLength()
    {
        return subBlock;
    }

    /**
     * @return regions of every volume of the group.
     */
    public long totalRegions()
    {
        long n = 0;
        for (final GroupConfig.VolumePair pair : config.volumes)
        {
            n += (pair.size + config.regionLength - 1) / config.regionLength;
        }
        return n;
    }

    /**
     * Starts a job; the previous one must be finished or abandoned. Conductor thread.
     *
     * @param id job id, unique across restarts (results carry it back).
     */
    public void start(final long id)
    {
        start(id, 0);
    }

    /**
     * Starts a job; the previous one must be finished or abandoned. Conductor thread.
     *
     * @param id           job id, unique across restarts (results carry it back).
     * @param maxRateBytes bytes read per second at most, 0 for as fast as the window allows.
     */
    public void start(final long id, final long maxRateBytes)
    {
        start(id, maxRateBytes, false, 0);
    }

    /**
     * Starts a job; the previous one must be finished or abandoned. Conductor thread.
     *
     * @param id           job id, unique across restarts (results carry it back).
     * @param maxRateBytes bytes read per second at most, 0 for as fast as the window allows.
     * @param repair       mark each region found different dirty at once, so it is resent.
     * @param fromRegion   the first region to compare, counted across the group's volumes in order (0 for all;
     *                     a job that failed part way resumes from {@link #answeredThrough()} + 1).
     */
    public void start(final long id, final long maxRateBytes, final boolean repair, final long fromRegion)
    {
        this.repair = repair;
        this.startRegion = Math.max(0, fromRegion);
        this.issuedThrough = fromRegion - 1;
        this.highestAnswered = fromRegion - 1;
        toCompareAgain.clear();
        comparingAgain.clear();
        markedDirty.set(0);
        regionIntervalNs = maxRateBytes > 0 ? (long)(config.regionLength * 1e9 / maxRateBytes) : 0;
        synchronized (mismatches)
        {
            mismatches.clear();
        }
        issued.set(0);
        answered.set(0);
        different.set(0);
        skipped.set(0);
        failure = null;
        scanDone = false;
        lastResultNs = System.nanoTime();
        jobId = id;
    }

    /**
     * Stops the running job: nothing more is logged; late results are ignored. Conductor thread.
     */
    public void abandon()
    {
        jobId = 0;
    }

    @Override
    public int doWork()
    {
        final long job = jobId;
        if (job == 0 || failure != null)
        {
            return 0;
        }
        if (askForAnswers())
        {
            return 1;
        }
        if (scanDone && toCompareAgain.isEmpty())
        {
            return 0;
        }
        if (job != runningJob)
        {
            runningJob = job;
            volume = 0;
            region = startRegion;
            unaskedRecords = 0; // An abandoned job's answers are nobody's.
        }
        if (issued.get() - answered.get() >= WINDOW)
        {
            return 0;
        }
        final long intervalNs = regionIntervalNs;
        if (intervalNs > 0)
        {
            // Paced: a region every intervalNs, so a verify's reads leave the disk to client writes.
            final long nowNs = System.nanoTime();
            if (nowNs - nextRegionNs < 0)
            {
                return 0;
            }
            nextRegionNs = Math.max(nextRegionNs + intervalNs, nowNs - intervalNs);
        }
        final Long again = toCompareAgain.peek();
        if (again != null)
        {
            return compareAgain(again);
        }
        if (scanDone)
        {
            return 0;
        }
        while (volume < config.volumes.size() && region >= regions(volume))
        {
            // Past this volume's end (or a resume point counted across volumes): on into the next one.
            region -= regions(volume);
            volume++;
        }
        if (volume >= config.volumes.size())
        {
            scanDone = true;
            return 0;
        }
        final long lsn;
        try
        {
            lsn = group.appendFencedRegion(volume, region, regionBuffer, payload, VerifyRecord.RECORD_VERIFY,
                digester);
        }
        catch (final IOException ex)
        {
            failure = "cannot read " + config.volumes.get(volume).source + " at region " + region + ": " +
                ex.getMessage();
            scanDone = true;
            return 0;
        }
        if (lsn == RecordLog.NO_SPACE)
        {
            return 0;
        }
        if (lsn == SourceGroup.REGION_DIRTY)
        {
            skipped.incrementAndGet();
        }
        else
        {
            issuedThrough = regionsBefore(volume) + region;
            issued.incrementAndGet();
            logged(lsn);
        }
        region++;
        return 1;
    }

    /**
     * The partner compares a region when it applies its VERIFY record, and applies only what its log made durable:
     * left to its flush.interval (200 ms by default), a verify got one window of regions compared per interval,
     * 160 MiB/s at most with 1 MiB regions, and a seeded initial sync with it. So the partner is asked to force what
     * was logged every half window, the force running while the next half is read, and once the scan has logged its
     * last region: one device flush per half window on the partner, paced or not.
     *
     * @return whether it asked.
     */
    private boolean askForAnswers()
    {
        if (unaskedRecords >= WINDOW / 2 || (unaskedRecords > 0 && scanDone && toCompareAgain.isEmpty()))
        {
            unaskedRecords = 0;
            group.askPartnerToForce(loggedLsn);
            return true;
        }
        return false;
    }

    /**
     * Logs a VERIFY record again for a region whose first one was voided. It still counts as issued (once): its
     * answer is the one outstanding, so the job is not done before it.
     */
    private int compareAgain(final long index)
    {
        int vol = 0;
        long r = index;
        while (r >= regions(vol))
        {
            r -= regions(vol);
            vol++;
        }
        final long lsn;
        try
        {
            lsn = group.appendFencedRegion(vol, r, regionBuffer, payload, VerifyRecord.RECORD_VERIFY, digester);
        }
        catch (final IOException ex)
        {
            failure = "cannot read " + config.volumes.get(vol).source + " at region " + r + ": " + ex.getMessage();
            scanDone = true;
            return 0;
        }
        if (lsn == RecordLog.NO_SPACE)
        {
            return 0;
        }
        toCompareAgain.poll();
        if (lsn == SourceGroup.REGION_DIRTY)
        {
            // Being resent: skipped like any dirty region, and no answer is awaited any more.
            comparingAgain.remove(index);
            skipped.incrementAndGet();
            issued.decrementAndGet();
        }
        else
        {
            logged(lsn);
        }
        return 1;
    }

    private void logged(final long lsn)
    {
        loggedLsn = lsn;
        unaskedRecords++;
    }

    @Override
    public void voided(final int vol, final long offset)
    {
        if (jobId == 0 || vol < 0 || vol >= config.volumes.size())
        {
            return;
        }
        final long index = regionsBefore(vol) + offset / config.regionLength;
        // Only a record of this job still waiting for its answer: one the scan logged, which nothing after it has
        // been answered for yet (the partner drops everything after a damaged record), or one logged again. One of
        // an earlier job is nobody's now. The partner answers a voided record with nothing.
        final boolean loggedAgain = comparingAgain.contains(index) && !toCompareAgain.contains(index);
        if ((loggedAgain || (index > highestAnswered && index <= issuedThrough)) && issued.get() > answered.get())
        {
            comparingAgain.add(index);
            toCompareAgain.add(index);
        }
    }

    private long regionsBefore(final int vol)
    {
        long n = 0;
        for (int i = 0; i < vol; i++)
        {
            n += regions(i);
        }
        return n;
    }

    private long regions(final int vol)
    {
        return (config.volumes.get(vol).size + config.regionLength - 1) / config.regionLength;
    }

    private int digest(final ByteBuffer data, final int length, final ByteBuffer out)
    {
        return record.encode(runningJob, data, length, subBlock, out);
    }

    @Override
    public void onResult(final FrameHeader header, final ByteBuffer result)
    {
        if (result.remaining() < VerifyRecord.RESULT_LENGTH)
        {
            return;
        }
        final long id = result.order(ByteOrder.LITTLE_ENDIAN).getLong(result.position());
        if (id != jobId || id == 0)
        {
            stale.incrementAndGet();
            return;
        }
        final int status = result.getInt(result.position() + VerifyRecord.RESULT_STATUS_OFFSET);
        final long mask = status == VerifyRecord.STATUS_COMPARED ? header.aux() : -1L;
        final int vol = header.volumeId();
        if (vol < 0 || vol >= config.volumes.size())
        {
            stale.incrementAndGet();
            return;
        }
        final long regionIndex = header.offset() / config.regionLength;
        if (mask != 0)
        {
            different.incrementAndGet();
            addMismatches(vol, header.offset(), mask);
            if (repair)
            {
                // Marked here rather than from the report's bounded list: nothing different is ever left behind.
                group.dirty(vol).set(regionIndex);
                markedDirty.incrementAndGet();
            }
        }
        final long index = regionsBefore(vol) + regionIndex;
        highestAnswered = Math.max(highestAnswered, index);
        if (!comparingAgain.isEmpty())
        {
            comparingAgain.remove(index);
        }
        lastResultNs = System.nanoTime();
        answered.incrementAndGet();
    }

    private void addMismatches(final int vol, final long regionOffset, final long mask)
    {
        if (vol < 0 || vol >= config.volumes.size())
        {
            return;
        }
        final long end = Math.min(regionOffset + config.regionLength, config.volumes.get(vol).size);
        synchronized (mismatches)
        {
            int i = 0;
            while (i < 64)
            {
                if ((mask & (1L << i)) == 0)
                {
                    i++;
                    continue;
                }
                int j = i;
                while (j < 64 && (mask & (1L << j)) != 0)
                {
                    j++;
                }
                final long from = regionOffset + (long)i * subBlock;
                final long to = Math.min(regionOffset + (long)j * subBlock, end);
                if (from < to && mismatches.size() < MAX_REPORTED)
                {
                    // Rare by nature: a mismatch may allocate, a match never does.
                    mismatches.add(new long[] {vol, from, to - from});
                }
                i = j;
            }
        }
    }

    /**
     * @return whether every region was logged (or skipped) and answered, or the job failed.
     */
    public boolean isDone()
    {
        return (scanDone && answered.get() >= issued.get()) || failure != null;
    }

    /**
     * @return why the job failed on this side, or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return regions compared on both sides so far.
     */
    public long compared()
    {
        return answered.get();
    }

    /**
     * @return regions the scan passed over because they were dirty (their resend was already pending).
     */
    public long skipped()
    {
        return skipped.get();
    }

    /**
     * @return regions logged whose result has not come back.
     */
    public long outstanding()
    {
        return issued.get() - answered.get();
    }

    /**
     * Results come back in LSN order, which is scan order: everything before the highest region answered has been
     * answered (or was dirty and skipped), so a job cut short resumes after it; except a region compared again,
     * whose answer comes after those of the regions after it.
     *
     * @return the last region answered with every one before it, counted across the group's volumes in order; one
     *     before the job's first region before any.
     */
    public long answeredThrough()
    {
        final Long again = comparingAgain.ceiling(Long.MIN_VALUE);
        return again == null ? highestAnswered : Math.min(highestAnswered, again - 1);
    }

    /**
     * @return regions a repairing job has marked dirty so far.
     */
    public long markedDirty()
    {
        return markedDirty.get();
    }

    /**
     * @return regions found different.
     */
    public long different()
    {
        return different.get();
    }

    /**
     * @return results that belonged to no running job (a previous job, a replay on the partner).
     */
    public long staleResults()
    {
        return stale.get();
    }

    /**
     * @return System.nanoTime() of the last result (or of the start).
     */
    public long lastResultNs()
    {
        return lastResultNs;
    }

    /**
     * @return the mismatching ranges so far, each {volume index, offset, length}, in arrival order.
     */
    public List<long[]> mismatches()
    {
        synchronized (mismatches)
        {
            return new ArrayList<>(mismatches);
        }
    }
}
