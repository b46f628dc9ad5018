package io.blockmover.control;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

class ControlServerTest
{
    private static final long DEADLINE_NS = TimeUnit.SECONDS.toNanos(10);

    @TempDir
    Path dir;

    private final List<String> ops = new ArrayList<>();
    private final List<Map<String, Object>> argsSeen = new ArrayList<>();
    private final List<AutoCloseable> toClose = new ArrayList<>();

    /** Echoes op and args back, as a result. */
    private final ControlServer.Handler echo = (client, id, op, args) ->
    {
        ops.add(op);
        argsSeen.add(args);
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("op", op);
        result.put("args", args);
        client.reply(id, result);
    };

    @AfterEach
    void closeAll() throws Exception
    {
        for (final AutoCloseable closeable : toClose)
        {
            closeable.close();
        }
    }

    private Path socketPath()
    {
        return dir.resolve("run/control.sock");
    }

    private ControlServer server(final Path path)
    {
        final ControlServer server = new ControlServer(path, "");
        toClose.add(server);
        return server;
    }

    private TestClient connect(final Path path) throws IOException
    {
        final SocketChannel channel = SocketChannel.open(StandardProtocolFamily.UNIX);
        channel.connect(UnixDomainSocketAddress.of(path));
        channel.configureBlocking(false);
        toClose.add(channel);
        return new TestClient(channel);
    }

    private static Map<String, Object> parse(final String line) throws IOException
    {
        assertNotNull(line, "no reply before the connection ended");
        return JSON.std.mapFrom(line);
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> errorOf(final Map<String, Object> reply)
    {
        assertEquals(Boolean.FALSE, reply.get("ok"), "reply " + reply);
        return (Map<String, Object>)reply.get("error");
    }

    @Test
    void shouldAnswerJsonLineWithHandlersReply() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());

        client.send("{\"id\": 7, \"op\": \"status\", \"args\": {\"verbose\": true}}\n");
        final Map<String, Object> reply = parse(client.readLine(server, echo));

