package io.blockmover.cli;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicBoolean;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.daemon.Context;
import io.blockmover.replication.group.RpoTarget;

/**
 * blockmover group: continuous replication of a group of volumes to a partner.
 */
@Command(name = "group", mixinStandardHelpOptions = true,
    subcommands = {
        GroupCommand.Create.class,
        GroupCommand.Status.class,
        GroupCommand.Suspend.class,
        GroupCommand.Resume.class,
        GroupCommand.Switch.class,
        GroupCommand.Freeze.class,
        GroupCommand.Thaw.class,
        GroupCommand.Delete.class,
        GroupCommand.Set.class,
        TestFailoverCommand.class,
        CommandLine.HelpCommand.class},
    description = {
        "Replicate a group of volumes continuously to a partner host.",
        "",
        "The source exposes each source volume as an NBD export (its URI is in 'group status'); every write",
        "through it is replicated: in sync mode acknowledged once the partner's log holds it (RPO zero), in",
        "async mode once the local log holds it. Write order is kept across all volumes of the group. The",
        "partner creates its side of the group when the source first connects; its volumes are held by",
        "blockmoverd and never writable while they are destinations."})
final class GroupCommand implements Callable<Integer>
{
    @Override
    public Integer call()
    {
        new CommandLine(this).usage(System.out);
        return 2;
    }

