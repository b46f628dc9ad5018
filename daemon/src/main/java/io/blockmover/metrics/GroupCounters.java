package io.blockmover.metrics;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.cnc.CncFile;

/**
 * The counters of one group in the counters file, filled once a second from the group's status (the same figures
 * 'blockmover group status' shows), so that 'blockmover stat' and Prometheus see them without the daemon's help.
 * Counters are created as the status first shows a figure and freed by {@link #close()}. Conductor thread only.
 */
public final class GroupCounters implements AutoCloseable
{
    private static final Map<String, GroupMetric> LATENCY_PARTS = Map.of("p50_us", GroupMetric.LATENCY_P50,
        "p99_us", GroupMetric.LATENCY_P99, "p999_us", GroupMetric.LATENCY_P999);

    private final CncFile cnc;
    private final String group;
    private final String role;
    private final String peer;
    private final Map<String, AtomicCounter> counters = new HashMap<>();
    private final List<AtomicCounter> all = new ArrayList<>();

    /**
     * @param cnc   the counters file.
     * @param group name.
     * @param role  source or destination.
     * @param peer  the partner.
     */
    public GroupCounters(final CncFile cnc, final String group, final String role, final String peer)
    {
        this.cnc = cnc;
        this.group = group;
        this.role = role;
        this.peer = peer;
    }

    public String role()
    {
        return role;
    }

    /**
     * @param status the group's status map ('blockmover group status --json').
     */
    @SuppressWarnings("unchecked")
    public void update(final Map<String, Object> status)
    {
        set(GroupMetric.WRITES, -1, -1, status.get("writes"), 1);
        set(GroupMetric.WRITTEN_BYTES, -1, -1, status.get("bytes_written"), 1);
        set(GroupMetric.FLUSHES, -1, -1, status.get("flushes"), 1);
        set(GroupMetric.REGIONS_RESENT, -1, -1, status.get("regions_resent"), 1);
        set(GroupMetric.RPO_BYTES, -1, -1, status.get("rpo_bytes"), 1);
        set(GroupMetric.RPO_SECONDS, -1, -1, status.get("rpo_seconds"), 1000);
        if (status.get("source_report") instanceof Map<?, ?> report)
        {
            // A destination's RPO as its source last said, and how old that is: the DR site can watch its own
            // exposure, and keeps a figure (aging) once the source is gone.
            set(GroupMetric.RPO_BYTES, -1, -1, report.get("rpo_bytes"), 1);
            set(GroupMetric.RPO_SECONDS, -1, -1, report.get("rpo_seconds"), 1000);
            set(GroupMetric.BEHIND_RECORDS, -1, -1, report.get("records_behind"), 1);
            set(GroupMetric.SOURCE_REPORT_AGE_SECONDS, -1, -1, report.get("seconds_ago"), 1000);
        }
        set(GroupMetric.RPO_TARGET_SECONDS, -1, -1, status.getOrDefault("rpo_target_s", "source".equals(role) ? 0 :
            null), 1000);
        if (status.containsKey("rpo_target_s"))
        {
            set(GroupMetric.RPO_TARGET_EXCEEDED, -1, -1, flag(status.get("rpo_target_exceeded")), 1);
        }
        if (status.containsKey("rpo_exceeded"))
        {
            set(GroupMetric.LOG_OVERFLOWED, -1, -1, flag(status.get("rpo_exceeded")), 1);
        }
        if (status.get("log") instanceof Map<?, ?> log)
        {
            set(GroupMetric.LOG_USED_BYTES, -1, -1, log.get("used"), 1);
            set(GroupMetric.LOG_SIZE_BYTES, -1, -1, log.get("size"), 1);
            set(GroupMetric.LOG_DISCARDED_BYTES, -1, -1, log.get("discarded"), 1);
            set(GroupMetric.LOG_FORCES_SHARED, -1, -1, log.get("forces_shared_with_volume"), 1);
        }
        set(GroupMetric.LINKED, -1, -1, status.get("transport") != null ? 1 : 0, 1);
        set(GroupMetric.BYTES_SENT, -1, -1, status.get("bytes_sent"), 1);
        set(GroupMetric.BYTES_RECEIVED, -1, -1, status.get("bytes_received"), 1);
        set(GroupMetric.RECORDS_RECEIVED, -1, -1, status.get("records_received"), 1);
        set(GroupMetric.RECORDS_APPLIED, -1, -1, status.get("records_applied"), 1);
        set(GroupMetric.ERRORS, -1, -1, status.get("checksum_failures"), 1);
        set(GroupMetric.ACTIVITY_REGIONS, -1, -1, status.get("activity_regions"), 1);
        set(GroupMetric.RECORDS_MENDED, -1, -1, status.get("records_mended"), 1);
        set(GroupMetric.WRITES_WAITED, -1, -1, status.get("writes_waited"), 1);
        set(GroupMetric.ZERO_BYTES, -1, -1, status.get("zero_bytes"), 1);
        set(GroupMetric.DEALLOCATED_BYTES, -1, -1, status.get("bytes_deallocated"), 1);
        set(GroupMetric.RECORDS_DROPPED, -1, -1, status.get("records_dropped"), 1);
        if (status.get("volumes") instanceof List<?> volumes)
        {
            for (int i = 0; i < volumes.size(); i++)
            {
                final Map<String, Object> v = (Map<String, Object>)volumes.get(i);
                set(GroupMetric.SIZE_BYTES, i, -1, v.get("size"), 1);
                set(GroupMetric.DIRTY_BYTES, i, -1, v.get("dirty_bytes"), 1);
            }
        }
        if (status.get("latency") instanceof Map<?, ?> latency)
        {
            for (int stage = 0; stage < GroupCounterKey.STAGES.length; stage++)
            {
                if (latency.get(GroupCounterKey.STAGES[stage]) instanceof Map<?, ?> h)
                {
                    for (final Map.Entry<String, GroupMetric> part : LATENCY_PARTS.entrySet())
                    {
                        set(part.getValue(), -1, stage, h.get(part.getKey()), 1000);
                    }
                    // No _sum: HdrHistogram keeps none, and its getMean() iterates the buckets, which fails with
                    // ConcurrentModificationException while the data path records (a summary may omit _sum).
                    set(GroupMetric.LATENCY_COUNT, -1, stage, h.get("count"), 1);
                }
            }
        }
    }

