package io.blockmover.metrics;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.daemon.Context;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MetricsListenTest
{
    @TempDir
    Path dir;

    private Path config(final String line) throws IOException
    {
        final Path path = dir.resolve("blockmoverd.conf");
        Files.writeString(path, "node.name = site-a\n" + line + "\n", StandardCharsets.UTF_8);
        return path;
    }

    @Test
    void shouldBeOffByDefaultAndAcceptLoopback() throws IOException
    {
        assertNull(Context.conclude(config(""), new Properties()).metricsListen());
        final InetSocketAddress address = Context.conclude(config("metrics.listen = 127.0.0.1:9477"),
            new Properties()).metricsListen();
        assertEquals(9477, address.getPort());
        assertTrue(address.getAddress().isLoopbackAddress());
    }

    @Test
    void shouldRefuseANonLoopbackAddressSayingWhy() throws IOException
    {
        final Path file = config("metrics.listen = 0.0.0.0:9477");
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> Context.conclude(file, new Properties()));
        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        assertTrue(ex.getMessage().contains("metrics.listen 0.0.0.0:9477 is not a loopback address: the metrics " +
            "endpoint has no authentication"), ex.getMessage());
    }

    @Test
    void shouldServeTheCountersFileAtMetrics() throws Exception
    {
        final Path path = dir.resolve("counters.dat");
        try (CncFile daemon = CncFile.create(path, "site-a", ProcessHandle.current().pid(), 64);
            MetricsHttpServer server = MetricsHttpServer.start(new InetSocketAddress("127.0.0.1", 0), path))
        {
            daemon.counter(SystemCounter.ERRORS).set(3);
            final HttpClient client = HttpClient.newHttpClient();
            final URI base = URI.create("http://127.0.0.1:" + server.address().getPort());
            final HttpResponse<String> metrics = client.send(HttpRequest.newBuilder(base.resolve("/metrics")).build(),
                HttpResponse.BodyHandlers.ofString());
            assertEquals(200, metrics.statusCode());
            assertTrue(metrics.headers().firstValue("Content-Type").orElse("").startsWith("text/plain; version=0.0.4"));
            assertTrue(metrics.body().contains("blockmover_errors_total{node=\"site-a\"} 3\n"), metrics.body());
            final HttpResponse<String> other = client.send(HttpRequest.newBuilder(base.resolve("/x")).build(),
                HttpResponse.BodyHandlers.ofString());
            assertEquals(404, other.statusCode());
        }
    }
}
