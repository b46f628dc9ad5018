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

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The topology test between two real daemons: the JSON is plausible (round trips and bandwidth measured over
 * TCP, RDMA said to be unavailable and why, the volume's write and read rates, the log size following the
 * documented rule), nothing is left beside the volume, and the HTML report draws its charts in a real headless
 * Chromium (Debian's chromium), with no network.
 */
@Timeout(300)
class TopologyIT
{
    private static final long GIB = 1L << 30;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("topology");
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
        final long size = 64L * MIB;
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
        final Run missing = testbed.cli("site-a", "topology-test", "--peer", "site-b", "--volume",
            testbed.dir.resolve("no-such.img").toString(), "--duration", "1s");
        assertEquals(4, missing.exitCode());
        assertTrue(missing.stderr().contains("does not exist"), missing.stderr());
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
