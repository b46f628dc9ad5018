package io.blockmover.metrics;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class PrometheusWriterTest
{
    @TempDir
    Path dir;

    private static Map<String, Object> sourceStatus()
    {
        final Map<String, Object> s = new LinkedHashMap<>();
        s.put("name", "sql");
        s.put("role", "source");
        s.put("peer", "site-b");
        s.put("transport", "tcp");
        s.put("writes", 1234);
        s.put("bytes_written", 5_054_464L);
        s.put("rpo_bytes", 4096);
        s.put("rpo_seconds", 1.5);
        s.put("rpo_target_s", 30.0);
        s.put("rpo_target_exceeded", false);
        s.put("rpo_exceeded", false);
        s.put("activity_regions", 7);
        s.put("records_mended", 1);
        s.put("log", Map.of("used", 8192, "size", 67_108_864));
        s.put("volumes", List.of(Map.of("size", 1_048_576, "dirty_bytes", 65_536),
            Map.of("size", 2_097_152, "dirty_bytes", 0)));
        final Map<String, Object> h = new LinkedHashMap<>();
        h.put("count", 1000);
        h.put("p50_us", 100.0);
        h.put("p99_us", 175.5);
        h.put("p999_us", 3000.0);
        s.put("latency", Map.of("local_write", h));
        return s;
    }

    @Test
    void shouldWriteSystemAndGroupCountersWithLabelsHelpAndSummaries()
    {
        final Path path = dir.resolve("counters.dat");
        try (CncFile daemon = CncFile.create(path, "site-a", ProcessHandle.current().pid(), 256);
            GroupCounters group = new GroupCounters(daemon, "sql", "source", "site-b"))
        {
            daemon.counter(SystemCounter.BYTES_SENT).set(42);
            group.update(sourceStatus());
            try (CncFile reader = CncFile.openReadOnly(path))
            {
                final String text = PrometheusWriter.write(reader, System.currentTimeMillis());
                final String labels = "node=\"site-a\",group=\"sql\",role=\"source\",peer=\"site-b\"";
                assertTrue(text.contains("blockmover_up{node=\"site-a\"} 1\n"), text);
                assertTrue(text.contains("# TYPE blockmover_bytes_sent_total counter\n" +
                    "blockmover_bytes_sent_total{node=\"site-a\"} 42\n"), text);
                assertTrue(text.contains("blockmover_group_rpo_seconds{" + labels + "} 1.5\n"), text);
                assertTrue(text.contains("blockmover_group_rpo_target_seconds{" + labels + "} 30\n"), text);
                assertTrue(text.contains("blockmover_group_writes_total{" + labels + "} 1234\n"), text);
                assertTrue(text.contains("blockmover_group_activity_regions{" + labels + "} 7\n"), text);
                assertTrue(text.contains("# TYPE blockmover_group_log_records_mended_total counter\n"), text);
                assertTrue(text.contains("blockmover_group_volume_dirty_bytes{" + labels + ",volume=\"0\"} 65536\n"),
                    text);
                assertTrue(text.contains("# TYPE blockmover_group_latency_seconds summary\n"), text);
                assertTrue(text.contains("blockmover_group_latency_seconds{" + labels +
                    ",stage=\"local_write\",quantile=\"0.99\"} 0.0001755\n"), text);
                assertTrue(text.contains("blockmover_group_latency_seconds_count{" + labels +
                    ",stage=\"local_write\"} 1000\n"), text);
                assertFalse(text.contains("blockmover_group_latency_seconds_sum"), text);
                assertEquals(1, count(text, "# HELP blockmover_group_volume_dirty_bytes "), text);
                promtoolAccepts(text);
            }
        }
    }

    /**
     * A destination's RPO as its source last said it (group status: source_report), with how old that is: the DR
     * site watches its own exposure, and keeps a figure, aging, once the source is gone.
     */
    @Test
    void shouldExportADestinationsRpoAsItsSourceLastSaidItAndHowOldThatIs()
    {
        final Path path = dir.resolve("counters.dat");
        try (CncFile daemon = CncFile.create(path, "site-b", ProcessHandle.current().pid(), 256);
            GroupCounters group = new GroupCounters(daemon, "sql", "destination", "site-a"))
        {
            final Map<String, Object> s = new LinkedHashMap<>();
            s.put("name", "sql");
            s.put("role", "destination");
            s.put("peer", "site-a");
            s.put("records_applied", 70);
            s.put("source_report", Map.of("seconds_ago", 5.6, "lsn", 84L, "records_behind", 11L, "rpo_bytes",
                12_582_912L, "rpo_seconds", 11.7, "dirty_regions", 0L));
            group.update(s);
            final String text = PrometheusWriter.write(daemon, System.currentTimeMillis());
            final String labels = "node=\"site-b\",group=\"sql\",role=\"destination\",peer=\"site-a\"";
            assertTrue(text.contains("blockmover_group_rpo_bytes{" + labels + "} 12582912\n"), text);
            assertTrue(text.contains("blockmover_group_rpo_seconds{" + labels + "} 11.7\n"), text);
            assertTrue(text.contains("blockmover_group_behind_records{" + labels + "} 11\n"), text);
            assertTrue(text.contains("blockmover_group_source_report_age_seconds{" + labels + "} 5.6\n"), text);
            promtoolAccepts(text);
        }
    }

    @Test
    void shouldForgetAGroupsCountersWhenItsCountersClose()
    {
        final Path path = dir.resolve("counters.dat");
        try (CncFile daemon = CncFile.create(path, "site-a", ProcessHandle.current().pid(), 256))
        {
            final GroupCounters group = new GroupCounters(daemon, "gone", "source", "site-b");
            group.update(sourceStatus());
            group.close();
            final String text = PrometheusWriter.write(daemon, System.currentTimeMillis());
            assertFalse(text.contains("group=\"gone\""), text);
        }
    }

    @Test
    void shouldEscapeLabelValuesAndPrintNumbersPlainly()
    {
        assertEquals("a\\\"b\\\\c\\nd", PrometheusWriter.escape("a\"b\\c\nd"));
        assertEquals("3", PrometheusWriter.number(3.0));
        assertEquals("0.25", PrometheusWriter.number(0.25));
        assertEquals("1.5e-07", PrometheusWriter.number(1.5e-7));
    }

    private static int count(final String text, final String what)
    {
        int n = 0;
        for (int i = text.indexOf(what); i >= 0; i = text.indexOf(what, i + 1))
        {
            n++;
        }
        return n;
    }

    /**
     * The real parser and linter of Prometheus (Debian's prometheus package; scripts/install-deps test).
     */
    static void promtoolAccepts(final String text)
    {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/promtool")), "promtool is not installed");
        try
        {
            final Process p = new ProcessBuilder("/usr/bin/promtool", "check", "metrics").redirectErrorStream(true)
                .start();
            p.getOutputStream().write(text.getBytes(StandardCharsets.UTF_8));
            p.getOutputStream().close();
            final String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "promtool hung");
            assertEquals(0, p.exitValue(), "promtool check metrics: " + output + "\n" + text);
            assertEquals("", output.trim(), "promtool lint: " + output);
        }
        catch (final java.io.IOException ex)
        {
            throw new AssertionError("cannot run promtool: " + ex, ex);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            throw new AssertionError(ex);
        }
    }
}
