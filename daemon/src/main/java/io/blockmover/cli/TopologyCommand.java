package io.blockmover.cli;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.topology.HtmlReport;

/**
 * blockmover topology-test: Storage Replica's Test-SRTopology for blockmover.
 */
@Command(name = "topology-test", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Measure whether this host and PEER can replicate VOLUMEs, and how to size it.",
        "",
        "Run it on the would-be source host; its blockmoverd does the work:",
        "  1. network, over each transport the peer can use (TCP always; RDMA when peer.PEER.transport = auto",
        "     or rdma finds a device, else it says why not): round-trip time of many small frames, one at a",
        "     time (min, p50, p99), then bandwidth of bulk frames sent one way for a few seconds, over the same",
        "     authenticated handshake as replication (a short 'probe' session; the peer writes nothing);",
        "  2. the write rate of each volume over --duration, and then its read rate (sequential O_DIRECT reads",
        "     of the volume, read only: what the initial sync reads at);",
        "  3. recommendations: a log size of --outage x the sum of the peak write rates, rounded up to a whole",
        "     GiB and at least 1 GiB; the initial sync time, size / min(read rate, network bandwidth).",
        "",
        "The write rate comes from: --workload none (default) the kernel's counters of the block device",
        "(/sys/dev/block/MAJ:MIN/stat; for a regular file, of the device holding it), that is, what your",
        "applications write during the test; --workload builtin a built-in O_DIRECT writer of random 64 KiB",
        "blocks; --workload fio fio randwrite (64 KiB, direct=1). Both workloads write to a scratch file beside",
        "the volume (for a block device, in the daemon's state directory), removed afterwards. NOTHING IS EVER",
        "WRITTEN TO THE VOLUME ITSELF: it is only read.",
        "",
        "Progress goes to stderr. Prints a table (or --json), and with --report a self-contained HTML report",
        "with charts that needs no network to view."})
final class TopologyCommand extends BlockmoverCli.Common implements Callable<Integer>
{
    private static final long POLL_MS = 250;

    @Option(names = "--peer", required = true, paramLabel = "PEER", description = "the would-be destination, as " +
        "configured (peer.PEER.address, peer.PEER.key.file)")
    String peer;

    @Option(names = "--volume", required = true, paramLabel = "PATH", description = "a block device or file on this " +
        "host that would be replicated; repeat for each volume of the group")
    List<String> volumes;

    @Option(names = "--duration", paramLabel = "TIME", defaultValue = "2m", description = "how long to sample the " +
        "write rate (e.g. 30s, 2m, 1h; at least 1s). Default: ${DEFAULT-VALUE}. Network and read tests add a few " +
        "seconds each")
    String duration;

    @Option(names = "--workload", paramLabel = "none|builtin|fio", defaultValue = "none", description = "what " +
        "writes while the write rate is sampled (see above; never the volume itself). Default: ${DEFAULT-VALUE}")
    String workload;

    @Option(names = "--outage", paramLabel = "TIME", defaultValue = "1h", description = "the longest outage of the " +
        "link or partner the log must absorb without a resync. Default: ${DEFAULT-VALUE}")
    String outage;

    @Option(names = "--report", paramLabel = "FILE.html", description = "write the HTML report here")
    Path report;

