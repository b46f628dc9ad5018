package io.blockmover.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import io.blockmover.cli.ControlClient;
import io.blockmover.cnc.CncFile;

/**
 * Two real blockmoverd processes started by {@code scripts/testbed} (network namespaces joined by a veth pair
 * when root, loopback otherwise), driven through the real {@code scripts/blockmover} command and the real control
 * socket. Every test class gets its own directory, so namespaces never collide.
 */
final class Testbed implements AutoCloseable
{
    final Path dir;
    private final Map<String, Map<String, String>> sites = new HashMap<>();

    private Testbed(final Path dir)
    {
        this.dir = dir;
    }

    /**
     * @param name  short name of the testbed (a directory under the build's temp dir).
     * @param extra options for {@code testbed up}, e.g. "--set", "flush.bytes=8m".
     * @return the running testbed.
     */
    static Testbed up(final String name, final String... extra)
    {
        // Under the build directory, so two checkouts testing at once never share a testbed (or its namespaces).
        final Path dir = Path.of(System.getProperty("blockmover.it.dir", System.getProperty("java.io.tmpdir")),
            "bm-it-" + name);
        Run.of(60, List.of(script("testbed"), "down", "--dir", dir.toString()));
        final List<String> command = new ArrayList<>(List.of(script("testbed"), "up", "--dir", dir.toString()));
        command.addAll(List.of(extra));
        final Run run = Run.of(120, command).expect(0);
        final Testbed testbed = new Testbed(dir);
        for (final String line : run.stdout().split("\n"))
        {
            final String[] words = line.trim().split("\\s+");
            if (words.length < 2 || !words[0].startsWith("site-"))
            {
                continue;
            }
            final Map<String, String> fields = new HashMap<>();
            for (int i = 1; i < words.length; i++)
            {
                final int eq = words[i].indexOf('=');
                fields.put(words[i].substring(0, eq), words[i].substring(eq + 1));
            }
            testbed.sites.put(words[0], fields);
        }
        if (!testbed.sites.containsKey("site-a") || !testbed.sites.containsKey("site-b"))
        {
            throw new AssertionError("testbed up printed no sites: " + run.stdout());
        }
        return testbed;
    }

    static String script(final String name)
    {
        return Run.ROOT.resolve("scripts").resolve(name).toString();
    }

    String socket(final String site)
    {
        return sites.get(site).get("socket");
    }

    Path counters(final String site)
    {
        return Path.of(sites.get(site).get("counters"));
    }

    /**
     * @return the site's NBD server socket (the source volumes of its groups are exported there).
     */
    Path nbdSocket(final String site)
    {
        return Path.of(sites.get(site).get("nbd"));
    }

    String address(final String site)
    {
        return sites.get(site).get("address");
    }

    boolean isNamespaces()
    {
        return sites.get("site-a").containsKey("netns");
    }

    /**
     * Runs the blockmover command against a site's daemon.
     */
    Run cli(final String site, final String... args)
    {
        final List<String> command = new ArrayList<>(List.of(script("blockmover"), "--help".equals(args[0]) ?
            "--help" : args[0]));
        // 'group' has subcommands: the common options belong to the subcommand (group create --socket ...), and to
        // the subcommand's own (group test-failover mount --socket ...).
        int first = ("group".equals(args[0]) || "peer".equals(args[0])) && args.length > 1 ? 2 : 1;
        if (first == 2)
        {
            command.add(args[1]);
            if ("test-failover".equals(args[1]) && args.length > 2)
            {
                command.add(args[first++]);
            }
        }
        if (!"--help".equals(args[0]))
        {
            command.add("--socket");
            command.add(socket(site));
        }
        for (int i = first; i < args.length; i++)
        {
            command.add(args[i]);
        }
        return Run.of(600, command);
    }

    /**
     * Calls the control API in-process over the real socket (cheaper than a JVM per poll).
     */
    @SuppressWarnings("unchecked")
    Map<String, Object> job(final String site, final long id)
    {
        try (ControlClient client = ControlClient.connect(Path.of(socket(site))))
        {
            return (Map<String, Object>)client.call("job", Map.of("id", id));
        }
    }