    /**
     * blockmover group create.
     */
    @Command(name = "create", mixinStandardHelpOptions = true, sortOptions = false,
        description = {
            "Create a group here (the source) and on PEER, and start its initial sync.",
            "",
            "Every region of every volume is sent while writes through the NBD exports are already replicated",
            "(with --seeded: every region is compared on both hosts, and only those that differ are sent).",
            "Returns once the partner accepted the group; follow it with 'blockmover group status NAME'.",
            "The partner is asked as soon as this host begins writing its log, so a group it refuses (a target",
            "missing or too small, no room for its log) is refused within seconds, and both logs are written at",
            "the same time. Fails at once when nothing answers at the partner's address; a handshake that breaks",
            "after the connection was made (reset, no answer in connect.timeout) is tried again, and the create",
            "fails after three broken in a row.",
            "Ctrl-C (or SIGTERM) cancels a create still under way, on both hosts, and exits with status 130;",
            "a group created before the interrupt reached the daemon is kept. A create whose client went away",
            "otherwise (its host rebooted, its SSH session cut) runs on: 'blockmover group delete NAME' cancels it."})
    static final class Create extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "group name (letters, digits, '.', '_', '-')")
        String name;

        @Option(names = "--peer", required = true, paramLabel = "PEER", description = "partner, as configured " +
            "(peer.PEER.address and peer.PEER.key.file)")
        String peer;

        @Option(names = "--mode", paramLabel = "sync|async", defaultValue = "sync",
            description = "sync: a write is acknowledged once the partner's log holds it (RPO zero); async: once " +
                "the local log holds it. Default: ${DEFAULT-VALUE}")
        String mode;

        @Option(names = "--volume", required = true, paramLabel = "SOURCE=TARGET",
            description = "a local volume and the partner's volume it replicates to; repeat for each volume. The " +
                "export is NAME/<last part of SOURCE>")
        List<String> volumes;

        @Option(names = "--log-size", paramLabel = "SIZE", description = "record log on each side (e.g. 8g): how " +
            "much an async group or an outage can queue before writes fall back to bitmap tracking (default: " +
            "the daemon's group.log.size; refused at once where the file system of the state directory lacks " +
            "room for it, on either host). Each side writes its log whole once before the group starts (about " +
            "a second per GiB on an SSD), both at the same time; both daemons keep serving meanwhile, this " +
            "command shows how far the logs are (on stderr, once it has waited a second), and it returns once " +
            "the partner has accepted the group")
        String logSize;

        @Option(names = "--on-disconnect", paramLabel = "continue|block", defaultValue = "continue",
            description = "sync groups, partner unreachable: continue (serve writes, track them, resync on " +
                "reconnect) or block writes until it is back. Default: ${DEFAULT-VALUE}")
        String onDisconnect;

        @Option(names = "--verify-interval", paramLabel = "INTERVAL", description = "verify the group on a " +
            "schedule, e.g. 7d, 12h (see 'blockmover verify'); a scheduled verify reports differences in 'group " +
            "status' and the log, and never repairs. Default: off")
        String verifyInterval;

        @Option(names = "--seeded", description = "the partner's volumes already hold a similar copy (restored " +
            "from a backup, an earlier copy, a detached replica): the initial sync compares every region's " +
            "checksums on both hosts and sends only the regions that differ, instead of every region")
        boolean seeded;

        @Option(names = "--rpo-target", paramLabel = "DURATION", description = "recovery point objective, e.g. " +
            "30s or 5m: 'blockmover events' reports 'rpo=exceeded' when the partner lags more than this, and " +
            "'rpo=ok' once it is back under half of it (default: none; change with 'group set')")
        String rpoTarget;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final Map<String, Object> args = new LinkedHashMap<>();
            if (rpoTarget != null)
            {
                args.put("rpo_target_ms", rpoTargetMs(rpoTarget));
            }
            args.put("name", name);
            args.put("peer", peer);
            args.put("mode", mode);
            args.put("on_disconnect", onDisconnect);
            final List<Map<String, Object>> vols = new ArrayList<>();
            for (final String v : volumes)
            {
                final int eq = v.indexOf('=');
                if (eq <= 0 || eq == v.length() - 1)
                {
                    throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--volume " + v + " is not SOURCE=TARGET " +
                        "(e.g. --volume /dev/vdb=/dev/vdb)");
                }
                vols.add(Map.of("source", v.substring(0, eq), "target", v.substring(eq + 1)));
            }
            args.put("volumes", vols);
            if (logSize != null)
            {
                args.put("log_size", sizeArg("--log-size", logSize));
            }
            if (seeded)
            {
                args.put("seeded", true);
            }
            if (verifyInterval != null)
            {
                try
                {
                    args.put("verify_interval_ms", io.blockmover.replication.verify.VerifyInterval.parseMs(
                        verifyInterval));
                }
                catch (final IllegalArgumentException ex)
                {
                    throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--verify-interval: " + ex.getMessage());
                }
            }
            final Map<String, Object> status;
            final AtomicBoolean answered = new AtomicBoolean();
            final AtomicBoolean interrupted = new AtomicBoolean();
            cancelOnInterrupt(answered, interrupted);
            try (GroupProgress progress = GroupProgress.create(socket(), name, System.err, json))
            {
                try
                {
                    status = (Map<String, Object>)call("group-create", args);
                    answered.set(true);
                }
                finally
                {
                    while (interrupted.get())
                    {
                        // The interrupt's handler says what became of the create and ends the process: this
                        // thread must not exit first with the create's own answer (the CANCELLED it caused).
                        java.util.concurrent.locks.LockSupport.park();
                    }
                }
                progress.succeeded();
            }
            if (json)
            {
                printJson(status);
            }
            else
            {
                System.out.println("group " + name + " created: " + status.get("mode") + " to " + peer + ", " +
                    status.get("state"));
                for (final Map<String, Object> v : (List<Map<String, Object>>)status.get("volumes"))
                {
                    System.out.println("  " + v.get("source") + " -> " + peer + ":" + v.get("target") + "  " +
                        v.get("nbd_uri"));
                }
            }
            return 0;
        }

        /**
         * Ctrl-C or SIGTERM while the create is under way cancels it in the daemon (only if it is still under way:
         * the answer and the interrupt may cross), says what became of it, and exits 130. It used to leave the
         * create running, a log of gigabytes being written on both hosts for a group the admin had given up on.
         */
        private void cancelOnInterrupt(final AtomicBoolean answered, final AtomicBoolean interrupted)
        {
            final sun.misc.SignalHandler handler = (signal) ->
            {
                interrupted.set(true);
                String said;
                if (answered.get())
                {
                    said = "interrupted after group " + name + " was created; it is kept";
                }
                else
                {
                    try (ControlClient client = ControlClient.connect(socket(), CANCEL_TIMEOUT_MS))
                    {
                        final Object result = client.call("group-delete", Map.of("name", name, "only_if_creating",
                            true));
                        said = result instanceof Map<?, ?> r && Boolean.TRUE.equals(r.get("deleted")) ?
                            "interrupted: the create of group " + name + " is cancelled, nothing of it is kept" :
                            result instanceof Map<?, ?> r && Boolean.TRUE.equals(r.get("exists")) ?
                            "interrupted after group " + name + " was created; it is kept ('blockmover group " +
                            "delete " + name + "' removes it)" :
                            "interrupted: the create of group " + name + " had already ended";
                    }
                    catch (final RuntimeException ex)
                    {
                        said = "interrupted, but the create of group " + name + " could not be cancelled (" +
                            ex.getMessage() + "): 'blockmover group delete " + name + "' cancels it";
                    }
                }
                System.err.println();
                System.err.println("blockmover: " + said);
                System.err.flush();
                Runtime.getRuntime().halt(INTERRUPTED_EXIT);
            };
            sun.misc.Signal.handle(new sun.misc.Signal("INT"), handler);
            sun.misc.Signal.handle(new sun.misc.Signal("TERM"), handler);
        }
    }

    /** Exit status of a command ended by Ctrl-C, as a shell reports one killed by SIGINT. */
    static final int INTERRUPTED_EXIT = 130;
    private static final long CANCEL_TIMEOUT_MS = 10_000;

    /**
     * blockmover group status.
     */
    @Command(name = "status", mixinStandardHelpOptions = true,
        description = {
            "Show one group, or every group of this host.",
            "",
            "Role, state (connecting, initial-sync, resync, catching-up, replicating, degraded, suspended; on a",
            "destination waiting or receiving), bytes not yet on the partner (RPO in bytes and seconds),",
            "transport, LSNs, log use, latencies and NBD URIs."})
    static final class Status extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", arity = "0..1", paramLabel = "NAME", description = "the group (default: all)")
        String name;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final List<Map<String, Object>> groups = name == null ?
                (List<Map<String, Object>>)call("groups", Map.of()) :
                List.of((Map<String, Object>)call("group-status", Map.of("name", name)));
            if (json)
            {
                printJson(name == null ? groups : groups.get(0));
                return 0;
            }
            if (groups.isEmpty())
            {
                System.out.println("no groups");
                return 0;
            }
            for (final Map<String, Object> g : groups)
            {
                print(g);
            }
            return 0;
        }

        @SuppressWarnings("unchecked")
        private static void print(final Map<String, Object> g)
        {
            System.out.printf(Locale.ROOT, "%s: %s %s, %s with %s, transport %s%n", g.get("name"), g.get("mode"),
                g.get("role"), g.get("state"), g.get("peer"), g.get("transport") == null ? "none" :
                g.get("transport"));
            if (Boolean.TRUE.equals(g.get("switching")))
            {
                System.out.println("  switching roles with " + g.get("peer") + ": writes refused until it holds " +
                    "and has applied everything (what it lacks: 'not yet on partner' below)");
            }
            if (g.get("rpo_target_s") != null)
            {
                System.out.printf(Locale.ROOT, "  RPO target %s: %s%n", RpoTarget.format(Math.round(
                    ((Number)g.get("rpo_target_s")).doubleValue() * 1000)),
                    Boolean.TRUE.equals(g.get("rpo_target_exceeded")) ? "EXCEEDED" : "met");
            }
            if (g.get("creating") != null)
            {
                System.out.println("  being created: " + g.get("creating"));
            }
            if (g.get("error") != null)
            {
                System.out.println("  error: " + g.get("error"));
            }
            if (g.get("last_error") != null)
            {
                System.out.println("  last error: " + g.get("last_error"));
            }
            if (Boolean.TRUE.equals(g.get("partner_apply_failing")))
            {
                System.out.println("  partner: cannot apply to its volumes (full or failing disk?): see 'blockmover " +
                    "group status " + g.get("name") + "' on " + g.get("peer"));
            }
            if (logResizeLine(g) != null)
            {
                System.out.println("  " + logResizeLine(g));
            }
            if (partnerLogLine(g) != null)
            {
                System.out.println("  " + partnerLogLine(g));
            }
            if (g.get("rpo_bytes") != null)
            {
                System.out.printf(Locale.ROOT, "  not yet on partner: %s (%.1f s)   log %s of %s   writes %s%n",
                    Format.bytes(((Number)g.get("rpo_bytes")).longValue()),
                    ((Number)g.get("rpo_seconds")).doubleValue(),
                    Format.bytes(((Number)((Map<String, Object>)g.get("log")).get("used")).longValue()),
                    Format.bytes(((Number)((Map<String, Object>)g.get("log")).get("size")).longValue()),
                    g.get("writes"));
                if (g.get("activity_regions") instanceof Number hot)
                {
                    System.out.println("  activity log: " + hot + " regions (what a crash of this host resends)");
                }
                if (zerosLine(g) != null)
                {
                    System.out.println("  " + zerosLine(g));
                }
                final Map<String, Object> lat = (Map<String, Object>)g.get("latency");
                for (final Map.Entry<String, Object> e : lat.entrySet())
                {
                    final Map<String, Object> h = (Map<String, Object>)e.getValue();
                    if (((Number)h.get("count")).longValue() > 0)
                    {
                        System.out.printf(Locale.ROOT, "  %-13s p50 %8.1f us  p99 %8.1f us  (%s)%n", e.getKey(),
                            ((Number)h.get("p50_us")).doubleValue(), ((Number)h.get("p99_us")).doubleValue(),
                            h.get("count"));
                    }
                }
            }
            else if (g.get("lsn") instanceof Map<?, ?> lsn)
            {
                System.out.printf(Locale.ROOT, "  held LSN %s, applied %s, records applied %s%s%n", lsn.get("held"),
                    lsn.get("applied"), g.get("records_applied"), g.get("bytes_deallocated") instanceof Number d &&
                    d.longValue() > 0 ? " (" + Format.bytes(d.longValue()) + " of zeros left as holes)" : "");
                if (g.get("log_force") != null)
                {
                    System.out.println("  log forced " + ("every_batch".equals(g.get("log_force")) ?
                        "after every batch (the source's clients flush)" :
                        "when a FLUSH asks, every flush.interval, or every quarter of the log"));
                }
                if (g.get("source_report") instanceof Map<?, ?> report)
                {
                    System.out.println("  " + behindLine(String.valueOf(g.get("peer")), report));
                }
                if (g.get("failover_pending") instanceof Map<?, ?> failover)
                {
                    System.out.printf(Locale.ROOT, "  failover requested %.1f s ago: applying the log first " +
                        "(LSN %s of %s), then this host becomes the source%n",
                        ((Number)failover.get("waiting_s")).doubleValue(), failover.get("applied_lsn"),
                        failover.get("held_lsn"));
                }
            }
            printDiskFailures(g);
            if (g.get("verify") instanceof Map<?, ?> verify)
            {
                System.out.println("  " + VerifyCommand.statusLine((Map<String, Object>)verify));
            }
            TestFailoverCommand.printStatus(g);
            for (final Map<String, Object> v : (List<Map<String, Object>>)g.getOrDefault("volumes", List.of()))
            {
                if (v.get("nbd_uri") != null)
                {
                    System.out.printf(Locale.ROOT, "  %s -> %s  dirty %s  %s%n", v.get("source"), v.get("target"),
                        Format.bytes(((Number)v.getOrDefault("dirty_bytes", 0)).longValue()), v.get("nbd_uri"));
                }
                else if ("source".equals(g.get("role")))
                {
                    // Not exported yet: a group being created.
                    System.out.printf(Locale.ROOT, "  %s -> %s:%s (%s)%n", v.get("source"), g.get("peer"),
                        v.get("target"), Format.bytes(((Number)v.get("size")).longValue()));
                }
                else
                {
                    System.out.printf(Locale.ROOT, "  %s (%s)%n", v.get("target"),
                        Format.bytes(((Number)v.get("size")).longValue()));
                }
            }
        }
    }

    /**
     * @return how far behind its source a destination is, as the source last said ({@code source_report}).
     */
    static String behindLine(final String peer, final Map<?, ?> report)
    {
        final long records = ((Number)report.get("records_behind")).longValue();
        final long rpoBytes = ((Number)report.get("rpo_bytes")).longValue();
        final long dirty = ((Number)report.get("dirty_regions")).longValue();
        final String asOf = "as " + peer + " said " +
            Format.ago(((Number)report.get("seconds_ago")).doubleValue()) + " ago";
        if (records == 0 && rpoBytes == 0 && dirty == 0)
        {
            return "behind " + peer + ": nothing, " + asOf;
        }
        return String.format(Locale.ROOT, "behind %s: %d records, %s not yet durable here (%.1f s of writes)%s, %s",
            peer, records, Format.bytes(rpoBytes), ((Number)report.get("rpo_seconds")).doubleValue(),
            dirty > 0 ? ", " + dirty + " regions to resync" : "", asOf);
    }

    /**
     * Disk errors so far, when there were any: each was retried or repaired, but an operator wants to know.
     */
    private static void printDiskFailures(final Map<String, Object> g)
    {
        final StringBuilder line = new StringBuilder();
        for (final String[] counter : new String[][] {
            {"apply_failures", "failed applies (retried)"},
            {"writes_failed_locally", "writes failed on the local volume (regions resent)"},
            {"log_append_failures", "writes the log's disk refused (tracked by the bitmap, regions resent)"},
            {"resync_read_failures", "resync reads or log writes failed (retried)"},
            {"records_mended", "records damaged in this host's log (mended from the volume, regions resent)"},
            {"records_dropped", "records dropped from this host's log after one was damaged there (sent again)"}})
        {
            if (g.get(counter[0]) instanceof Number n && n.longValue() > 0)
            {
                line.append(line.length() == 0 ? "  disk errors: " : ", ").append(n).append(' ').append(counter[1]);
            }
        }
        if (line.length() > 0)
        {
            System.out.println(line);
        }
        final long damaged = g.get("checksum_failures") instanceof Number n ? n.longValue() : 0;
        final long unreadable = g.get("frame_errors") instanceof Number n ? n.longValue() : 0;
        if (damaged + unreadable > 0)
        {
            System.out.println("  link errors: " + damaged + " records damaged, " + unreadable + " frames unreadable " +
                "(each ended its session and was sent again; many point at a faulty NIC, cable or memory)");
        }
    }

    /** A size option (--log-size), e.g. 8g. */
    static long sizeArg(final String option, final String text)
    {
        try
        {
            return Context.parseSize(text);
        }
        catch (final IllegalArgumentException ex)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, option + " " + text + ": " + ex.getMessage());
        }
    }

    /**
     * @return the line of a source's status for its zeros: logged and sent as their length (WRITE_ZEROES, empty
     *     regions of a sync) and given back by TRIMs on both sides; null while there are none.
     */
    static String zerosLine(final Map<String, Object> g)
    {
        final long zeros = g.get("zero_bytes") instanceof Number n ? n.longValue() : 0;
        final long trimmed = g.get("trimmed_bytes") instanceof Number n ? n.longValue() : 0;
        if (zeros == 0 && trimmed == 0)
        {
            return null;
        }
        return "zeros: " + Format.bytes(zeros) + " sent as their length, " + Format.bytes(trimmed) +
            " trimmed (given back on both sides)";
    }

    /**
     * @return the line of group status for a resize of the log under way or failed, or null.
     */
    static String logResizeLine(final Map<String, Object> g)
    {
        if (g.get("log_resize") instanceof Map<?, ?> resize)
        {
            final long size = ((Number)resize.get("size")).longValue();
            final long written = ((Number)resize.get("written")).longValue();
            return "log resize to " + Format.bytes(size) + ": " + (written < size ? "writing the new log, " +
                Format.bytes(written) + " so far" : Boolean.TRUE.equals(resize.get("copying")) ?
                ("destination".equals(g.get("role")) ? "applying what it holds and moving to it (the session " +
                "waits)" : "copying the records the partner lacks to it (the session waits)") :
                resize.get("waiting") != null ? "waiting: " +
                resize.get("waiting") : "written, putting it in place");
        }
        return g.get("log_resize_error") != null ? "log resize failed: " + g.get("log_resize_error") : null;
    }

    /**
     * @return the line of a source's group status for a partner whose log has another size (following this one's,
     *     or unable to), or null.
     */
    static String partnerLogLine(final Map<String, Object> g)
    {
        if (!(g.get("partner_log_size") instanceof Number partner) || !(g.get("log") instanceof Map<?, ?> log) ||
            !(log.get("size") instanceof Number size) || partner.longValue() == size.longValue())
        {
            return null;
        }
        return "partner's log: " + Format.bytes(partner.longValue()) + (g.get("partner_log_resize_error") != null ?
            ", and it cannot follow this one's " + Format.bytes(size.longValue()) + ": " +
            g.get("partner_log_resize_error") : ", following this one's " + Format.bytes(size.longValue()));
    }

    static long rpoTargetMs(final String text)
    {
        final long ms = RpoTarget.parse(text);
        if (ms < 0)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--rpo-target " + text + " is not a duration: " +
                "give e.g. 30s, 500ms, 5m or 0 for none");
        }
        return ms;
    }

    /**
     * blockmover group set.
     */
    @Command(name = "set", mixinStandardHelpOptions = true, sortOptions = false,
        description = {
            "Change a setting of a running source group, without interrupting replication.",
            "",
            "Its RPO target, its mode, what it does while the partner is away, and the size of its log. Run it",
            "on the source host; the change is saved in the group's group.json, and the partner keeps the first",
            "three too (for a switch).",
            "",
            "--mode async: writes stop waiting for the partner at once (for a link that got slow or far, or",
            "a bulk load); --mode sync: once the partner has caught up with what it lacks (status says",
            "replicating), every write waits for it again, RPO zero. The session with the partner starts over",
            "so that it takes the change (it reconnects at once; nothing is resent that it holds).",
            "",
            "--on-disconnect block: a sync group's writes wait while the partner is away (RPO zero kept, at the",
            "price of availability); continue: they go on, tracked, and those waiting now go on at once.",
            "",
            "--log-size: this host's record log takes another size, with nothing resent (Storage Replica's",
            "Set-SRGroup -LogSizeInBytes). The new log is written whole beside the old one while replication",
            "goes on (group status shows how far: log_resize); then the records the partner lacks move to it,",
            "copied while writes go on (they wait only for the last few records, milliseconds), and it takes the",
            "old one's place. A smaller log waits until those records fit in half of it. The partner's log",
            "follows (it hears the size when the session starts again): written beside its own, then moved to",
            "once it has applied what it holds, the session ended for that moment; so after a switch the new",
            "source has the log that was set. Set it where the group is the source."})
    static final class Set extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "the group")
        String name;

        @Option(names = "--rpo-target", paramLabel = "DURATION", description = "new recovery point objective, " +
            "e.g. 60s; 0 removes it")
        String rpoTarget;

        @Option(names = "--mode", paramLabel = "sync|async", description = "new replication mode")
        String mode;

        @Option(names = "--on-disconnect", paramLabel = "continue|block", description = "what a sync group's " +
            "writes do while the partner is away: go on, tracked, or wait for it")
        String onDisconnect;

        @Option(names = "--log-size", paramLabel = "SIZE", description = "new size of the source's record log, " +
            "e.g. 8g (a power of two up to 1 GiB, or a multiple of 1 GiB), the partner's following; the command " +
            "returns once the new log is being written")
        String logSize;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            if (rpoTarget == null && mode == null && onDisconnect == null && logSize == null)
            {
                System.err.println("blockmover group set: nothing to set: give --rpo-target, --mode, " +
                    "--on-disconnect or --log-size");
                return 2;
            }
            final Map<String, Object> args = new java.util.LinkedHashMap<>();
            args.put("name", name);
            if (rpoTarget != null)
            {
                args.put("rpo_target_ms", rpoTargetMs(rpoTarget));
            }
            if (mode != null)
            {
                args.put("mode", mode);
            }
            if (onDisconnect != null)
            {
                args.put("on_disconnect", onDisconnect);
            }
            if (logSize != null)
            {
                args.put("log_size", sizeArg("--log-size", logSize));
            }
            final Map<String, Object> status = (Map<String, Object>)call("group-set", args);
            if (json)
            {
                printJson(status);
            }
            else
            {
                System.out.println("group " + name + ": " + status.get("mode") + ", on-disconnect " +
                    status.get("on_disconnect") + ", RPO target " + (status.get("rpo_target_s") == null ? "none" :
                    RpoTarget.format(Math.round(((Number)status.get("rpo_target_s")).doubleValue() * 1000))) +
                    ", log " + Format.bytes(((Number)((Map<String, Object>)status.get("log")).get("size"))
                    .longValue()));
                if (logResizeLine(status) != null)
                {
                    System.out.println(logResizeLine(status));
                }
            }
            return 0;
        }
    }

    /**
     * blockmover group suspend.
     */
    @Command(name = "suspend", mixinStandardHelpOptions = true,
        description = {"Stop replicating a group (source side); writes go on and are tracked.", "",
            "Tracked in the log, then in the bitmaps; 'resume' sends what changed."})
    static final class Suspend extends NamedAction
    {
        Suspend()
        {
            super("group-suspend", "suspended");
        }
    }

    /**
     * blockmover group resume.
     */
    @Command(name = "resume", mixinStandardHelpOptions = true,
        description = {"Resume replicating a suspended group: reconnect and send what changed meanwhile.",
            "",
            "A group that could not open when the daemon started (state 'failed': its volume gone, its disk",
            "detached) is opened again, once what its error names is put right. On a destination that is what",
            "a failover needs while its source is down: otherwise it opens when its source next connects."})
    static final class Resume extends NamedAction
    {
        Resume()
        {
            super("group-resume", "resumed");
        }
    }

    /**
     * blockmover group switch.
     */
    @Command(name = "switch", mixinStandardHelpOptions = true,
        description = {
            "Reverse a group's roles, planned (switch-over) or not (failover, --force).",
            "",
            "On the source (planned switch-over): refuse new writes through its NBD exports, wait until the",
            "partner holds every write durably and has applied it, then the partner becomes the source (its",
            "volumes are exported there) and this host its destination. Refused during the initial sync or while",
            "the partner is unreachable. Stop the applications first: their writes fail during the switch.",
            "What the partner lacks ('not yet on partner' in group status) is sent first, for as long as that",
            "takes, with a progress line after the first second; the switch gives up, and writes are accepted",
            "again, only when nothing moves for 30 s (six connect.timeout). Over a slow link, let a large",
            "backlog drain before stopping the applications.",
            "",
            "On the destination without --force, while it receives from the source: asks the source for the",
            "same planned switch over the peer link, and returns once this host is the source.",
            "",
            "On the destination with --force (failover, the source is lost): this host becomes the source at",
            "the last write it received; writes the lost source acknowledged but never sent are gone. How many,",
            "it says as the source last reported them (about once a second while linked; 'behind' in group",
            "status here). It first applies what its log holds (a progress line after the first second), for",
            "as long as that moves. The old source must rejoin as the destination ('blockmover group delete NAME'",
            "there), and then receives everything. Refused while this host's volumes are inconsistent (its",
            "initial sync or a resync did not finish: 'consistent: false' in group status, kept across restarts)",
            "unless --allow-inconsistent."})
    static final class Switch extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "the group")
        String name;

        @Option(names = "--force", description = "on the destination: take over as source without the old " +
            "source (failover)")
        boolean force;

        @Option(names = "--allow-inconsistent", description = "with --force: take over even though the initial " +
            "sync or a resync did not finish; the volumes may mix old and new blocks")
        boolean allowInconsistent;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final Map<String, Object> status;
            try (GroupProgress progress = force ? GroupProgress.failover(socket(), name, System.err, json) :
                GroupProgress.switchOver(socket(), name, System.err, json))
            {
                status = (Map<String, Object>)call("group-switch",
                    Map.of("name", name, "force", force, "allow_inconsistent", allowInconsistent));
                progress.succeeded();
            }
            if (json)
            {
                printJson(status);
            }
            else
            {
                System.out.println("group " + name + " is now " + status.get("role") + " here (" +
                    status.get("state") + "), partner " + status.get("peer"));
                if (status.get("failover") instanceof Map<?, ?> failover)
                {
                    System.out.println(failover.get("lost"));
                }
            }
            return 0;
        }
    }

    /**
     * blockmover group freeze.
     */
    @Command(name = "freeze", mixinStandardHelpOptions = true,
        description = {
            "Refuse writes through a source group's NBD exports, and keep replicating.",
            "",
            "Clients get ESHUTDOWN while this host stays the source and keeps replicating what it already has.",
            "The Pacemaker agent's demote does this: no writes until the partner is promoted (a planned switch",
            "from this frozen source) or this host is promoted again, even when the partner is gone. Kept across",
            "restarts of blockmoverd; 'thaw' undoes it, a switch or failover clears it."})
    static final class Freeze extends NamedAction
    {
        Freeze()
        {
            super("group-freeze", "frozen");
        }
    }

    /**
     * blockmover group thaw.
     */
    @Command(name = "thaw", mixinStandardHelpOptions = true,
        description = "Accept writes through a frozen source group's NBD exports again.")
    static final class Thaw extends NamedAction
    {
        Thaw()
        {
            super("group-thaw", "thawed");
        }
    }

    /**
     * blockmover group delete.
     */
    @Command(name = "delete", mixinStandardHelpOptions = true,
        description = {
            "Delete a group on this host; the data on its volumes stays.",
            "",
            "Stops replicating, removes its NBD exports, log and bitmaps, and releases its volumes. Run it on",
            "both hosts (the destination keeps its side until deleted there). Deleted on the destination first,",
            "the group stays deleted there: its source shows 'degraded' with the reason until it is deleted too,",
            "and a group created again on the source afterwards replicates anew.",
            "",
            "A group still being created (its logs being written, its partner not yet accepting it) is cancelled:",
            "its 'group create' answers CANCELLED, and its partner lets the log it began go once unasked for",
            "group.log.unclaimed.keep."})
    static final class Delete extends NamedAction
    {
        Delete()
        {
            super("group-delete", "deleted");
        }
    }

    /**
     * A subcommand that names a group and asks the daemon for one operation on it, with nothing else to say than
     * that it is done.
     */
    abstract static class NamedAction extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "the group")
        String name;

        private final String op;
        private final String done;

        /**
         * @param op   the control operation.
         * @param done what the group is once it returns, for the line printed without --json.
         */
        NamedAction(final String op, final String done)
        {
            this.op = op;
            this.done = done;
        }

        @Override
        public Integer call()
        {
            final Object result = call(op, Map.of("name", name));
            if (json)
            {
                printJson(result);
            }
            else
            {
                System.out.println("group " + name + " " + done);
            }
            return 0;
        }
    }
}
