package io.blockmover.cli;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BlockmoverCliTest
{
    @TempDir
    Path dir;

    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final ByteArrayOutputStream err = new ByteArrayOutputStream();
    private PrintStream savedOut;
    private PrintStream savedErr;

    @BeforeEach
    void captureOutput()
    {
        savedOut = System.out;
        savedErr = System.err;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
    }

    @AfterEach
    void restoreOutput()
    {
        System.setOut(savedOut);
        System.setErr(savedErr);
    }

    private String stdout()
    {
        return out.toString(StandardCharsets.UTF_8);
    }

    private String stderr()
    {
        return err.toString(StandardCharsets.UTF_8);
    }

    @Test
    void shouldRefuseDestinationWithoutPeerAsBadRequest()
    {
        final int status = BlockmoverCli.run("copy", "x", "nocolon", "--socket", dir.resolve("none").toString());

        assertEquals(ErrorCode.BAD_REQUEST.exitCode(), status);
        assertEquals(4, status);
        assertTrue(stderr().contains("must be PEER:TARGET"), stderr());
    }

    @Test
    void shouldRefuseDestinationWithEmptyTarget()
    {
        assertEquals(4, BlockmoverCli.run("copy", "x", "peer:"));
        assertEquals(4, BlockmoverCli.run("copy", "x", ":/dev/sdc"));
    }

    @Test
    void shouldSayHowToStartDaemonWhenSocketIsMissing()
    {
        final int status = BlockmoverCli.run("jobs", "--socket", "/nonexistent/sock");

        assertEquals(3, status);
        assertTrue(stderr().contains("/nonexistent/sock"), stderr());
        assertTrue(stderr().contains("systemctl start blockmoverd"), stderr());
    }

    @Test
    void shouldPrintJsonErrorWithJsonOption() throws IOException
    {
        final int status = BlockmoverCli.run("jobs", "--json", "--socket", "/nonexistent/sock");

        assertEquals(3, status);
        final Map<String, Object> printed = JSON.std.mapFrom(stdout().trim());
        @SuppressWarnings("unchecked")
        final Map<String, Object> error = (Map<String, Object>)printed.get("error");
        assertEquals(ErrorCode.DAEMON_NOT_RUNNING.name(), error.get("code"));
    }

    @Test
    void shouldTakeSocketAndJsonBeforeTheCommand() throws IOException
    {
        // 'blockmover --socket PATH group status' was an unknown option (exit 2) and a page of help.
        final int status = BlockmoverCli.run("--json", "--socket", "/nonexistent/before.sock", "group", "status", "g");

        assertEquals(3, status, stderr());
        assertTrue(stderr().contains("/nonexistent/before.sock"), stderr());
        final Map<String, Object> printed = JSON.std.mapFrom(stdout().trim());
        assertTrue(printed.containsKey("error"), stdout());
    }

    @Test
    void shouldMoveOnlyLeadingCommonOptionsAfterTheCommand()
    {
        assertEquals(List.of("status", "--socket=/s", "--json"),
            List.of(BlockmoverCli.commonOptionsLast(new String[] {"--socket=/s", "--json", "status"})));
        assertEquals(List.of("copy", "a", "b:c", "--socket", "/s", "--", "-x"),
            List.of(BlockmoverCli.commonOptionsLast(new String[] {"--socket", "/s", "copy", "a", "b:c", "--", "-x"})));
        assertEquals(List.of("--socket", "/s"),
            List.of(BlockmoverCli.commonOptionsLast(new String[] {"--socket", "/s"})));
        assertEquals(List.of("status", "--json"),
            List.of(BlockmoverCli.commonOptionsLast(new String[] {"status", "--json"})));
        assertEquals(1, BlockmoverCli.commonOptionsLast(new String[] {"--socket"}).length);
    }

    @Test
    void shouldSayTheCommandIsMissingAfterCommonOptionsAlone()
    {
        for (final String[] args : List.of(new String[] {"--socket", "/s"}, new String[] {"--json"},
            new String[] {"--socket=/s", "--json"}))
        {
            assertEquals(2, BlockmoverCli.run(args), List.of(args).toString());
            assertTrue(stderr().startsWith("blockmover: missing command after " + String.join(" ", args) + ":"),
                stderr());
            assertFalse(stderr().contains("Unknown option"), stderr());
            err.reset();
        }
    }

    @Test
    void shouldReportStaleSocketAsDaemonNotRunning() throws IOException
    {
        final Path socket = dir.resolve("stale.sock");
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX))
        {
            dead.bind(UnixDomainSocketAddress.of(socket));
        }

        final int status = BlockmoverCli.run("status", "--socket", socket.toString());

        assertEquals(3, status);
        assertTrue(stderr().contains("stale socket"), stderr());
    }

    /** A source's status says when its partner's log has another size: following it, or unable to. */
    @Test
    void shouldSayWhenThePartnersLogHasAnotherSize()
    {
        final Map<String, Object> log = Map.of("size", 1L << 30);
        assertNull(GroupCommand.partnerLogLine(Map.of("log", log, "partner_log_size", 1L << 30)));
        assertNull(GroupCommand.partnerLogLine(Map.of("log", log)), "not known: an older partner");
        assertEquals("partner's log: 256.0 MiB, following this one's 1.0 GiB",
            GroupCommand.partnerLogLine(Map.of("log", log, "partner_log_size", 256L << 20)));
        assertEquals("partner's log: 256.0 MiB, and it cannot follow this one's 1.0 GiB: no room",
            GroupCommand.partnerLogLine(Map.of("log", log, "partner_log_size", 256L << 20,
                "partner_log_resize_error", "no room")));
    }

    @Test
    void shouldPrintHelpAndExitZero()
    {
        final int status = BlockmoverCli.run("--help");

        assertEquals(0, status);
        assertTrue(stdout().contains("Usage: blockmover"), stdout());
        assertTrue(stdout().contains("Exit status"), stdout());
    }

    @Test
    void shouldBuildOnlyTheNamedSubcommandButEveryOneForHelp()
    {
        // Every start used to build the model of all subcommands by reflection: over ten seconds per call in the
        // emulated RDMA test VM.
        assertEquals(java.util.Set.of("stat"), BlockmoverCli.commandLine("stat", "--json").getSubcommands().keySet());
        assertTrue(BlockmoverCli.commandLine("help", "group").getSubcommands().keySet()
            .containsAll(java.util.List.of("copy", "jobs", "group", "peer", "verify", "help")));
        assertEquals(BlockmoverCli.commandLine().getSubcommands().keySet(),
            BlockmoverCli.commandLine("frobnicate").getSubcommands().keySet());

        assertEquals(0, BlockmoverCli.run("help", "stat"));
        assertTrue(stdout().contains("Usage: blockmover stat"), stdout());
    }

    @Test
    void shouldSummariseEveryCommandInOneSentenceOnOneLine()
    {
        final int summaryMax = 80; // to fit the list of commands of --help on one line
        // The lists of commands in --help, and the NAME line of each man page, show a command's first line of
        // description. It was a fragment of a wrapped paragraph for most commands ("Print the daemon's counters,
        // read straight from its counters file: works even when the"), cut off mid-sentence.
        final java.util.ArrayDeque<picocli.CommandLine> commands =
            new java.util.ArrayDeque<>(List.of(BlockmoverCli.commandLine()));
        int checked = 0;
        while (!commands.isEmpty())
        {
            final picocli.CommandLine command = commands.pop();
            final String name = command.getCommandSpec().qualifiedName();
            final String[] description = command.getCommandSpec().usageMessage().description();
            final String summary = description[0];
            assertTrue(summary.endsWith(".") && summary.indexOf(". ") < 0 && summary.length() <= summaryMax,
                name + ": not one sentence of at most " + summaryMax + " characters: " + summary);
            assertTrue(description.length == 1 || description[1].isEmpty(),
                () -> name + ": the summary runs on into the next line: " + description[1]);
            final List<String> subcommands = command.getSubcommands().keySet().stream()
                .filter((sub) -> !"help".equals(sub)).toList();
            if (!subcommands.isEmpty())
            {
                command.setUsageHelpWidth(BlockmoverCli.USAGE_WIDTH);
                final String[] lines = command.getHelp().commandList().split("\\R");
                final long entries = java.util.Arrays.stream(lines).filter((line) -> !line.isBlank()).count();
                assertEquals(command.getSubcommands().size(), entries, name + "'s command list wraps:\n" +
                    String.join("\n", lines));
                subcommands.forEach((sub) -> commands.push(command.getSubcommands().get(sub)));
            }
            checked++;
        }
        assertEquals(26, checked); // blockmover and its 25 commands
    }

    @Test
    void shouldExitTwoOnUnknownCommand()
    {
        final int status = BlockmoverCli.run("frobnicate");

        assertEquals(2, status);
        assertTrue(stderr().contains("frobnicate"), stderr());
    }

    @Test
    void shouldExitTwoOnUnknownOption()
    {
        assertEquals(2, BlockmoverCli.run("jobs", "--frobnicate"));
    }

    @Test
    void shouldReportMissingCountersFileAsNotFound()
    {
        final Path missing = dir.resolve("missing.dat");

        final int status = BlockmoverCli.run("stat", "--counters-file", missing.toString());

        assertEquals(4, status);
        assertTrue(stderr().contains("no counters file at " + missing), stderr());
    }

    @Test
    void shouldPrintCountersFromFile() throws IOException
    {
        final Path counters = dir.resolve("counters.dat");
        try (CncFile cnc = CncFile.create(counters, "site-a", ProcessHandle.current().pid(), 32))
        {
            cnc.counter(SystemCounter.CHUNKS_SENT).set(12);

            final int text = BlockmoverCli.run("stat", "--counters-file", counters.toString());
            final String textOut = stdout();
            out.reset();
            final int json = BlockmoverCli.run("stat", "--json", "--counters-file", counters.toString());

            assertEquals(0, text);
            assertTrue(textOut.contains("node site-a"), textOut);
            assertTrue(textOut.contains("running"), textOut);
            assertTrue(textOut.matches("(?s).*\\s12  chunks sent.*"), textOut);
            assertEquals(0, json);
            final Map<String, Object> printed = JSON.std.mapFrom(stdout());
            assertEquals("site-a", printed.get("node"));
            assertEquals(Boolean.TRUE, printed.get("alive"));
            @SuppressWarnings("unchecked")
            final Map<String, Object> values = (Map<String, Object>)printed.get("counters");
            assertEquals(12, ((Number)values.get("chunks sent")).intValue());
        }
    }

    @Test
    void shouldTalkToDaemonOverControlSocket() throws Exception
    {
        final Path socket = dir.resolve("control.sock");
        final ControlServer.Handler handler = (client, id, op, args) ->
        {
            if (op.equals("jobs"))
            {
                client.reply(id, List.of(Map.of("id", 1, "state", "running", "phase", "copy", "size", 4096,
                    "bytes_done", 1024, "source", "/dev/a", "peer", "b", "target", "/dev/c")));
            }
            else
            {
                client.error(id, ErrorCode.NO_SUCH_JOB, "no job " + args.get("id"));
            }
        };
        final ServedSocket served = new ServedSocket(socket, handler, () ->
        {
        });
        try
        {
            final int list = BlockmoverCli.run("jobs", "--socket", socket.toString());
            final String listOut = stdout();
            final int missing = BlockmoverCli.run("jobs", "99", "--socket", socket.toString());

            assertEquals(0, list);
            assertTrue(listOut.contains("running"), listOut);
            assertTrue(listOut.contains("/dev/a -> b:/dev/c"), listOut);
            assertTrue(listOut.contains("25.0%"), listOut);
            assertEquals(4, missing);
            assertTrue(stderr().contains("no job 99"), stderr());
        }
        finally
        {
            served.close();
        }
        assertFalse(Files.exists(socket));
    }

    /**
     * A daemon that holds the connection and does not answer (busy with a long check of a group's log at a
     * failover, or stuck on a hung disk) kept every command waiting for ever, a monitoring check from cron
     * included. A query now gives up after its timeout (--timeout, before or after the command) with exit status 3
     * and says why; a request that changes something says its outcome is unknown; --timeout 0 waits as long as it
     * takes.
     */
    @Test
    void shouldGiveUpOnADaemonThatDoesNotAnswerInTime() throws Exception
    {
        final Path socket = dir.resolve("control.sock");
        final long answerJobsAfterNs = TimeUnit.MILLISECONDS.toNanos(1500);
        final List<Object[]> late = new ArrayList<>();
        // status and group-create: never answered; jobs: answered after 1.5 s.
        final ControlServer.Handler handler = (client, id, op, args) ->
        {
            if (op.equals("jobs"))
            {
                late.add(new Object[] {client, id, System.nanoTime() + answerJobsAfterNs});
            }
        };
        final Runnable answerLate = () ->
        {
            for (final Iterator<Object[]> it = late.iterator(); it.hasNext();)
            {
                final Object[] request = it.next();
                if (System.nanoTime() >= (long)request[2])
                {
                    ((ControlServer.Client)request[0]).reply(request[1], List.of());
                    it.remove();
                }
            }
        };
        final ServedSocket served = new ServedSocket(socket, handler, answerLate);
        try
        {
            final long startNs = System.nanoTime();
            assertEquals(3, BlockmoverCli.run("--timeout", "1s", "status", "--socket", socket.toString()), stderr());
            assertTrue(System.nanoTime() - startNs < TimeUnit.SECONDS.toNanos(20), "it gave up in time");
            assertTrue(stderr().startsWith("blockmover: blockmoverd did not answer 'status' within 1s: it is " +
                "busy"), stderr());
            assertTrue(stderr().contains("--timeout 0 waits without limit"), stderr());
            assertFalse(stderr().contains("took effect"), "a query changes nothing: " + stderr());
            err.reset();

            assertEquals(3, BlockmoverCli.run("group", "create", "g", "--peer", "p", "--volume", "/a=/b",
                "--timeout=1s", "--socket", socket.toString()), stderr());
            assertTrue(stderr().contains("did not answer 'group-create' within 1s"), stderr());
            assertTrue(stderr().contains("Whether 'group-create' took effect is unknown"), stderr());
            err.reset();

            assertEquals(0, BlockmoverCli.run("jobs", "--timeout", "0", "--socket", socket.toString()), stderr());
            assertEquals(0, BlockmoverCli.run("jobs", "--socket", socket.toString()), "30 s by default: " +
                stderr());
            assertEquals(4, BlockmoverCli.run("jobs", "--timeout", "soon", "--socket", socket.toString()));
            assertTrue(stderr().contains("--timeout 'soon' is not a duration"), stderr());
        }
        finally
        {
            served.close();
        }
    }

    /**
     * A real control socket served by a thread of the test, as the conductor serves it: each turn polls the server
     * with the handler, then runs the tick (replies the handler left for later). {@link #close} stops the thread,
     * checks that it ended without an error and that the socket file is gone.
     */
    /**
     * A daemon still checking its groups' logs at start answers STARTING with how far it is: the command says so
     * and exits 3, as for a daemon that is not running yet, and --json gives the code for scripts.
     */
    @Test
    void shouldSayTheDaemonIsStartingAndExitAsNotRunningYet() throws Exception
    {
        final Path socket = dir.resolve("control.sock");
        final String starting = "blockmoverd is starting and answers requests once it has checked every group's " +
            "log: group g: checking the records its log holds, 512 MiB so far (at most 8192 MiB)";
        final ServedSocket served = new ServedSocket(socket,
            (client, id, op, args) -> client.error(id, ErrorCode.STARTING, starting), () -> { });
        try
        {
            assertEquals(3, BlockmoverCli.run("status", "--socket", socket.toString()), stderr());
            assertEquals("blockmover: " + starting + "\n", stderr());
            err.reset();
            assertEquals(3, BlockmoverCli.run("group", "status", "--json", "--socket", socket.toString()), stderr());
            assertTrue(out.toString().contains("\"code\":\"STARTING\""), out.toString());
        }
        finally
        {
            served.close();
        }
    }

    private static final class ServedSocket
    {
        private final Path socket;
        private final ControlServer server;
        private final Thread conductor;
        private final AtomicReference<Throwable> failure = new AtomicReference<>();

        ServedSocket(final Path socket, final ControlServer.Handler handler, final Runnable tick)
        {
            this.socket = socket;
            this.server = new ControlServer(socket, "");
            this.conductor = new Thread(() ->
            {
                try
                {
                    while (!Thread.currentThread().isInterrupted())
                    {
                        final int work = server.poll(handler);
                        tick.run();
                        if (work == 0)
                        {
                            LockSupport.parkNanos(TimeUnit.MICROSECONDS.toNanos(100));
                        }
                    }
                }
                catch (final Throwable ex)
                {
                    failure.set(ex);
                }
            }, "test-conductor");
            conductor.start();
        }

        void close() throws InterruptedException
        {
            conductor.interrupt();
            conductor.join(TimeUnit.SECONDS.toMillis(10));
            server.close();
            assertFalse(conductor.isAlive());
            assertNull(failure.get());
            assertFalse(Files.exists(socket));
        }
    }
}
