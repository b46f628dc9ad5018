package io.blockmover.metrics;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.CncFile;

/**
 * The optional loopback endpoint ({@code metrics.listen}) that serves {@link PrometheusWriter}'s text at
 * {@code /metrics}. It runs the JDK's HTTP server on one thread of its own and maps the counters file read-only
 * for itself, as {@code blockmover stat} does: a scrape never touches the conductor or the data path, and a
 * wedged daemon still answers (with {@code blockmover_up 0}). Loopback only, since it has no authentication; the
 * configuration refuses any other address.
 */
public final class MetricsHttpServer implements AutoCloseable
{
    private final HttpServer server;
    private final ExecutorService thread;
    private final CncFile cnc;

    private MetricsHttpServer(final HttpServer server, final ExecutorService thread, final CncFile cnc)
    {
        this.server = server;
        this.thread = thread;
        this.cnc = cnc;
    }

    /**
     * @param address      loopback address and port.
     * @param countersFile the daemon's counters file, already created.
     * @return the running server.
     */
    public static MetricsHttpServer start(final InetSocketAddress address, final Path countersFile)
    {
        final CncFile cnc = CncFile.openReadOnly(countersFile);
        final HttpServer server;
        try
        {
            server = HttpServer.create(address, 8);
        }
        catch (final IOException ex)
        {
            cnc.close();
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot serve metrics on " + address + ": " +
                ex.getMessage() + " (another process on that port? change metrics.listen)", ex);
        }
        final ExecutorService thread = Executors.newSingleThreadExecutor((r) ->
        {
            final Thread t = new Thread(r, "metrics-http");
            t.setDaemon(true);
            return t;
        });
        final MetricsHttpServer metrics = new MetricsHttpServer(server, thread, cnc);
        server.createContext("/metrics", metrics::serve);
        server.createContext("/", (exchange) -> reply(exchange, 404, "see /metrics\n"));
        server.setExecutor(thread);
        server.start();
        return metrics;
    }

    public InetSocketAddress address()
    {
        return server.getAddress();
    }

    private void serve(final HttpExchange exchange) throws IOException
    {
        if (!"GET".equals(exchange.getRequestMethod()) && !"HEAD".equals(exchange.getRequestMethod()))
        {
            reply(exchange, 405, "GET /metrics\n");
            return;
        }
        exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        reply(exchange, 200, PrometheusWriter.write(cnc, System.currentTimeMillis()));
    }

    private static void reply(final HttpExchange exchange, final int status, final String body) throws IOException
    {
        final byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        final boolean head = "HEAD".equals(exchange.getRequestMethod());
        exchange.sendResponseHeaders(status, head ? -1 : bytes.length);
        try (OutputStream out = exchange.getResponseBody())
        {
            if (!head)
            {
                out.write(bytes);
            }
        }
    }

    @Override
    public void close()
    {
        server.stop(0);
        thread.shutdownNow();
        cnc.close();
    }
}
