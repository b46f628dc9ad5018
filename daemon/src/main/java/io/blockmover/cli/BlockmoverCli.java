package io.blockmover.cli;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.jr.ob.JSON;
import org.agrona.concurrent.status.CountersReader;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.CncFile;

/**
 * The blockmover command: drives blockmoverd over its control socket, and reads its counters file directly.
 */
@Command(
    name = "blockmover",
    mixinStandardHelpOptions = true,
    versionProvider = BlockmoverCli.Version.class,
    description = {
        "Replicate block volumes between Linux hosts with blockmoverd.",
        "",
        "Every command takes --json for scripts. The daemon is found through --socket PATH, else the",
        "BLOCKMOVER_SOCKET environment variable, else /run/blockmover/control.sock. Queries (status, group",
        "status) wait 30 s for its answer, requests that wait for a peer (group create) without limit:",
        "--timeout DURATION sets both (0: no limit). These options may come before the command as well as",
        "after it."},
    exitCodeListHeading = "%nExit status:%n",
    exitCodeList = {
        "0:success (for copy: the job completed, and verified when --verify was given)",
        "1:the job failed, was cancelled, or verify found differences",
        "2:usage error (unknown command or option)",
        "3:blockmoverd is not running, still starting (checking its groups' logs), or not reachable on its " +
            "control socket",
        "4:the request was refused: bad input (missing volume, destination too small, volume in use, " +
            "misaligned size, unknown peer or job, invalid configuration on reload); nothing was changed",
        "5:the peer refused or could not be reached (wrong key, peer down, protocol error)"})
public final class BlockmoverCli
{
    /** Columns the help texts are written for; picocli's default of 80 re-wrapped every line raggedly. */
    static final int USAGE_WIDTH = 110;
    static final Path DEFAULT_SOCKET = Path.of("/run/blockmover/control.sock");
    /**
     * The subcommands, in the order help lists them. Not in the annotation: picocli then builds the model of every
     * one by reflection on each start, half a second on a fast host and over ten seconds in an emulated one,
     * where scripts call one command at a time. {@link #commandLine} adds only the one a command line names.
     */
    private static final List<Class<?>> SUBCOMMANDS = List.of(
        Copy.class,
        Jobs.class,
        Cancel.class,
        Status.class,
        Stat.class,
        GroupCommand.class,
        EventsCommand.class,
        VerifyCommand.class,
        PeerCommand.class,
        TopologyCommand.class,
        ReloadCommand.class,
        CommandLine.HelpCommand.class);

    /**
     * Options every command shares.
     */
    static class Common
    {
        @Option(names = "--socket", paramLabel = "PATH", description = "control socket of blockmoverd " +
            "(default: $BLOCKMOVER_SOCKET or /run/blockmover/control.sock)")
        Path socket;

        @Option(names = "--json", description = "print JSON for scripts instead of text")
        boolean json;

        @Option(names = "--timeout", paramLabel = "DURATION", description = "how long to wait for each answer of " +
            "blockmoverd, e.g. 90s or 5m; 0 waits without limit. Default: 30s for queries (status, group status, " +
            "jobs), no limit for requests that wait for a peer (group create, group switch, copy). A daemon that " +
            "does not answer in time fails the command with exit status 3")
        String timeout;

        Path socket()
        {
            if (socket != null)
            {
                return socket;
            }
            final String env = System.getenv("BLOCKMOVER_SOCKET");
            return env != null && !env.isEmpty() ? Path.of(env) : DEFAULT_SOCKET;
        }

        /**
         * @return the --timeout in milliseconds, or -1 for each request's default.
         */
        long timeoutMs()
        {
            return timeout == null ? -1 : TopologyCommand.parseDurationMs("--timeout", timeout);
        }

        /**
         * @return a client of the daemon, which waits for answers as --timeout says.
         */
        ControlClient connect()
        {
            return ControlClient.connect(socket(), timeoutMs());
        }

        Object call(final String op, final Map<String, Object> args)
        {
            try (ControlClient client = connect())
            {
                return client.call(op, args);
            }
        }

