package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What an operator does with a peer, between two real daemons sharing one testbed:
 * <ul>
 * <li>the topology test: the JSON is plausible (round trips and bandwidth measured over TCP, RDMA said to be
 * unavailable and why, the volume's write and read rates, the log size following the documented rule), nothing
 * is left beside the volume, and the HTML report draws its charts in a real headless Chromium (Debian's
 * chromium), with no network;</li>
 * <li>the bandwidth limit: a copy limited by {@code peer.site-b.max.rate} takes about size / rate (a functional
 * check of the limit within a wide band, not a benchmark); {@code peer set} changes it for the next copy, and the
 * change survives a restart of the daemon; {@code --reset} restores the configured limit.</li>
 * </ul>
 */
@Timeout(300)
class PeerIT
{
    private static final long GIB = 1L << 30;
    private static final long RATE = 20L * MIB;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("peer", "--set-a", "peer.site-b.max.rate=20m");
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
    @SuppressWarnings("unchecked")
    void shouldMeasureRecommendAndDrawAReport() throws Exception
    {
        final long size = 32L * MIB;
        final Path dir = Files.createDirectories(testbed.dir.resolve("topology-volumes"));
        final Path volume = Volumes.random(dir.resolve("vol.img"), size, 5);
        final Path report = testbed.dir.resolve("report.html");
        final byte[] before = Files.readAllBytes(volume);

        final Run run = testbed.cli("site-a", "topology-test", "--peer", "site-b", "--volume", volume.toString(),
            "--duration", "3s", "--workload", "builtin", "--outage", "10m", "--report", report.toString(), "--json")
            .expect(0);

        assertTrue(run.stderr().contains("network over tcp") && run.stderr().contains("volumes"), run.stderr());
        final Map<String, Object> r = JSON.std.mapFrom(run.stdout());
        final List<Map<String, Object>> network = (List<Map<String, Object>>)r.get("network");
        final Map<String, Object> tcp = find(network, "tcp");
        final Map<String, Object> rtt = (Map<String, Object>)tcp.get("rtt");
        assertTrue(dbl(rtt.get("min_us")) > 0 && dbl(rtt.get("min_us")) <= dbl(rtt.get("p50_us")) &&
            dbl(rtt.get("p50_us")) <= dbl(rtt.get("p99_us")), rtt.toString());
        assertTrue(num(rtt.get("count")) >= 50, rtt.toString());
        assertTrue(num(tcp.get("bandwidth_bps")) > 0, tcp.toString());
        assertFalse(((List<?>)tcp.get("bandwidth_samples")).isEmpty());
        final Map<String, Object> rdma = find(network, "rdma");
        assertEquals(false, rdma.get("available"), "this host has no RDMA");
        assertTrue(String.valueOf(rdma.get("reason")).contains("RDMA"), rdma.toString());

        final Map<String, Object> v = ((List<Map<String, Object>>)r.get("volumes")).get(0);
        assertEquals(size, num(v.get("size")));
        final long peak = num(v.get("write_rate_peak_bps"));
        assertTrue(peak > 0 && peak >= num(v.get("write_rate_mean_bps")), v.toString());
        assertTrue(num(v.get("read_rate_bps")) > 0 && num(v.get("read_bytes")) > 0, v.toString());

        final Map<String, Object> rec = (Map<String, Object>)r.get("recommendations");
        assertEquals(peak, num(rec.get("peak_write_rate_bps")));
        final long expectedLog = Math.max(GIB, (long)Math.ceil(600.0 * peak / GIB) * GIB);
        assertEquals(expectedLog, num(rec.get("log_bytes")), "outage x peak write rate, rounded up to a GiB");
        final double rate = Math.min(num(v.get("read_rate_bps")), num(tcp.get("bandwidth_bps")));
        assertEquals(size / rate, dbl(rec.get("initial_sync_seconds")), 0.1);

        assertTrue(java.util.Arrays.equals(before, Files.readAllBytes(volume)), "the volume must not be written");
        try (Stream<Path> files = Files.list(dir))
        {
            assertEquals(List.of(volume), files.toList(), "the scratch file must be gone");
        }

        final String dom = renderInChromium(report);
        for (final String chart : List.of("chart-latency", "chart-bandwidth", "chart-writes"))
        {
            final Matcher m = Pattern.compile("<svg id=\"" + chart + "\"[^>]*data-drawn=\"(\\d+)\"[^>]*>(.*?)</svg>",
                Pattern.DOTALL).matcher(dom);
            assertTrue(m.find(), chart + " was not drawn: " + dom);
            assertTrue(Integer.parseInt(m.group(1)) > 0, chart + " drew nothing");
            final String svg = m.group(2);
            if ("chart-latency".equals(chart))
            {
                assertTrue(Pattern.compile("<rect class=\"bar\"[^>]*height=\"[1-9]").matcher(svg).find(), svg);
            }
            else
            {
                assertTrue(Pattern.compile("<path class=\"series\" d=\"M[^\"]+L[^\"]+\"").matcher(svg).find(), svg);
            }
        }
    }

    @Test
    void shouldRefuseAnUnknownPeerOrAMissingVolume()
    {
        assertEquals(4, testbed.cli("site-a", "topology-test", "--peer", "nope", "--volume", "/dev/null",
            "--duration", "1s").exitCode());
        final BlockmoverException missing = assertThrows(BlockmoverException.class, () -> testbed.call("site-a",
            "topology-start", Map.of("peer", "site-b", "volumes", List.of(testbed.dir.resolve("no-such.img")
            .toString()), "duration_ms", 1000)));
        assertEquals(4, missing.code().exitCode());
        assertTrue(missing.getMessage().contains("does not exist"), missing.getMessage());
    }

    @Test
    @SuppressWarnings("unchecked")
    void shouldHoldCopiesToTheLimitAndKeepARuntimeChangeAcrossARestart() throws Exception
    {
        final Map<String, Object> configured = show();
        assertEquals(RATE, num(configured.get("max_rate")));
        assertEquals("config", configured.get("max_rate_source"));

        final long size = 48L * MIB;
        assertCopyTakesAbout(size, RATE, "a");

        final Run set = testbed.cli("site-a", "peer", "set", "site-b", "--max-rate", "40m", "--json").expect(0);
        final Map<String, Object> after = JSON.std.mapFrom(set.stdout());
        assertEquals(2 * RATE, num(after.get("max_rate")));
        assertEquals("runtime", after.get("max_rate_source"));
        assertCopyTakesAbout(size, 2 * RATE, "b");

        testbed.stop("site-a");
        testbed.start("site-a");
        final Map<String, Object> restarted = show();
        assertEquals(2 * RATE, num(restarted.get("max_rate")), "peer set must survive a restart");
        assertEquals("runtime", restarted.get("max_rate_source"));
        final Map<String, Object> status = (Map<String, Object>)testbed.call("site-a", "status", Map.of());
        assertEquals(2 * RATE, num(((List<Map<String, Object>>)status.get("peers")).get(0).get("max_rate")));

        testbed.call("site-a", "peer-set", Map.of("name", "site-b", "reset", true));
        assertEquals(RATE, num(show().get("max_rate")));
        final BlockmoverException unknown = assertThrows(BlockmoverException.class,
            () -> testbed.call("site-a", "peer-set", Map.of("name", "nope", "max_rate", 1)));
        assertEquals(ErrorCode.UNKNOWN_PEER, unknown.code());
    }

    @Test
    void shouldHoldTheInitialSyncOfSyncAndAsyncGroupsToTheLimit() throws Exception
    {
        // Lower than the copy's limit: a group's initial sync on this shared 2-core machine runs at only a few
        // tens of MB/s unlimited, so only a low limit tells "limited" from "slow".
        final long rate = 4L * MIB;
        testbed.call("site-a", "peer-set", Map.of("name", "site-b", "max_rate", rate));
        final long size = 16L * MIB;
        try
        {
            for (final String mode : List.of("sync", "async"))
            {
                final String name = "rate-" + mode;
                final Path source = Volumes.random(testbed.dir.resolve(name + "-src.img"), size, 7);
                final Path target = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), size);
                testbed.call("site-a", "group-create", Map.of("name", name, "peer", "site-b", "mode", mode,
                    "on_disconnect", "continue", "log_size", 64L * MIB,
                    "volumes", List.of(Map.of("source", source.toString(), "target", target.toString()))));
                final long startNs = System.nanoTime();
                // Every region sent and acknowledged: what the limit governs (not the tail until it is applied).
                Testbed.await(name + " initial sync sent", 60, () ->
                {
                    final Map<String, Object> status = testbed.group("site-a", name);
                    return GroupChecks.number(status, "dirty_regions") == 0 &&
                        GroupChecks.lsn(status, "last") >= size / MIB &&
                        GroupChecks.lsn(status, "acked") == GroupChecks.lsn(status, "last");
                });
                final double seconds = (System.nanoTime() - startNs) / 1e9;
                final double expected = (double)size / rate;
                // sync: the resyncer is limited (writes are not); async: the shipper, which carries the resync.
                assertTrue(seconds >= 0.6 * expected && seconds <= 1.6 * expected, mode + " initial sync of " + size +
                    " bytes at " + rate + " B/s took " + seconds + " s, expected about " + expected + " s");
                GroupChecks.awaitReplicated(testbed, name, 60);
                GroupChecks.delete(testbed, name);
                assertNull(Volumes.firstDifference(source, target, size));
            }
        }
        finally
        {
            testbed.call("site-a", "peer-set", Map.of("name", "site-b", "reset", true));
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> show()
    {
        return (Map<String, Object>)testbed.call("site-a", "peer-show", Map.of("name", "site-b"));
    }

    @SuppressWarnings("unchecked")
    private static void assertCopyTakesAbout(final long size, final long rate, final String name) throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("rate-src-" + name + ".img"), size, name.hashCode());
        final Path target = Volumes.zeros(testbed.dir.resolve("rate-dst-" + name + ".img"), size);

        // In-process (as 'blockmover copy' does over the same socket): a JVM per copy costs more than the copy.
        final long id = num(((Map<String, Object>)testbed.call("site-a", "copy", Map.of("source", source.toString(),
            "peer", "site-b", "target", target.toString()))).get("id"));
        Testbed.await("copy " + name, 60, () -> List.of("completed", "failed", "cancelled")
            .contains(String.valueOf(testbed.job("site-a", id).get("state"))));
        final Map<String, Object> job = testbed.job("site-a", id);
        assertEquals("completed", job.get("state"), job.toString());
        final double seconds = (num(job.get("finished_ms")) - num(job.get("started_ms"))) / 1000.0;
        final double expected = (double)size / rate;
        assertTrue(seconds >= 0.6 * expected && seconds <= 1.6 * expected, "copy of " + size + " bytes at " + rate +
            " B/s took " + seconds + " s, expected about " + expected + " s");
        assertNull(Volumes.firstDifference(source, target, size));
    }

    /**
     * Loads the report in headless Chromium as a person's browser would (no network, a throw-away profile) and
     * returns the DOM after its script ran.
     */
    private static String renderInChromium(final Path report) throws Exception
    {
        final Path profile = Files.createTempDirectory(testbed.dir, "chromium-");
        final Run run = Run.of(120, List.of("chromium", "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--user-data-dir=" + profile, "--dump-dom", report.toUri().toString()));
        assertEquals(0, run.exitCode(), run.stderr());
        assertNotNull(run.stdout());
        return run.stdout();
    }

    private static Map<String, Object> find(final List<Map<String, Object>> network, final String transport)
    {
        for (final Map<String, Object> t : network)
        {
            if (transport.equals(t.get("transport")))
            {
                return t;
            }
        }
        throw new AssertionError("no " + transport + " in " + network);
    }

    private static long num(final Object value)
    {
        return ((Number)value).longValue();
    }

    private static double dbl(final Object value)
    {
        return ((Number)value).doubleValue();
    }
}
