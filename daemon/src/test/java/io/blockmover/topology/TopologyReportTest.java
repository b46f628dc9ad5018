package io.blockmover.topology;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class TopologyReportTest
{
    private static final long GIB = 1L << 30;

    @Test
    void shouldRoundTheLogUpToWholeGibibytesWithAFloor()
    {
        assertEquals(GIB, TopologyReport.recommendedLogBytes(3600, 0), "the floor");
        assertEquals(GIB, TopologyReport.recommendedLogBytes(60, 1_000_000), "60 MB fits in the floor");
        assertEquals(4 * GIB, TopologyReport.recommendedLogBytes(3600, 1_000_000), "3.6 GB rounds up to 4 GiB");
        assertEquals(2 * GIB, TopologyReport.recommendedLogBytes(2, GIB), "exact multiples stay");
    }

    @Test
    void shouldEstimateTheInitialSyncFromTheSlowerOfReadAndNetwork()
    {
        final List<Map<String, Object>> network = List.of(
            Map.of("transport", "tcp", "available", true, "bandwidth_bps", 100_000_000L),
            Map.of("transport", "rdma", "available", false, "reason", "no device"));
        final List<Map<String, Object>> volumes = List.of(
            volume("/dev/a", 1_000_000_000L, 50_000_000L, 300_000_000L),
            volume("/dev/b", 2_000_000_000L, 10_000_000L, 40_000_000L));

        final Map<String, Object> r = TopologyReport.recommend(network, volumes, 600);

        assertEquals(60_000_000L, r.get("peak_write_rate_bps"));
        assertEquals(34 * GIB, r.get("log_bytes"), "600 s x 60 MB/s = 36 GB = 33.5 GiB, rounded up");
        assertEquals(10.0 + 50.0, r.get("initial_sync_seconds"), "1 GB at 100 MB/s (network), 2 GB at 40 (read)");
        assertEquals("tcp", r.get("network_transport"));
    }

    @Test
    void shouldParseFiosBandwidthLog(@TempDir final Path dir) throws Exception
    {
        final Path log = dir.resolve("x_bw.1.log");
        Files.writeString(log, "500, 20480, 1, 65536, 0\n1000, 10240, 1, 65536, 0, 0\n");
        assertEquals(List.of(List.of(500L, 20480L * 1024), List.of(1000L, 10240L * 1024)),
            VolumeProbe.parseFioBandwidthLog(log));
    }

    @Test
    void shouldKeepEmbeddedDataFromEndingTheScript() throws Exception
    {
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("node", "a");
        result.put("peer", "b");
        result.put("peer_address", "b:1");
        result.put("started_ms", 0L);
        result.put("duration_ms", 1000L);
        result.put("workload", "none");
        result.put("network", List.of());
        result.put("volumes", List.of(volume("/tmp/</script><b>x", 4096, 0, 0)));
        result.put("recommendations", TopologyReport.recommend(List.of(), List.of(), 60));

        final String html = HtmlReport.render(result);

        assertFalse(html.contains("</script><b>"), "a path must not close the data block");
        assertTrue(html.contains("&lt;/script&gt;&lt;b&gt;x"), "and is escaped in the tables");
        assertFalse(html.contains("http://") && !html.contains("http://www.w3.org/2000/svg"), "nothing fetched");
    }

    private static Map<String, Object> volume(final String path, final long size, final long peak, final long read)
    {
        final Map<String, Object> v = new LinkedHashMap<>();
        v.put("path", path);
        v.put("size", size);
        v.put("write_rate_peak_bps", peak);
        v.put("write_rate_mean_bps", peak / 2);
        v.put("write_samples", List.of());
        v.put("read_rate_bps", read);
        v.put("write_source", "test");
        return v;
    }
}