        void printJson(final Object value)
        {
            try
            {
                System.out.println(JSON.std.with(JSON.Feature.PRETTY_PRINT_OUTPUT).asString(value));
            }
            catch (final IOException ex)
            {
                throw new BlockmoverException(ErrorCode.INTERNAL, "cannot print JSON: " + ex, ex);
            }
        }
    }

    private BlockmoverCli()
    {
    }

    /**
     * @param args command line.
     */
    public static void main(final String[] args)
    {
        System.exit(run(args));
    }

    /**
     * Runs a command and returns its exit status; errors go to stderr (or stdout as JSON with --json).
     *
     * @param args command line.
     * @return exit status.
     */
    public static int run(final String... args)
    {
        if (System.getProperty("picocli.usage.width") == null)
        {
            System.setProperty("picocli.usage.width", Integer.toString(USAGE_WIDTH));
        }
        final int command = commandIndex(args);
        if (command > 0 && command == args.length)
        {
            // Only common options, no command after them: picocli would call them unknown options of the root and
            // print a page of help.
            System.err.println("blockmover: missing command after " + String.join(" ", args) +
                ": for example 'blockmover --socket PATH status'; 'blockmover --help' lists the commands");
            return CommandLine.ExitCode.USAGE;
        }
        final String[] normalized = commonOptionsLast(args);
        final CommandLine commandLine = commandLine(normalized);
        commandLine.setExecutionExceptionHandler((ex, cmd, parseResult) ->
        {
            if (ex instanceof BlockmoverException bex)
            {
                // --json may sit on any level: 'blockmover group status x --json' is two subcommands deep.
                boolean json = false;
                for (CommandLine.ParseResult level = parseResult; level != null; level = level.subcommand())
                {
                    json |= level.hasMatchedOption("--json");
                }
                if (json)
                {
                    final Map<String, Object> error = new LinkedHashMap<>();
                    error.put("code", bex.code().name());
                    error.put("message", bex.getMessage());
                    System.out.println(JSON.std.asString(Map.of("error", error)));
                }
                System.err.println("blockmover: " + bex.getMessage());
                return bex.code().exitCode();
            }
            throw ex;
        });
        return commandLine.execute(normalized);
    }

    /**
     * Moves --socket, --timeout and --json given before the command ('blockmover --socket PATH group status NAME', as
     * git takes -C) to after it, where every command that talks to the daemon declares them ({@link Common}). Before,
     * that order was an unknown option and a page of help.
     *
     * @param args the command line as given.
     * @return the same words, the leading --socket, --timeout and --json moved to the end (before a "--").
     */
    static String[] commonOptionsLast(final String[] args)
    {
        final int command = commandIndex(args);
        if (command == 0 || command == args.length)
        {
            return args; // Nothing to move, or no command after it (run says so).
        }
        final List<String> rest = new ArrayList<>(List.of(args).subList(command, args.length));
        final int endOfOptions = rest.indexOf("--");
        rest.addAll(endOfOptions < 0 ? rest.size() : endOfOptions, List.of(args).subList(0, command));
        return rest.toArray(String[]::new);
    }

    /**
     * @param args the command line as given.
     * @return where the command starts: after the leading --socket PATH, --timeout DURATION and --json, if any
     *     (args.length when nothing follows them).
     */
    private static int commandIndex(final String[] args)
    {
        int i = 0;
        while (i < args.length)
        {
            if ("--json".equals(args[i]) || args[i].startsWith("--socket=") || args[i].startsWith("--timeout="))
            {
                i++;
            }
            else if ("--socket".equals(args[i]) || "--timeout".equals(args[i]))
            {
                i += 2; // and its value
            }
            else
            {
                break;
            }
        }
        return Math.min(i, args.length);
    }

