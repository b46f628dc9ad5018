package io.blockmover.it;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Operations on one testbed of two real daemons: the event stream of {@code blockmover events} (snapshot, marker,
 * then degraded and replicating as the link is cut and restored, and the RPO target exceeded and recovered), the
 * loopback metrics endpoint answering curl, and {@code blockmover stat --prometheus} with the daemon stopped,
 * checked by Prometheus's own promtool. The methods share one async group and run in order.
 */
@Timeout(240)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class EventsIT
{
    private static final String NAME = "ev";
    private static Testbed testbed;
    private static Map<String, Object> created;

    @BeforeAll
    static void up() throws IOException
    {
        testbed = Testbed.up("events", "--set", "peer.timeout=2s", "--set", "heartbeat.interval=500ms",
            "--set", "reconnect.max.interval=1s", "--set-a", "metrics.listen=127.0.0.1:9477");
        final Path source = Volumes.zeros(testbed.dir.resolve("ev-src.img"), 16 * MIB);
        final Path destination = Volumes.zeros(testbed.dir.resolve("ev-dst.img"), 16 * MIB);
        created = GroupChecks.create(testbed, NAME, "--volume", source + "=" + destination, "--mode", "async",
            "--log-size", "64m", "--rpo-target", "1s");
        awaitReplicated(testbed, NAME, 60);
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    @Test
    @Order(1)
    @SuppressWarnings("unchecked")
    void shouldPrintASnapshotOfGroupVolumePeerAndTheMarker() throws IOException
    {
        final Run text = testbed.cli("site-a", "events", "--now").expect(0);
        final List<String> lines = List.of(text.stdout().split("\n"));
        assertTrue(lines.get(0).startsWith("exists daemon node=site-a errors="), text.stdout());
        assertTrue(lines.contains("exists group name=ev role=source state=replicating mode=async peer=site-b " +
            "transport=tcp rpo=ok rpo_target=1s"), text.stdout());
        assertTrue(text.stdout().contains("exists volume group=ev volume=0 path=" + testbed.dir.resolve("ev-src.img") +
            " size=16777216 dirty_bytes=0 nbd_uri=nbd+unix:///ev/ev-src.img?socket="), text.stdout());
        assertTrue(text.stdout().contains("exists peer name=site-b address=") &&
            text.stdout().contains(" connection=connected transport=tcp"), text.stdout());
        assertEquals("exists -", lines.get(lines.size() - 1), text.stdout());

        final Run json = testbed.cli("site-b", "events", "--now", "--json", "--timestamps").expect(0);
        final List<Map<String, Object>> events = new ArrayList<>();
        for (final String line : json.stdout().split("\n"))
        {
            events.add(JSON.std.mapFrom(line));
        }
        assertTrue(events.stream().anyMatch((e) -> "group".equals(e.get("type")) && "ev".equals(e.get("name")) &&
            "destination".equals(e.get("role")) && "receiving".equals(e.get("state")) &&
            "yes".equals(e.get("consistent"))), json.stdout());
        assertTrue(events.stream().allMatch((e) -> String.valueOf(e.get("time")).matches("\\d{4}-\\d\\d-\\d\\dT.*")),
            json.stdout());
        assertEquals("-", events.get(events.size() - 1).get("type"));
    }

    @Test
    @Order(2)
    void shouldStreamDegradedThenReplicatingAndTheRpoTargetExceededThenRecovered() throws Exception
    {
        assumeTrue(testbed.isNamespaces(), "cutting the link needs the namespace testbed (root)");
        // A terminal's Ctrl-C, wherever the suite runs: a job a script starts with '&' inherits SIGINT ignored, and
        // a JVM honours that (its handler is then never installed), so the suite run that way failed here.
        final Process events = new ProcessBuilder("env", "--default-signal=INT", Testbed.script("blockmover"),
            "events", "--socket", testbed.socket("site-a")).redirectErrorStream(true).start();
        final List<String> lines = new CopyOnWriteArrayList<>();
        final Thread pump = new Thread(() ->
        {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(events.getInputStream(),
                StandardCharsets.UTF_8)))
            {
                String line;
                while ((line = in.readLine()) != null)
                {
                    lines.add(line);
                }
            }
            catch (final IOException ex)
            {
                lines.add("pump failed: " + ex);
            }
        });
        pump.start();
        final StampedWriter writer = new StampedWriter(testbed.nbdSocket("site-a"), GroupChecks.exports(created),
            1024, 64);
        Throwable failed = null;
        try
        {
            Testbed.await("the snapshot", 30, () -> lines.contains("exists -"));
            writer.start();
            testbed.link("down");
            try
            {
                Testbed.await("a degraded event", 30, () -> lines.stream().anyMatch((l) ->
                    l.startsWith("change group name=ev state=degraded")));
                Testbed.await("the peer disconnected", 10, () -> lines.stream().anyMatch((l) ->
                    l.startsWith("change peer name=site-b connection=disconnected")));
                Testbed.await("the RPO target exceeded", 30, () -> indexOf(lines, "rpo=exceeded") >= 0);
                // Past its log: the writer's regions go to the bitmap, the path a long outage takes.
                Testbed.await("the log to overflow", 120, () ->
                    Boolean.TRUE.equals(testbed.group("site-a", NAME).get("rpo_exceeded")));
            }
            finally
            {
                testbed.link("up");
            }
            Testbed.await("a replicating event", 60, () -> lines.stream().anyMatch((l) ->
                l.startsWith("change group name=ev state=") && l.contains("replicating")));
            writer.stop();
            Testbed.await("the RPO target recovered", 60, () -> indexOf(lines, "rpo=ok") > indexOf(lines,
                "rpo=exceeded"));
            assertTrue(testbed.log("site-a").contains("exceeds its target of 1s"), testbed.log("site-a"));
            awaitReplicated(testbed, NAME, 120);
        }
        catch (final Throwable ex)
        {
            failed = ex;
            throw ex;
        }
        finally
        {
            writer.stop();
            Run.of(10, List.of("kill", "-INT", Long.toString(events.pid()))); // Ctrl-C: a last line and exit 0.
            final boolean exited = events.waitFor(10, TimeUnit.SECONDS);
            if (!exited)
            {
                // What it was doing instead: SIGQUIT makes the JVM print its threads to the stdout we collect.
                Run.of(10, List.of("kill", "-QUIT", Long.toString(events.pid())));
                events.waitFor(2, TimeUnit.SECONDS);
                events.destroyForcibly();
            }
            pump.join(5000);
            // Never in place of the failure that brought us here.
            if (!exited && failed == null)
            {
                fail("blockmover events did not exit within 10 s of SIGINT:\n" + String.join("\n", lines));
            }
        }
        assertEquals(0, events.exitValue(), String.join("\n", lines));
        assertEquals("end - reason=interrupted", lines.get(lines.size() - 1));
    }

    private static int indexOf(final List<String> lines, final String attribute)
    {
        int last = -1;
        for (int i = 0; i < lines.size(); i++)
        {
            if (lines.get(i).startsWith("change group name=ev ") && lines.get(i).contains(" " + attribute))
            {
                last = i;
            }
        }
        return last;
    }

    @Test
    @Order(3)
    void shouldServeMetricsOverLoopbackHttpAndStatWithoutTheDaemonForPromtool() throws IOException
    {
        Testbed.await("group counters in the counters file", 10, () ->
            testbed.cli("site-a", "stat", "--prometheus", "--counters-file", testbed.counters("site-a").toString())
                .stdout().contains("blockmover_group_rpo_target_seconds{"));
        final Run curl = Run.of(30, List.of(Testbed.script("testbed"), "exec", "site-a", "--dir",
            testbed.dir.toString(), "--", "curl", "-sf",
            "http://127.0.0.1:9477/metrics")).expect(0);
        final String labels = "node=\"site-a\",group=\"ev\",role=\"source\",peer=\"site-b\"";
        assertTrue(curl.stdout().contains("blockmover_up{node=\"site-a\"} 1\n"), curl.stdout());
        assertTrue(curl.stdout().contains("blockmover_group_rpo_target_seconds{" + labels + "} 1\n"), curl.stdout());
        assertTrue(curl.stdout().contains("blockmover_group_latency_seconds{" + labels +
            ",stage=\"local_write\",quantile=\"0.99\"}"), curl.stdout());

        // The figures of a stopped daemon are its last ones, not those of up to a second before it stopped: a
        // write just before the stop is counted.
        try (NbdClient client = NbdClient.connect(testbed.nbdSocket("site-a"), GroupChecks.exports(created)[0]))
        {
            assertEquals(0, client.write(0, new byte[4096]));
        }
        final Object writes = testbed.group("site-a", NAME).get("writes");
        testbed.stop("site-a");
        final Path prom = testbed.dir.resolve("blockmover.prom");
        final Run stat = testbed.cli("site-a", "stat", "--prometheus", "--counters-file",
            testbed.counters("site-a").toString(), "--output", prom.toString()).expect(0);
        assertEquals("", stat.stdout());
        final String text = Files.readString(prom);
        assertTrue(text.contains("blockmover_up{node=\"site-a\"} 0\n"), text);
        assertTrue(text.contains("blockmover_group_writes_total{" + labels + "} " + writes + "\n"), text);
        assertTrue(text.contains("blockmover_group_volume_dirty_bytes{" + labels + ",volume=\"0\"} 0\n"), text);
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/promtool")), "promtool is not installed");
        final Process check = new ProcessBuilder("/usr/bin/promtool", "check", "metrics")
            .redirectInput(prom.toFile()).redirectErrorStream(true).start();
        final String output = new String(check.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        try
        {
            assertTrue(check.waitFor(30, TimeUnit.SECONDS));
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            throw new AssertionError(ex);
        }
        assertEquals(0, check.exitValue(), output);
        assertEquals("", output.trim(), output);
    }
}