        assertEquals(7, ((Number)reply.get("id")).intValue());
        assertEquals(Boolean.TRUE, reply.get("ok"));
        @SuppressWarnings("unchecked")
        final Map<String, Object> result = (Map<String, Object>)reply.get("result");
        assertEquals("status", result.get("op"));
        assertEquals(Map.of("verbose", true), result.get("args"));
        assertEquals(List.of("status"), ops);
        assertEquals(0, server.rejected());
    }

    @Test
    void shouldPassEmptyArgsWhenRequestHasNone() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());

        client.send("{\"id\": 1, \"op\": \"jobs\"}\n");
        parse(client.readLine(server, echo));

        assertEquals(1, argsSeen.size());
        assertTrue(argsSeen.get(0).isEmpty());
    }

    @Test
    void shouldAnswerPipelinedAndSplitRequestsInOrder() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());

        client.send("{\"id\": 1, \"op\": \"a\"}\n\n{\"id\": 2, \"op\": \"b\"}\n{\"id\": 3, ");
        final Map<String, Object> first = parse(client.readLine(server, echo));
        final Map<String, Object> second = parse(client.readLine(server, echo));
        client.send("\"op\": \"c\"}\n");
        final Map<String, Object> third = parse(client.readLine(server, echo));

        assertEquals(1, ((Number)first.get("id")).intValue());
        assertEquals(2, ((Number)second.get("id")).intValue());
        assertEquals(3, ((Number)third.get("id")).intValue());
        assertEquals(List.of("a", "b", "c"), ops);
    }

    @Test
    void shouldRejectMalformedJsonAndKeepConnectionUsable() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());

        client.send("{\"id\": 1, \"op\": \n");
        final Map<String, Object> error = errorOf(parse(client.readLine(server, echo)));
        client.send("{\"id\": 2, \"op\": \"status\"}\n");
        final Map<String, Object> next = parse(client.readLine(server, echo));

        assertEquals(ErrorCode.BAD_REQUEST.name(), error.get("code"));
        assertTrue(String.valueOf(error.get("message")).startsWith("malformed JSON request"), error.toString());
        assertEquals(Boolean.TRUE, next.get("ok"), "the connection survives a bad request");
        assertEquals(List.of("status"), ops);
        assertEquals(1, server.rejected());
    }

    @Test
    void shouldRejectRequestWithoutStringOp() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());

        client.send("{\"id\": 1, \"args\": {}}\n");
        final Map<String, Object> missing = errorOf(parse(client.readLine(server, echo)));
        client.send("{\"id\": 2, \"op\": 42}\n");
        final Map<String, Object> notString = errorOf(parse(client.readLine(server, echo)));
        client.send("[\"op\", \"status\"]\n");
        final Map<String, Object> notObject = errorOf(parse(client.readLine(server, echo)));
        client.send("{\"id\": 4, \"op\": \"copy\", \"args\": [1, 2]}\n");
        final Map<String, Object> argsReply = parse(client.readLine(server, echo));

        assertEquals(ErrorCode.BAD_REQUEST.name(), missing.get("code"));
        assertTrue(String.valueOf(missing.get("message")).contains("\"op\""), missing.toString());
        assertEquals(ErrorCode.BAD_REQUEST.name(), notString.get("code"));
        assertEquals(ErrorCode.BAD_REQUEST.name(), notObject.get("code"));
        assertEquals(ErrorCode.BAD_REQUEST.name(), errorOf(argsReply).get("code"));
        assertEquals(4, ((Number)argsReply.get("id")).intValue(), "the id is echoed when it could be read");
        assertTrue(ops.isEmpty(), "the handler never saw a bad request");
        assertEquals(4, server.rejected());
    }

    @Test
    void shouldRejectLineLongerThan64KibAndCloseConnection() throws IOException
    {
        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());
        final byte[] huge = new byte[ControlServer.MAX_LINE + 4096];
        Arrays.fill(huge, (byte)'a');
        final ByteBuffer out = ByteBuffer.wrap(huge);

        String line = null;
        boolean ended = false;
        final long deadline = System.nanoTime() + DEADLINE_NS;
        while (!ended && System.nanoTime() < deadline)
        {
            if (out.hasRemaining())
            {
                try
                {
                    client.channel.write(out);
                }
                catch (final IOException ex)
                {
                    out.position(out.limit()); // The server hung up on us: expected once it has answered.
                }
            }
            server.poll(echo);
            final TestClient.Read read = client.tryRead();
            if (read.line != null && line == null)
            {
                line = read.line;
            }
            ended = read.ended;
        }

        assertTrue(ended, "the server closes the connection after refusing an over-long line");
        final Map<String, Object> error = errorOf(parse(line));
        assertEquals(ErrorCode.BAD_REQUEST.name(), error.get("code"));
        assertTrue(String.valueOf(error.get("message")).contains(String.valueOf(ControlServer.MAX_LINE)),
            error.toString());
        assertTrue(ops.isEmpty());
        assertEquals(1, server.rejected());
    }

    @Test
    void shouldCreateSocketWithMode0660() throws IOException
    {
        final ControlServer server = server(socketPath());

        assertEquals(socketPath(), server.path());
        assertTrue(Files.exists(socketPath()));
        assertEquals(PosixFilePermissions.fromString("rw-rw----"), Files.getPosixFilePermissions(socketPath()));
    }

    @Test
    void shouldReplaceStaleSocketFile() throws IOException
    {
        Files.createDirectories(socketPath().getParent());
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX))
        {
            dead.bind(UnixDomainSocketAddress.of(socketPath()));
        }
        assertTrue(Files.exists(socketPath()), "a closed listener leaves its socket file behind");

        final ControlServer server = server(socketPath());
        final TestClient client = connect(socketPath());
        client.send("{\"id\": 1, \"op\": \"status\"}\n");

        assertEquals(Boolean.TRUE, parse(client.readLine(server, echo)).get("ok"));
    }

    @Test
    void shouldRefuseSecondServerOnLiveSocket() throws IOException
    {
        final ControlServer first = server(socketPath());

        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> new ControlServer(socketPath(), ""));

        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        assertTrue(ex.getMessage().contains("another blockmoverd is running"), ex.getMessage());
        assertTrue(Files.exists(socketPath()), "the live daemon keeps its socket");
        final TestClient client = connect(socketPath());
        client.send("{\"id\": 1, \"op\": \"status\"}\n");
        assertEquals(Boolean.TRUE, parse(client.readLine(first, echo)).get("ok"), "the first server still works");
    }

    @Test
    void shouldRemoveSocketFileOnClose() throws IOException
    {
        final ControlServer server = new ControlServer(socketPath(), "");
        final TestClient client = connect(socketPath());
        client.send("{\"id\": 1, \"op\": \"status\"}\n");
        parse(client.readLine(server, echo));

        server.close();

        assertFalse(Files.exists(socketPath()));
        assertNull(client.readLine(null, echo), "clients are disconnected");
    }

    /**
     * A client over a non-blocking socket that turns the server's crank while it waits for a reply.
     */
    private static final class TestClient
    {
        final SocketChannel channel;
        private final StringBuilder pending = new StringBuilder();
        private final ByteBuffer in = ByteBuffer.allocate(64 * 1024);

        record Read(String line, boolean ended)
        {
        }

        TestClient(final SocketChannel channel)
        {
            this.channel = channel;
        }

        void send(final String text) throws IOException
        {
            final ByteBuffer out = ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
            final long deadline = System.nanoTime() + DEADLINE_NS;
            while (out.hasRemaining())
            {
                channel.write(out);
                if (System.nanoTime() > deadline)
                {
                    fail("could not send the request in time");
                }
            }
        }

        Read tryRead()
        {
            final int newline = pending.indexOf("\n");
            if (newline >= 0)
            {
                final String line = pending.substring(0, newline);
                pending.delete(0, newline + 1);
                return new Read(line, false);
            }
            int n;
            try
            {
                in.clear();
                n = channel.read(in);
            }
            catch (final IOException ex)
            {
                n = -1; // Reset by the peer: the connection ended.
            }
            if (n > 0)
            {
                pending.append(new String(in.array(), 0, n, StandardCharsets.UTF_8));
                final int at = pending.indexOf("\n");
                if (at >= 0)
                {
                    final String line = pending.substring(0, at);
                    pending.delete(0, at + 1);
                    return new Read(line, false);
                }
            }
            return new Read(null, n < 0);
        }

        /**
         * @return the next reply line, or null when the connection ended first.
         */
        String readLine(final ControlServer server, final ControlServer.Handler handler)
        {
            final long deadline = System.nanoTime() + DEADLINE_NS;
            while (System.nanoTime() < deadline)
            {
                if (server != null)
                {
                    server.poll(handler);
                }
                final Read read = tryRead();
                if (read.line != null)
                {
                    return read.line;
                }
                if (read.ended)
                {
                    return null;
                }
                Thread.onSpinWait();
            }
            fail("no reply within " + TimeUnit.NANOSECONDS.toSeconds(DEADLINE_NS) + " s");
            return null;
        }
    }
}