    /**
     * The command's model for a command line: when its first word names a subcommand, only that subcommand's
     * (parsing and its errors are the same, as nothing else can match there); otherwise, as for help, an unknown
     * command or none, every subcommand's.
     *
     * @param args the command line; none for the full model (man pages).
     * @return the command line to execute.
     */
    static CommandLine commandLine(final String... args)
    {
        final CommandLine commandLine = new CommandLine(new BlockmoverCli());
        final String first = args.length > 0 ? args[0] : "";
        Class<?> named = null;
        for (final Class<?> subcommand : SUBCOMMANDS)
        {
            if (subcommand != CommandLine.HelpCommand.class &&
                subcommand.getAnnotation(Command.class).name().equals(first))
            {
                named = subcommand;
            }
        }
        for (final Class<?> subcommand : SUBCOMMANDS)
        {
            if (named == null || subcommand == named)
            {
                commandLine.addSubcommand(subcommand);
            }
        }
        return commandLine;
    }

    /**
     * blockmover copy.
     */
    @Command(name = "copy", mixinStandardHelpOptions = true, sortOptions = false,
        description = {
            "Copy a whole volume to a volume on a peer, then end.",
            "",
            "SOURCE is a block device or regular file on this host; PEER:TARGET names a configured peer and a",
            "block device or file there, at least as large as SOURCE. Each chunk carries a CRC32C checked on",
            "arrival and is acknowledged only once durable on the peer. The job survives a lost link or a",
            "restart of either daemon and resumes where it stopped. Progress (bytes, rate, ETA) is shown",
            "until the job ends; Ctrl-C leaves the job running in the daemon (see 'blockmover jobs')."})
    static final class Copy extends Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "SOURCE", description = "local volume to copy")
        String source;

        @Parameters(index = "1", paramLabel = "PEER:TARGET", description = "peer name and its volume")
        String destination;

        @Option(names = "--verify", description = "after copying, compare region checksums of both sides; " +
            "resend regions that differ")
        boolean verify;

        @Option(names = "--seeded", description = "the target already holds a similar copy: compare region " +
            "checksums first and send only regions that differ")
        boolean seeded;

        @Option(names = "--detach", description = "return once the job has started; do not follow it")
        boolean detach;

        @Option(names = "--interval", paramLabel = "MS", defaultValue = "250",
            description = "progress refresh interval in milliseconds (default: ${DEFAULT-VALUE})")
        long intervalMs;

        @Override
        public Integer call() throws InterruptedException
        {
            final int colon = destination.indexOf(':');
            if (colon <= 0 || colon == destination.length() - 1)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "destination '" + destination +
                    "' must be PEER:TARGET, e.g. dr-site:/dev/sdc");
            }
            final Map<String, Object> args = new LinkedHashMap<>();
            args.put("source", Path.of(source).toAbsolutePath().normalize().toString());
            args.put("peer", destination.substring(0, colon));
            args.put("target", destination.substring(colon + 1));
            args.put("verify", verify);
            args.put("seeded", seeded);
            try (ControlClient client = connect())
            {
                @SuppressWarnings("unchecked")
                Map<String, Object> job = (Map<String, Object>)client.call("copy", args);
                final long id = ((Number)job.get("id")).longValue();
                if (detach)
                {
                    if (json)
                    {
                        printJson(job);
                    }
                    else
                    {
                        System.out.println("job " + id + " started: " + source + " -> " + destination);
                    }
                    return 0;
                }
                final Progress progress = new Progress(System.err, json);
                while (true)
                {
                    progress.show(job);
                    if (isTerminal(job))
                    {
                        break;
                    }
                    TimeUnit.MILLISECONDS.sleep(intervalMs);
                    @SuppressWarnings("unchecked")
                    final Map<String, Object> next = (Map<String, Object>)client.call("job", Map.of("id", id));
                    job = next;
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
    }

    static boolean isTerminal(final Map<String, Object> job)
    {
        final String state = String.valueOf(job.get("state"));
        return state.equals("completed") || state.equals("failed") || state.equals("cancelled");
    }

    static int exitCode(final Map<String, Object> job)
    {
        final String state = String.valueOf(job.get("state"));
        if (!state.equals("completed"))
        {
            return 1;
        }
        return Boolean.TRUE.equals(job.get("verify")) && !Boolean.TRUE.equals(job.get("verified")) ? 1 : 0;
    }

    static String summary(final Map<String, Object> job)
    {
        final StringBuilder s = new StringBuilder();
        final long size = ((Number)job.get("size")).longValue();
        s.append("job ").append(job.get("id")).append(' ').append(job.get("state")).append(": ")
            .append(job.get("source")).append(" -> ").append(job.get("peer")).append(':').append(job.get("target"));
        final long started = ((Number)job.get("started_ms")).longValue();
        final long finished = ((Number)job.get("finished_ms")).longValue();
        if (finished > started && started > 0)
        {
            final double seconds = (finished - started) / 1000.0;
            s.append(String.format(Locale.ROOT, ", %s in %.1f s (%s)", Format.bytes(size), seconds,
                Format.rate(size / seconds)));
        }
        if (job.get("zero_bytes") instanceof Number zeros && zeros.longValue() > 0)
        {
            // Of a thin or sparse source, most of it: why such a copy outruns the link.
            s.append(", ").append(Format.bytes(zeros.longValue())).append(" of zeros sent as their length");
        }
        if (Boolean.TRUE.equals(job.get("seeded")))
        {
            s.append(", seeded: ").append(job.get("regions_different")).append(" regions differed");
        }
        if (Boolean.TRUE.equals(job.get("verify")))
        {
            s.append(Boolean.TRUE.equals(job.get("verified")) ? ", verify: both sides identical" :
                ", verify: NOT verified");
            final long mismatches = ((Number)job.get("verify_mismatches")).longValue();
            if (mismatches > 0)
            {
                s.append(" (").append(mismatches).append(" regions resent after verify)");
            }
        }
        if (job.get("error") instanceof Map<?, ?> error)
        {
            s.append("\n  error ").append(error.get("code")).append(": ").append(error.get("message"));
        }
        return s.toString();
    }

    /**
     * The copy's progress: bytes, rate, ETA; regions compared while seeding or verifying.
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
            final long size = ((Number)job.get("size")).longValue();
            final long done = ((Number)job.get("bytes_done")).longValue();
            if (!line.update(done, size, isTerminal(job)))
            {
                return;
            }
            if (job.get("phase_total") instanceof Number total && total.longValue() > 0)
            {
                // Seeding or verifying: progress is regions compared on both sides, not bytes sent.
                final long checked = ((Number)job.get("phase_done")).longValue();
                final double fraction = (double)checked / total.longValue();
                line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %s: %d of %d regions compared",
                    ProgressLine.bar(fraction), fraction * 100, job.get("phase"), checked, total.longValue()));
            }
            else
            {
                final double fraction = size == 0 ? 1 : (double)done / size;
                // While it waits to try again, the line says why (a lost link, a full disk on the peer).
                final Object why = "waiting".equals(job.get("phase")) ? job.get("last_error") : null;
                line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %s / %s  %s  ETA %s  %s%s",
                    ProgressLine.bar(fraction), fraction * 100, Format.bytes(done), Format.bytes(size),
                    line.formatRate(line.rate()), Format.duration(line.secondsLeft(size - done)), job.get("phase"),
                    why != null ? ": " + why : ""));
            }
        }

        void end()
        {
            line.end();
        }
    }

    /**
     * blockmover jobs.
     */
    @Command(name = "jobs", mixinStandardHelpOptions = true,
        description = "List copy jobs (running, waiting to resume, and finished), or show one.")
    static final class Jobs extends Common implements Callable<Integer>
    {
        @Parameters(index = "0", arity = "0..1", paramLabel = "ID", description = "show only this job")
        Long id;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final List<Map<String, Object>> jobs = id == null ? (List<Map<String, Object>>)call("jobs", Map.of()) :
                List.of((Map<String, Object>)call("job", Map.of("id", id)));
            if (json)
            {
                printJson(id == null ? jobs : jobs.get(0));
                return 0;
            }
            if (jobs.isEmpty())
            {
                System.out.println("no jobs");
                return 0;
            }
            System.out.printf(Locale.ROOT, "%-5s %-10s %-11s %7s %10s  %s%n", "ID", "STATE", "PHASE", "DONE", "SIZE",
                "SOURCE -> PEER:TARGET");
            for (final Map<String, Object> job : jobs)
            {
                final long size = ((Number)job.get("size")).longValue();
                final long done = ((Number)job.get("bytes_done")).longValue();
                System.out.printf(Locale.ROOT, "%-5s %-10s %-11s %6.1f%% %10s  %s -> %s:%s%n", job.get("id"),
                    job.get("state"), job.get("phase"), size == 0 ? 100.0 : 100.0 * done / size, Format.bytes(size),
                    job.get("source"), job.get("peer"), job.get("target"));
                if (job.get("error") instanceof Map<?, ?> error)
                {
                    System.out.println("      error " + error.get("code") + ": " + error.get("message"));
                }
                else if (job.get("last_error") != null)
                {
                    System.out.println("      last error: " + job.get("last_error"));
                }
            }
            return 0;
        }
    }

    /**
     * blockmover cancel.
     */
    @Command(name = "cancel", mixinStandardHelpOptions = true,
        description = {"Cancel a copy job.", "",
            "What was copied stays on the destination; the job cannot resume."})
    static final class Cancel extends Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "ID", description = "job to cancel")
        long id;

        @Override
        public Integer call()
        {
            final Object job = call("cancel", Map.of("id", id));
            if (json)
            {
                printJson(job);
            }
            else
            {
                System.out.println("job " + id + " cancelled");
            }
            return 0;
        }
    }

    /**
     * blockmover status.
     */
    @Command(name = "status", mixinStandardHelpOptions = true,
        description = {"Show the daemon and what it runs.", "",
            "Its node, listener, peers with their transport, jobs, inbound sessions, groups and NBD exports."})
    static final class Status extends Common implements Callable<Integer>
    {
        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final Map<String, Object> status = (Map<String, Object>)call("status", Map.of());
            if (json)
            {
                printJson(status);
                return 0;
            }
            System.out.printf(Locale.ROOT, "node %s (pid %s), up %s%n", status.get("node"), status.get("pid"),
                Format.duration(((Number)status.get("uptime_ms")).longValue() / 1000.0));
            System.out.println("  listen   " + status.get("listen"));
            System.out.println("  control  " + status.get("control_socket"));
            System.out.println("  counters " + status.get("counters_file"));
            if (status.get("config_loaded_ms") instanceof Number loaded)
            {
                System.out.println("  config   " + (status.get("config_file") == null ? "(no file)" :
                    status.get("config_file")) + ", loaded " + java.time.Instant.ofEpochMilli(loaded.longValue()));
            }
            for (final Map<String, Object> peer : (List<Map<String, Object>>)status.get("peers"))
            {
                System.out.printf(Locale.ROOT, "  peer %s at %s: transport %s (%s)%s%n", peer.get("name"),
                    peer.get("address"), peer.get("transport"), peer.get("transport_reason"),
                    PeerCommand.maxRateSuffix(peer.get("max_rate")));
            }
            System.out.println("  jobs active: " + status.get("jobs_active"));
            for (final Map<String, Object> in : (List<Map<String, Object>>)status.get("inbound"))
            {
                System.out.printf(Locale.ROOT, "  inbound from %s: job %s into %s over %s (%s)%n", in.get("peer"),
                    in.get("job"), in.get("target"), in.get("transport"), in.get("state"));
            }
            if (status.get("nbd_socket") != null)
            {
                System.out.println("  nbd      " + status.get("nbd_socket"));
            }
            for (final Map<String, Object> group : (List<Map<String, Object>>)status.getOrDefault("groups", List.of()))
            {
                System.out.printf(Locale.ROOT, "  group %s: %s, %s%n", group.get("name"), group.get("role"),
                    group.get("state"));
            }
            for (final Map<String, Object> local :
                (List<Map<String, Object>>)status.getOrDefault("local_exports", List.of()))
            {
                System.out.printf(Locale.ROOT, "  export %s: %s (not replicated) %s%n", local.get("name"),
                    local.get("path"), local.get("nbd_uri"));
            }
            return 0;
        }
    }

    /**
     * blockmover stat.
     */
    @Command(name = "stat", mixinStandardHelpOptions = true,
        description = {"Print the daemon's counters, read straight from its counters file.", "",
            "Works even when the daemon is stopped or wedged. The file is found through --counters-file, else",
            "$BLOCKMOVER_COUNTERS, else counters.dat beside the control socket."})
    static final class Stat extends Common implements Callable<Integer>
    {
        @Option(names = "--counters-file", paramLabel = "PATH", description = "counters file of blockmoverd")
        Path countersFile;

        @Option(names = "--prometheus", description = "print the Prometheus text exposition format (metrics " +
            "blockmover_..., labels node, group, role, peer, volume, stage; latencies as summaries) for " +
            "node_exporter's textfile collector")
        boolean prometheus;

        @Option(names = "--output", paramLabel = "FILE", description = "with --prometheus: write FILE atomically " +
            "(a temporary file in the same directory, then a rename), e.g. " +
            "/var/lib/prometheus/node-exporter/blockmover.prom from a timer")
        Path output;

        @Override
        public Integer call()
        {
            Path path = countersFile;
            if (path == null)
            {
                final String env = System.getenv("BLOCKMOVER_COUNTERS");
                path = env != null && !env.isEmpty() ? Path.of(env) : socket().resolveSibling("counters.dat");
            }
            if (output != null && !prometheus)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--output goes with --prometheus");
            }
            try (CncFile cnc = CncFile.openReadOnly(path))
            {
                if (prometheus)
                {
                    final String text = io.blockmover.metrics.PrometheusWriter.write(cnc, System.currentTimeMillis());
                    if (output == null)
                    {
                        System.out.print(text);
                    }
                    else
                    {
                        writeAtomically(output, text);
                    }
                    return 0;
                }
                final long heartbeatAgeMs = System.currentTimeMillis() - cnc.heartbeatMs();
                final boolean alive = ProcessHandle.of(cnc.pid()).map(ProcessHandle::isAlive).orElse(false);
                final Map<String, Object> counters = new LinkedHashMap<>();
                final CountersReader reader = cnc.reader();
                reader.forEach((value, id, label) -> counters.put(label, value));
                if (json)
                {
                    final Map<String, Object> out = new LinkedHashMap<>();
                    out.put("node", cnc.nodeName());
                    out.put("pid", cnc.pid());
                    out.put("alive", alive);
                    out.put("heartbeat_age_ms", heartbeatAgeMs);
                    out.put("counters", counters);
                    printJson(out);
                    return 0;
                }
                System.out.printf(Locale.ROOT, "node %s pid %d: %s, last heartbeat %d ms ago%n", cnc.nodeName(),
                    cnc.pid(), alive ? (heartbeatAgeMs < 3000 ? "running" : "NOT RESPONDING") : "not running",
                    heartbeatAgeMs);
                counters.forEach((label, value) -> System.out.printf(Locale.ROOT, "%20d  %s%n", value, label));
                return 0;
            }
        }
    }

    /**
     * Writes a file so that a reader (node_exporter) sees the old content or the new, never half of it.
     */
    static void writeAtomically(final Path file, final String text)
    {
        final Path dir = file.toAbsolutePath().getParent();
        try
        {
            final Path tmp = java.nio.file.Files.createTempFile(dir, "." + file.getFileName(), ".tmp");
            try
            {
                java.nio.file.Files.writeString(tmp, text);
                java.nio.file.Files.setPosixFilePermissions(tmp,
                    java.nio.file.attribute.PosixFilePermissions.fromString("rw-r--r--"));
                java.nio.file.Files.move(tmp, file, java.nio.file.StandardCopyOption.ATOMIC_MOVE,
                    java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            }
            finally
            {
                java.nio.file.Files.deleteIfExists(tmp);
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot write " + file + ": " + ex.getMessage() +
                " (does the directory exist and is it writable?)", ex);
        }
    }

    /**
     * Version from the jar manifest.
     */
    static final class Version implements CommandLine.IVersionProvider
    {
        @Override
        public String[] getVersion()
        {
            final String version = BlockmoverCli.class.getPackage().getImplementationVersion();
            return new String[] {"blockmover " + (version == null ? "development build" : version)};
        }
    }
}
