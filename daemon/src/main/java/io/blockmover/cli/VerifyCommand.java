package io.blockmover.cli;

import java.io.PrintStream;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.daemon.Context;
import io.blockmover.replication.verify.VerifyInterval;

/**
 * blockmover verify: online comparison of both sides of a group, and its schedule.
 */
@Command(name = "verify", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Compare both sides of a group while replication runs, and report what differs.",
        "",
        "Every region of every volume is compared; the ranges that differ are reported (volume, offset,",
        "length). Run it on the source.",
        "",
        "Writes go on during a verify. The comparison travels inside the group's ordered stream: the source",
        "holds writes to one region for the time it takes to read it (a region at a time), logs the region's",
        "CRC32C checksums (one per 64 KiB) after every write the region holds, and the destination checks its",
        "copy when it applies that point of the stream. So a difference is a real one: data changed behind",
        "blockmover's back, or damaged on a disk. With --repair, the regions that differ are sent again",
        "through the stream, fenced like any resync; the command returns once they are queued, and a second",
        "verify then compares the repaired data.",
        "",
        "A group that is suspended, not linked, or still in its initial sync cannot be verified. A verify",
        "can also run on a schedule: --schedule 7d (kept in the group, shown by 'blockmover group status';",
        "a scheduled verify reports and never repairs)."},
    exitCodeListHeading = "%nExit status:%n",
    exitCodeList = {
        "0:both sides are identical (or every difference was repaired); --schedule: saved",
        "1:differences were found and not repaired, or the verify failed (link lost, read error)",
        "3:blockmoverd is not running, still starting (checking its groups' logs), or not reachable on its " +
            "control socket",
        "4:refused: no such group, the group is a destination here (run verify on its source), suspended,",
        "  or still in its initial sync",
        "5:the group is not linked to its partner, or a verify of it is already running"})
final class VerifyCommand extends BlockmoverCli.Common implements Callable<Integer>
{
    @Parameters(index = "0", paramLabel = "GROUP", description = "the group (this host must be its source)")
    String name;

    @Option(names = "--repair", description = "resend the regions that differ, so both sides are equal again")
    boolean repair;

    @Option(names = "--max-rate", paramLabel = "RATE", description = "read at most RATE bytes per second on each " +
        "side (e.g. 200m), so the verify leaves the disks to client writes; default: as fast as the partner " +
        "answers")
    String maxRate;

    @Option(names = "--detach", description = "return once the verify has started; follow it with 'blockmover " +
        "group status GROUP'")
    boolean detach;

    @Option(names = "--schedule", paramLabel = "INTERVAL", description = "instead of verifying now, verify the " +
        "group every INTERVAL (7d, 12h, 30m, 90s) from now on, or 'off'")
    String schedule;

    @Option(names = "--interval", paramLabel = "MS", defaultValue = "250",
        description = "progress refresh interval in milliseconds (default: ${DEFAULT-VALUE})")
    long intervalMs;