    /**
     * @return 'group status NAME --json' of a site, through the control API in-process.
     */
    @SuppressWarnings("unchecked")
    Map<String, Object> group(final String site, final String name)
    {
        try (ControlClient client = ControlClient.connect(Path.of(socket(site))))
        {
            return (Map<String, Object>)client.call("group-status", Map.of("name", name));
        }
    }

    /**
     * @return every group of a site ('group status --json' without a name).
     */
    @SuppressWarnings("unchecked")
    List<Map<String, Object>> groups(final String site)
    {
        try (ControlClient client = ControlClient.connect(Path.of(socket(site))))
        {
            return (List<Map<String, Object>>)client.call("groups", Map.of());
        }
    }

    /**
     * Calls any control operation in-process, e.g. "group-delete" with the group's name.
     */
    Object call(final String site, final String op, final Map<String, Object> args)
    {
        try (ControlClient client = ControlClient.connect(Path.of(socket(site))))
        {
            return client.call(op, args);
        }
    }

    void kill(final String site)
    {
        Run.of(60, List.of(script("testbed"), "kill", site, "--dir", dir.toString())).expect(0);
    }

    /**
     * Sends a signal to the site's daemon: STOP freezes it as a host that stopped answering would be, CONT thaws it.
     */
    void signal(final String site, final String signal)
    {
        try
        {
            final String pid = Files.readString(dir.resolve(site).resolve("pid")).trim();
            Run.of(10, List.of("kill", "-" + signal, pid)).expect(0);
        }
        catch (final IOException ex)
        {
            throw new java.io.UncheckedIOException(ex);
        }
    }

    void stop(final String site)
    {
        Run.of(60, List.of(script("testbed"), "stop", site, "--dir", dir.toString())).expect(0);
    }

    void start(final String site)
    {
        Run.of(120, List.of(script("testbed"), "start", site, "--dir", dir.toString())).expect(0);
    }

    void link(final String upOrDown)
    {
        Run.of(60, List.of(script("testbed"), "link", upOrDown, "--dir", dir.toString())).expect(0);
    }

    /**
     * @return the value of a counter, read from the site's counters file as {@code blockmover stat} does.
     */
    long counter(final String site, final String label)
    {
        try (CncFile cnc = CncFile.openReadOnly(counters(site)))
        {
            final long[] value = {-1};
            cnc.reader().forEach((v, id, l) ->
            {
                if (l.equals(label))
                {
                    value[0] = v;
                }
            });
            if (value[0] < 0)
            {
                throw new AssertionError("no counter '" + label + "' at " + site);
            }
            return value[0];
        }
    }

    String log(final String site)
    {
        try
        {
            return Files.readString(dir.resolve(site).resolve("daemon.log"));
        }
        catch (final IOException ex)
        {
            return "(no log: " + ex + ")";
        }
    }

    /**
     * The last lines of a site's daemon log, for a failure message.
     */
    String logTail(final String site, final int lines)
    {
        final String[] all = log(site).split("\n");
        return String.join("\n", Arrays.copyOfRange(all, Math.max(0, all.length - lines), all.length));
    }

    /**
     * Waits for a condition with a deadline, polling; never a bare sleep.
     */
    static void await(final String what, final long timeoutSeconds, final BooleanSupplier condition)
    {
        await(what, timeoutSeconds, condition, () -> "");
    }

    /**
     * Waits for a condition with a deadline, polling; on a timeout the failure carries {@code diagnosis}, taken
     * then (the state that would explain the stall is gone by the time anyone reads the report).
     */
    static void await(
        final String what, final long timeoutSeconds, final BooleanSupplier condition, final Supplier<String> diagnosis)
    {
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (!condition.getAsBoolean())
        {
            if (System.nanoTime() > deadline)
            {
                throw new AssertionError("timed out after " + timeoutSeconds + " s waiting for " + what +
                    diagnosis.get());
            }
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(50));
        }
    }

    @Override
    public void close()
    {
        // Whatever the test asserted: a daemon that logged a bug carried on, and the test may not have noticed.
        final Run internalErrors = Run.of(60, List.of(script("testbed"), "internal-errors", "--dir", dir.toString()));
        Run.of(120, List.of(script("testbed"), "down", "--dir", dir.toString()));
        if (internalErrors.exitCode() != 0)
        {
            throw new AssertionError("a daemon logged an internal error (a bug):\n" + internalErrors.stdout());
        }
    }
}
