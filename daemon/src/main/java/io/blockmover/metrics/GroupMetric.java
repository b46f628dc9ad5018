package io.blockmover.metrics;

/**
 * The per-group metrics in the counters file. Each has a stable id (kept in the counter's key, so ids are never
 * reused), a Prometheus name (without the {@code blockmover_group_} prefix), its kind, and the scale from the
 * stored integer to the exported unit. Latencies are stored as percentiles in nanoseconds, updated once a second
 * from the group's HdrHistograms (over the group's life in this daemon), and exported as Prometheus summaries.
 */
public enum GroupMetric
{
    WRITES(1, "writes_total", Kind.COUNTER, 1, "Writes acknowledged to clients of the group's NBD exports."),
    WRITTEN_BYTES(2, "written_bytes_total", Kind.COUNTER, 1, "Bytes written through the group's NBD exports."),
    FLUSHES(3, "flushes_total", Kind.COUNTER, 1, "Flushes requested by clients of the group's NBD exports."),
    REGIONS_RESENT(4, "regions_resent_total", Kind.COUNTER, 1, "Dirty regions resent to the destination."),
    RPO_BYTES(5, "rpo_bytes", Kind.GAUGE, 1, "Bytes of writes the destination may not hold durably yet (on a " +
        "destination: as its source last said)."),
    RPO_SECONDS(6, "rpo_seconds", Kind.GAUGE, 1e-3, "Seconds since the destination last held every write (on a " +
        "destination: as its source last said)."),
    RPO_TARGET_SECONDS(7, "rpo_target_seconds", Kind.GAUGE, 1e-3, "RPO target of the group, 0 for none."),
    RPO_TARGET_EXCEEDED(8, "rpo_target_exceeded", Kind.GAUGE, 1,
        "1 while the RPO is over its target (with hysteresis), else 0."),
    LOG_OVERFLOWED(9, "log_overflowed", Kind.GAUGE, 1,
        "1 while writes are tracked by the bitmaps because the log overflowed, else 0."),
    LOG_USED_BYTES(10, "log_used_bytes", Kind.GAUGE, 1, "Bytes of the group's record log in use."),
    LOG_SIZE_BYTES(11, "log_size_bytes", Kind.GAUGE, 1, "Size of the group's record log."),
    LINKED(12, "linked", Kind.GAUGE, 1, "1 while the group has a session with its partner, else 0."),
    BYTES_SENT(13, "sent_bytes", Kind.GAUGE, 1, "Bytes sent to the partner in the current session."),
    BYTES_RECEIVED(14, "received_bytes", Kind.GAUGE, 1, "Bytes received from the partner in the current session."),
    RECORDS_RECEIVED(15, "records_received", Kind.GAUGE, 1, "Records received in the current session."),
    RECORDS_APPLIED(16, "records_applied_total", Kind.COUNTER, 1, "Records applied to the destination volumes."),
    ERRORS(17, "checksum_failures_total", Kind.COUNTER, 1,
        "Records that arrived damaged (CRC32C mismatch) since the daemon started; each was sent again."),
    DIRTY_BYTES(18, "volume_dirty_bytes", Kind.GAUGE, 1,
        "Bytes of dirty regions of a volume still to send (initial sync or resync progress)."),
    SIZE_BYTES(19, "volume_size_bytes", Kind.GAUGE, 1, "Size of a volume."),
    LATENCY_P50(20, "latency_seconds", Kind.QUANTILE, 1e-9, "0.5"),
    LATENCY_P99(21, "latency_seconds", Kind.QUANTILE, 1e-9, "0.99"),
    LATENCY_P999(22, "latency_seconds", Kind.QUANTILE, 1e-9, "0.999"),
    LATENCY_COUNT(23, "latency_seconds_count", Kind.SUMMARY_COUNT, 1, ""),
    /** Not written today (see {@link GroupCounters}); the id stays reserved. */
    LATENCY_SUM(24, "latency_seconds_sum", Kind.SUMMARY_SUM, 1e-9, ""),
    ACTIVITY_REGIONS(25, "activity_regions", Kind.GAUGE, 1,
        "Regions in the source's activity log: what a crash of its host would resend."),
    RECORDS_MENDED(26, "log_records_mended_total", Kind.COUNTER, 1,
        "Records found damaged in the source's own log since the daemon started, mended from the volume."),
    RECORDS_DROPPED(27, "log_records_dropped_total", Kind.COUNTER, 1,
        "Records the destination dropped from its log since the daemon started, after one was damaged there."),
    LOG_DISCARDED_BYTES(28, "log_discarded_bytes_total", Kind.COUNTER, 1,
        "Bytes of released records in the source's log dropped before they were written to its disk."),
    SOURCE_REPORT_AGE_SECONDS(29, "source_report_age_seconds", Kind.GAUGE, 1e-3,
        "Destination: seconds since its source last said how far ahead it was (the destination's rpo_* and " +
        "behind_records are as of then)."),
    BEHIND_RECORDS(30, "behind_records", Kind.GAUGE, 1,
        "Destination: records its source had logged beyond those held here, as the source last said."),
    LOG_FORCES_SHARED(31, "log_forces_shared_with_volume_total", Kind.COUNTER, 1,
        "FLUSHes that needed the source's log durable and got it from the volume's own device flush (one disk)."),
    WRITES_WAITED(32, "writes_waited_total", Kind.COUNTER, 1,
        "Source writes that waited, before their append, for an earlier write to the same bytes or a resync of " +
        "their region: each held its connection's later requests meanwhile."),
    ZERO_BYTES(33, "zero_bytes_total", Kind.COUNTER, 1,
        "Source: bytes of zeros logged and sent as their length only (a client's WRITE_ZEROES, empty regions)."),
    DEALLOCATED_BYTES(34, "deallocated_bytes_total", Kind.COUNTER, 1,
        "Destination: bytes of zeros applied by deallocating their range (left as holes) instead of written.");

    /**
     * How a metric is exported.
     */
    public enum Kind
    {
        COUNTER, GAUGE, QUANTILE, SUMMARY_COUNT, SUMMARY_SUM
    }

    /** Help line of the latency summary. */
    public static final String LATENCY_HELP = "Latency of a stage, over the group's life in this daemon: " +
        "local_write (source volume), partner_ack (record to ACK), remote_flush (record to durable on the " +
        "destination), apply (destination volume write), log_force (destination log force).";

    private final int id;
    private final String name;
    private final Kind kind;
    private final double scale;
    private final String helpOrQuantile;

    GroupMetric(final int id, final String name, final Kind kind, final double scale, final String helpOrQuantile)
    {
        this.id = id;
        this.name = name;
        this.kind = kind;
        this.scale = scale;
        this.helpOrQuantile = helpOrQuantile;
    }

    public int id()
    {
        return id;
    }

    /**
     * @return Prometheus name without the {@code blockmover_group_} prefix.
     */
    public String promName()
    {
        return name;
    }

    public Kind kind()
    {
        return kind;
    }

    /**
     * @return factor from the stored value to the exported unit.
     */
    public double scale()
    {
        return scale;
    }

    /**
     * @return the HELP text, or for a quantile, its quantile label.
     */
    public String help()
    {
        return helpOrQuantile;
    }

    /**
     * @param id a stored id.
     * @return the metric, or null if this version does not know it.
     */
    public static GroupMetric byId(final int id)
    {
        for (final GroupMetric m : values())
        {
            if (m.id == id)
            {
                return m;
            }
        }
        return null;
    }
}