    @Override
    @SuppressWarnings("unchecked")
    public Integer call() throws InterruptedException
    {
        if (schedule != null)
        {
            final long ms;
            try
            {
                ms = VerifyInterval.parseMs(schedule);
            }
            catch (final IllegalArgumentException ex)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--schedule: " + ex.getMessage());
            }
            final Map<String, Object> status = (Map<String, Object>)call("group-verify-schedule",
                Map.of("name", name, "interval_ms", ms));
            if (json)
            {
                printJson(status);
            }
            else
            {
                System.out.println("group " + name + ": " + (ms == 0 ? "scheduled verify off" :
                    "verify every " + VerifyInterval.format(ms)));
            }
            return 0;
        }
        final Map<String, Object> args = new LinkedHashMap<>();
        args.put("name", name);
        args.put("repair", repair);
        if (maxRate != null)
        {
            try
            {
                args.put("max_rate", Context.parseSize(maxRate));
            }
            catch (final IllegalArgumentException ex)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--max-rate " + maxRate + ": " + ex.getMessage());
            }
        }
        try (ControlClient client = connect())
        {
            Map<String, Object> job = (Map<String, Object>)client.call("group-verify", args);
            if (detach)
            {
                if (json)
                {
                    printJson(job);
                }
                else
                {
                    System.out.println("verify " + job.get("job") + " of group " + name + " started");
                }
                return 0;
            }
            final Progress progress = new Progress(System.err, json);
            while (true)
            {
                progress.show(job);
                if (!isRunning(job))
                {
                    break;
                }
                TimeUnit.MILLISECONDS.sleep(intervalMs);
                job = (Map<String, Object>)client.call("group-verify-status", Map.of("name", name));
            }
            progress.end();
            if (json)
            {
                printJson(job);
            }
            else
            {
                System.out.println(summary(job));
            }
            return exitCode(job);
        }
    }

    static boolean isRunning(final Map<String, Object> job)
    {
        final String state = String.valueOf(job.get("state"));
        return state.equals("verifying") || state.equals("repairing");
    }

    static int exitCode(final Map<String, Object> job)
    {
        final Object result = job.get("result");
        return "identical".equals(result) || "repaired".equals(result) ? 0 : 1;
    }

    private static long number(final Map<String, Object> map, final String key)
    {
        return map.get(key) instanceof Number n ? n.longValue() : 0;
    }

    /**
     * @return the verify's outcome, then one line per range that differs.
     */
    @SuppressWarnings("unchecked")
    static String summary(final Map<String, Object> job)
    {
        final StringBuilder s = new StringBuilder();
        final double seconds = Math.max(0, number(job, "finished_ms") - number(job, "started_ms")) / 1000.0;
        s.append("verify ").append(job.get("job")).append(" of group ").append(job.get("group")).append(": ")
            .append(job.get("result")).append(String.format(Locale.ROOT, ", %d of %d regions compared in %.1f s, ",
            number(job, "regions_compared"), number(job, "regions_total"), seconds))
            .append(number(job, "regions_different")).append(" different");
        if (number(job, "regions_skipped") > 0)
        {
            s.append(", ").append(number(job, "regions_skipped")).append(" skipped (dirty: already being resent)");
        }
        if (number(job, "regions_repaired") > 0)
        {
            s.append(", ").append(number(job, "regions_repaired")).append(" resent");
        }
        final List<Map<String, Object>> mismatches = (List<Map<String, Object>>)job.get("mismatches");
        if (mismatches != null)
        {
            final String verb = "repaired".equals(job.get("result")) ? "resent" : "differs";
            for (final Map<String, Object> m : mismatches)
            {
                s.append(String.format(Locale.ROOT, "%n  %s: %s -> %s  offset %d  length %d", verb,
                    m.get("source"), m.get("target"), number(m, "offset"), number(m, "length")));
            }
        }
        if (job.get("error") instanceof Map<?, ?> error)
        {
            s.append("\n  error ").append(error.get("code")).append(": ").append(error.get("message"));
        }
        return s.toString();
    }

    /**
     * @param verify the "verify" part of 'group status'.
     * @return one line for the text form of 'group status'.
     */
    @SuppressWarnings("unchecked")
    static String statusLine(final Map<String, Object> verify)
    {
        final StringBuilder s = new StringBuilder("verify every ").append(verify.get("interval"));
        if (verify.get("running") instanceof Map<?, ?> running)
        {
            s.append(Boolean.TRUE.equals(running.get("seed")) ? ", seeded initial sync: " : ", running: ")
                .append(number((Map<String, Object>)running, "regions_compared")).append(" of ")
                .append(number((Map<String, Object>)running, "regions_total")).append(" regions compared");
        }
        if (verify.get("last") instanceof Map<?, ?> last)
        {
            s.append(", last: ").append(last.get("result")).append(" at ")
                .append(Instant.ofEpochMilli(number((Map<String, Object>)last, "finished_ms")))
                .append(" (").append(number((Map<String, Object>)last, "regions_different")).append(" regions " +
                "different)");
        }
        else if (verify.get("running") == null)
        {
            s.append(", never run");
        }
        return s.toString();
    }

    /**
     * The verify's progress: regions compared, rate, ETA, differences so far.
     */
    static final class Progress
    {
        private final ProgressLine line;

        Progress(final PrintStream out, final boolean quiet)
        {
            line = new ProgressLine(out, quiet);
        }

        void show(final Map<String, Object> job)
        {
            final long total = number(job, "regions_total");
            final long done = number(job, "regions_compared") + number(job, "regions_skipped");
            if (!line.update(done, total, !isRunning(job)))
            {
                return;
            }
            final double fraction = total == 0 ? 1 : (double)done / total;
            line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %d of %d regions compared  %.0f regions/s " +
                "(%s)  ETA %s  %d different  %s", ProgressLine.bar(fraction), fraction * 100, done, total,
                line.rate(), line.formatRate(line.rate() * number(job, "region_length")),
                Format.duration(line.secondsLeft(total - done)), number(job, "regions_different"), job.get("state")));
        }

        void end()
        {
            line.end();
        }
    }
}