    private static Object flag(final Object value)
    {
        return Boolean.TRUE.equals(value) ? 1 : 0;
    }

    private void set(final GroupMetric metric, final int volume, final int stage, final Object value,
        final double scale)
    {
        if (!(value instanceof Number n))
        {
            return;
        }
        final String key = metric.id() + "/" + volume + "/" + stage;
        AtomicCounter counter = counters.get(key);
        if (counter == null)
        {
            final StringBuilder label = new StringBuilder("group ").append(group).append(' ');
            if (volume >= 0)
            {
                label.append("volume ").append(volume).append(' ');
            }
            if (stage >= 0)
            {
                label.append(GroupCounterKey.STAGES[stage]).append(' ');
            }
            label.append(metric.promName().replace('_', ' '));
            if (metric.kind() == GroupMetric.Kind.QUANTILE)
            {
                label.append(" p").append("0.5".equals(metric.help()) ? "50" : metric.help().substring(2))
                    .append(" ns");
            }
            counter = cnc.newCounter(label.toString(), GroupCounterKey.TYPE_ID,
                (buffer) -> GroupCounterKey.write(buffer, metric, volume, stage, group, role, peer));
            counters.put(key, counter);
            all.add(counter);
        }
        counter.setRelease(Math.round(n.doubleValue() * scale));
    }

    /**
     * Frees the counters.
     */
    @Override
    public void close()
    {
        for (final AtomicCounter counter : all)
        {
            counter.close();
        }
        all.clear();
        counters.clear();
    }
}