    @Override
    @SuppressWarnings("unchecked")
    public Integer call() throws IOException
    {
        final Map<String, Object> args = new LinkedHashMap<>();
        args.put("peer", peer);
        args.put("volumes", volumes);
        args.put("duration_ms", parseDurationMs("--duration", duration));
        args.put("outage_seconds", parseDurationMs("--outage", outage) / 1000);
        args.put("workload", workload.toLowerCase(Locale.ROOT));
        Map<String, Object> status;
        try (ControlClient client = connect())
        {
            status = (Map<String, Object>)client.call("topology-start", args);
            final Map<String, Object> poll = new LinkedHashMap<>();
            poll.put("id", status.get("id"));
            String lastPhase = "";
            final boolean tty = System.console() != null;
            while ("running".equals(status.get("state")))
            {
                sleep();
                status = (Map<String, Object>)client.call("topology-status", poll);
                final String phase = String.valueOf(status.get("phase"));
                final String line = String.format(Locale.ROOT, "topology test %s: %3.0f%% %s (%s)", status.get("id"),
                    ((Number)status.get("progress")).doubleValue() * 100, phase,
                    Format.duration(((Number)status.get("elapsed_ms")).longValue() / 1000.0));
                if (tty)
                {
                    System.err.print("\r" + line + "\033[K");
                }
                else if (!phase.equals(lastPhase))
                {
                    System.err.println(line);
                }
                lastPhase = phase;
            }
            if (tty)
            {
                System.err.println();
            }
        }
        if (!"done".equals(status.get("state")))
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "topology test " + status.get("id") + " failed: " +
                status.get("error"));
        }
        final Map<String, Object> result = (Map<String, Object>)status.get("result");
        if (report != null)
        {
            Files.writeString(report, HtmlReport.render(result), StandardCharsets.UTF_8);
            System.err.println("report written to " + report.toAbsolutePath());
        }
        if (json)
        {
            printJson(result);
        }
        else
        {
            printTable(result);
        }
        return 0;
    }

    private static void sleep()
    {
        try
        {
            Thread.sleep(POLL_MS);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            throw new BlockmoverException(ErrorCode.CANCELLED, "interrupted");
        }
    }

    /**
     * @param option for the error message.
     * @param text   a number with s, m or h (seconds when none).
     * @return milliseconds.
     */
    static long parseDurationMs(final String option, final String text)
    {
        final String t = text.trim().toLowerCase(Locale.ROOT);
        final long unit = t.endsWith("ms") ? 1 : t.endsWith("h") ? 3_600_000 : t.endsWith("m") ? 60_000 : 1_000;
        final String digits = t.endsWith("ms") ? t.substring(0, t.length() - 2) :
            Character.isLetter(t.isEmpty() ? '0' : t.charAt(t.length() - 1)) && (t.endsWith("h") || t.endsWith("m") ||
            t.endsWith("s")) ? t.substring(0, t.length() - 1) : t;
        try
        {
            final long value = Long.parseLong(digits);
            if (value < 0)
            {
                throw new NumberFormatException();
            }
            return value * unit;
        }
        catch (final NumberFormatException ex)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, option + " '" + text + "' is not a duration " +
                "(e.g. 90s, 2m, 1h)");
        }
    }

    @SuppressWarnings("unchecked")
    private static void printTable(final Map<String, Object> r)
    {
        System.out.printf(Locale.ROOT, "topology test %s -> %s (%s), volumes sampled %.0f s, workload %s%n",
            r.get("node"), r.get("peer"), r.get("peer_address"), ((Number)r.get("duration_ms")).doubleValue() / 1000,
            r.get("workload"));
        System.out.println();
        System.out.printf(Locale.ROOT, "%-10s %10s %10s %10s %7s %14s%n", "transport", "rtt min", "p50", "p99",
            "pings", "bandwidth");
        for (final Map<String, Object> t : (List<Map<String, Object>>)r.get("network"))
        {
            final Map<String, Object> rtt = (Map<String, Object>)t.get("rtt");
            if (!Boolean.TRUE.equals(t.get("available")))
            {
                System.out.printf(Locale.ROOT, "%-10s not available: %s%n", t.get("transport"), t.get("reason"));
            }
            else if (rtt == null || !rtt.containsKey("p50_us"))
            {
                System.out.printf(Locale.ROOT, "%-10s failed: %s%n", t.get("transport"), t.get("error"));
            }
            else
            {
                System.out.printf(Locale.ROOT, "%-10s %7.1f us %7.1f us %7.1f us %7s %14s%n", t.get("transport"),
                    ((Number)rtt.get("min_us")).doubleValue(), ((Number)rtt.get("p50_us")).doubleValue(),
                    ((Number)rtt.get("p99_us")).doubleValue(), rtt.get("count"),
                    Format.rate(((Number)t.get("bandwidth_bps")).doubleValue()));
            }
        }
        System.out.println();
        System.out.printf(Locale.ROOT, "%-32s %10s %12s %12s %12s%n", "volume", "size", "peak write", "mean write",
            "read");
        for (final Map<String, Object> v : (List<Map<String, Object>>)r.get("volumes"))
        {
            System.out.printf(Locale.ROOT, "%-32s %10s %12s %12s %12s%n", v.get("path"),
                Format.bytes(((Number)v.get("size")).longValue()),
                Format.rate(((Number)v.get("write_rate_peak_bps")).doubleValue()),
                Format.rate(((Number)v.get("write_rate_mean_bps")).doubleValue()),
                Format.rate(((Number)v.get("read_rate_bps")).doubleValue()));
            System.out.println("  writes from: " + v.get("write_source"));
        }
        final Map<String, Object> rec = (Map<String, Object>)r.get("recommendations");
        System.out.println();
        System.out.printf(Locale.ROOT, "recommended log size: %s (--log-size %dg): %s; outage %s s x peak %s%n",
            Format.bytes(((Number)rec.get("log_bytes")).longValue()), ((Number)rec.get("log_bytes")).longValue() >> 30,
            rec.get("log_rule"), rec.get("outage_seconds"),
            Format.rate(((Number)rec.get("peak_write_rate_bps")).doubleValue()));
        System.out.printf(Locale.ROOT, "estimated initial sync: %s (network %s over %s)%n",
            Format.duration(((Number)rec.get("initial_sync_seconds")).doubleValue()),
            Format.rate(((Number)rec.get("network_bandwidth_bps")).doubleValue()), rec.get("network_transport"));
        for (final Map<String, Object> s : (List<Map<String, Object>>)rec.get("initial_sync"))
        {
            System.out.printf(Locale.ROOT, "  %s: %s at %s, limited by %s%n", s.get("volume"),
                Format.duration(((Number)s.get("seconds")).doubleValue()), Format.rate(((Number)s.get("rate_bps"))
                .doubleValue()), s.get("limited_by"));
        }
    }
}
