package io.blockmover.metrics;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.agrona.concurrent.status.CountersReader;

import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;

/**
 * Writes the counters file in the Prometheus text exposition format (version 0.0.4), for node_exporter's textfile
 * collector or a scrape of the loopback endpoint. Reads only the counters file, so it works with the daemon
 * stopped (then {@code blockmover_up} is 0 and the values are the last ones written):
 * <pre>
 *   blockmover_up{node="a"} 1
 *   blockmover_errors_total{node="a"} 0                                    system counters
 *   blockmover_job_bytes_remaining{node="a",job="3"} 0                     per copy job
 *   blockmover_group_rpo_seconds{node="a",group="sql",role="source",peer="b"} 0.2
 *   blockmover_group_volume_dirty_bytes{...,volume="0"} 0
 *   blockmover_group_latency_seconds{...,stage="partner_ack",quantile="0.99"} 0.000175
 * </pre>
 * Each metric family gets its HELP and TYPE lines once; latencies are summaries. Stateless; any thread.
 */
public final class PrometheusWriter
{
    private PrometheusWriter()
    {
    }

    private static final class Family
    {
        final String help;
        final String type;
        final List<String> samples = new ArrayList<>();

        Family(final String help, final String type)
        {
            this.help = help;
            this.type = type;
        }
    }

    /**
     * @param cnc   an open counters file.
     * @param nowMs epoch milliseconds, to judge the heartbeat.
     * @return the exposition text.
     */
    public static String write(final CncFile cnc, final long nowMs)
    {
        final String node = "node=\"" + escape(cnc.nodeName()) + "\"";
        final boolean alive = ProcessHandle.of(cnc.pid()).map(ProcessHandle::isAlive).orElse(false) &&
            nowMs - cnc.heartbeatMs() < 3000;
        final Map<String, Family> families = new TreeMap<>();
        family(families, "blockmover_up", "1 when blockmoverd runs and its conductor beat in the last 3 s.", "gauge")
            .samples.add("blockmover_up{" + node + "} " + (alive ? 1 : 0));
        family(families, "blockmover_heartbeat_age_seconds", "Seconds since the conductor's last heartbeat.", "gauge")
            .samples.add("blockmover_heartbeat_age_seconds{" + node + "} " + number((nowMs - cnc.heartbeatMs()) / 1e3));
        family(families, "blockmover_start_time_seconds", "Start time of blockmoverd, seconds since the epoch.",
            "gauge").samples.add("blockmover_start_time_seconds{" + node + "} " + number(cnc.startTimeMs() / 1e3));
        final CountersReader reader = cnc.reader();
        reader.forEach((counterId, typeId, key, label) ->
        {
            final long value = reader.getCounterValue(counterId);
            if (typeId == SystemCounter.TYPE_ID)
            {
                final String name = "blockmover_" + label.replace(' ', '_') + "_total";
                family(families, name, "Counter '" + label + "' of blockmoverd since it started.", "counter")
                    .samples.add(name + "{" + node + "} " + value);
            }
            else if (typeId == 2 && label.startsWith("job "))
            {
                final int space = label.indexOf(' ', 4);
                final String what = label.substring(space + 1).replace(' ', '_');
                final String name = "blockmover_job_" + what;
                family(families, name, "Copy job: " + label.substring(space + 1) + ".", "gauge").samples
                    .add(name + "{" + node + ",job=\"" + escape(label.substring(4, space)) + "\"} " + value);
            }
            else if (typeId == GroupCounterKey.TYPE_ID)
            {
                final GroupMetric metric = GroupMetric.byId(GroupCounterKey.metricId(key));
                if (metric == null)
                {
                    return; // Written by a newer daemon: skip rather than guess.
                }
                final StringBuilder labels = new StringBuilder(node)
                    .append(",group=\"").append(escape(GroupCounterKey.group(key)))
                    .append("\",role=\"").append(GroupCounterKey.role(key))
                    .append("\",peer=\"").append(escape(GroupCounterKey.peer(key))).append('"');
                if (GroupCounterKey.volume(key) >= 0)
                {
                    labels.append(",volume=\"").append(GroupCounterKey.volume(key)).append('"');
                }
                final int stage = GroupCounterKey.stage(key);
                if (stage >= 0 && stage < GroupCounterKey.STAGES.length)
                {
                    labels.append(",stage=\"").append(GroupCounterKey.STAGES[stage]).append('"');
                }
                final String scaled = metric.scale() == 1 ? Long.toString(value) : number(value * metric.scale());
                switch (metric.kind())
                {
                    case COUNTER, GAUGE ->
                    {
                        final String name = "blockmover_group_" + metric.promName();
                        family(families, name, metric.help(), metric.kind() == GroupMetric.Kind.COUNTER ?
                            "counter" : "gauge").samples.add(name + "{" + labels + "} " + scaled);
                    }
                    case QUANTILE -> latency(families).samples.add("blockmover_group_latency_seconds{" + labels +
                        ",quantile=\"" + metric.help() + "\"} " + scaled);
                    default -> latency(families).samples.add("blockmover_group_" + metric.promName() + "{" +
                        labels + "} " + scaled);
                }
            }
        });
        final StringBuilder out = new StringBuilder(4096);
        for (final Map.Entry<String, Family> entry : families.entrySet())
        {
            final Family f = entry.getValue();
            out.append("# HELP ").append(entry.getKey()).append(' ').append(f.help.replace("\\", "\\\\")
                .replace("\n", "\\n")).append('\n');
            out.append("# TYPE ").append(entry.getKey()).append(' ').append(f.type).append('\n');
            for (final String sample : f.samples)
            {
                out.append(sample).append('\n');
            }
        }
        return out.toString();
    }

    private static Family latency(final Map<String, Family> families)
    {
        return family(families, "blockmover_group_latency_seconds", GroupMetric.LATENCY_HELP, "summary");
    }

    private static Family family(final Map<String, Family> families, final String name, final String help,
        final String type)
    {
        return families.computeIfAbsent(name, (n) -> new Family(help, type));
    }

    static String number(final double value)
    {
        if (value == Math.rint(value) && Math.abs(value) < 1e15)
        {
            return Long.toString((long)value);
        }
        return String.format(Locale.ROOT, "%.9g", value).replaceAll("0+(e|$)", "$1").replaceAll("\\.(e|$)", "$1");
    }

    static String escape(final String value)
    {
        return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
    }
}
