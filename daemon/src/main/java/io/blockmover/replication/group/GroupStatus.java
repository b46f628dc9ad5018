package io.blockmover.replication.group;

import java.util.LinkedHashMap;
import java.util.Map;

import org.HdrHistogram.ConcurrentHistogram;

/**
 * What 'blockmover group status' reports about a running source group: LSNs, log use, RPO, counters and latency
 * percentiles. Read from the conductor thread while the data path runs: every value is a racy but consistent
 * enough snapshot of atomics.
 */
public final class GroupStatus
{
    private GroupStatus()
    {
    }

    /**
     * @param group a source group.
     * @return whether the partner holds durably everything logged so far.
     */
    public static boolean isDrained(final SourceGroup group)
    {
        return group.durableLsn() >= group.publishedLsn();
    }

    /**
     * Adds the group's live figures to a status map.
     *
     * @param group  a source group.
     * @param status the map to fill.
     */
    public static void describe(final SourceGroup group, final Map<String, Object> status)
    {
        final Map<String, Object> lsn = new LinkedHashMap<>();
        lsn.put("last", group.publishedLsn());
        lsn.put("acked", group.ackedLsn());
        lsn.put("durable", group.durableLsn());
        status.put("lsn", lsn);
        final Map<String, Object> log = new LinkedHashMap<>();
        log.put("size", group.log().capacity());
        log.put("used", group.log().usedBytes());
        // Released records dropped from the page cache before the kernel wrote them (RecordLog#discardReleased).
        log.put("discarded", group.log().discardedBytes());
        // FLUSHes that needed this log durable and got it from their volume's device flush, on the same disk.
        log.put("forces_shared_with_volume", group.logForcesSharedWithVolume.get());
        status.put("log", log);
        final long rpoBytes = group.rpoBytes();
        status.put("rpo_bytes", rpoBytes);
        status.put("rpo_seconds", rpoSeconds(group, rpoBytes));
        status.put("partner_current", group.isPartnerCurrent());
        status.put("partner_apply_failing", group.isPartnerApplyFailing());
        // Outside the initial sync, a dirty region means the log could not hold everything (it filled up, or the
        // partner lost continuity): the RPO is no longer what the log bounds, until resync catches up.
        status.put("rpo_exceeded", group.config().initialSyncDone && group.dirtyRegions() > 0);
        status.put("dirty_regions", group.dirtyRegions());
        // What a crash of this host would resend (see ActivityLog).
        status.put("activity_regions", group.activityRegions());
        status.put("writes", group.writes.get());
        status.put("bytes_written", group.bytesWritten.get());
        status.put("flushes", group.flushes.get());
        status.put("writes_tracked_by_bitmap", group.untrackedByLog.get());
        status.put("writes_failed_locally", group.failedWrites.get());
        status.put("log_append_failures", group.logAppendFailures.get());
        if (group.logAppendError != null)
        {
            status.put("log_append_error", group.logAppendError);
        }
        // Each held its connection's later requests meanwhile: many of them at high queue depth cost throughput.
        status.put("writes_waited", group.writesWaited.get());
        status.put("regions_resent", group.regionsResent.get());
        status.put("zero_bytes", group.zeroBytesLogged.get());
        status.put("trimmed_bytes", group.trimmedBytes.get());
        status.put("records_resent", group.recordsResent.get());
        status.put("records_mended", group.recordsMended.get());
        final Map<String, Object> latency = new LinkedHashMap<>();
        latency.put("local_write", latency(group.localWriteNs));
        latency.put("partner_ack", latency(group.partnerAckNs));
        latency.put("remote_flush", latency(group.remoteFlushNs));
        status.put("latency", latency);
    }

    /**
     * @param group a source group.
     * @return seconds of writes the destination may not hold durably: 0 when drained, else the time since it
     *     last was.
     */
    public static double rpoSeconds(final SourceGroup group)
    {
        return rpoSeconds(group, group.rpoBytes());
    }

    private static double rpoSeconds(final SourceGroup group, final long rpoBytes)
    {
        return rpoMillis(group, rpoBytes) / 1000.0;
    }

    /**
     * @param group    a source group.
     * @param rpoBytes its {@link SourceGroup#rpoBytes()}, read just before.
     * @return milliseconds of writes the destination may not hold durably: 0 when drained, else the time since it
     *     last was.
     */
    public static long rpoMillis(final SourceGroup group, final long rpoBytes)
    {
        return rpoBytes == 0 && isDrained(group) ? 0 : Math.max(0, System.currentTimeMillis() - group.caughtUpMs());
    }

    /**
     * Adds a destination group's latency percentiles (apply to the volume, force of the log) to a status map.
     *
     * @param group  a destination group.
     * @param status the map to fill.
     */
    public static void describe(final DestinationGroup group, final Map<String, Object> status)
    {
        final Map<String, Object> latency = new LinkedHashMap<>();
        latency.put("apply", latency(group.applyNs));
        latency.put("log_force", latency(group.logForceNs));
        status.put("latency", latency);
    }

    static Map<String, Object> latency(final ConcurrentHistogram h)
    {
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("count", h.getTotalCount());
        m.put("p50_us", h.getValueAtPercentile(50) / 1000.0);
        m.put("p99_us", h.getValueAtPercentile(99) / 1000.0);
        m.put("p999_us", h.getValueAtPercentile(99.9) / 1000.0);
        return m;
    }
}
