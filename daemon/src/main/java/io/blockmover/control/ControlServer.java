package io.blockmover.control;

import java.io.IOException;
import java.net.ConnectException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import jdk.net.ExtendedSocketOptions;
import jdk.net.UnixDomainPrincipal;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

/**
 * The control socket: a Unix stream socket (mode 0660) carrying JSON lines, one request and one reply each:
 * <pre>
 *   request: {"id": 7, "op": "copy", "args": {...}}
 *   reply:   {"id": 7, "ok": true, "result": {...}}
 *            {"id": 7, "ok": false, "error": {"code": "VOLUME_TOO_SMALL", "message": "..."}}
 * </pre>
 * Callers are admitted by their peer credentials: root, the daemon's own user, or a member (by primary group) of
 * {@code control.group}. A stale socket file from a dead daemon is replaced; a live daemon on the same path
 * makes start-up fail. Conductor thread only; non-blocking.
 */
public final class ControlServer implements AutoCloseable
{
    /** Longest request line accepted. */
    public static final int MAX_LINE = 64 * 1024;

    /**
     * Receives parsed requests.
     */
    public interface Handler
    {
        /**
         * @param client to reply to, now or later.
         * @param id     the request's id.
         * @param op     operation.
         * @param args   arguments (never null).
         */
        void onRequest(Client client, Object id, String op, Map<String, Object> args);
    }

    private final Path path;
    private final ServerSocketChannel server;
    private final String allowedGroup;
    private final String ownUser = System.getProperty("user.name");
    private final List<Client> clients = new ArrayList<>();
    private Selector selector;
    private long rejected;

    /**
     * Binds the socket, replacing a stale one.
     *
     * @param path         of the socket.
     * @param allowedGroup group admitted besides root and our user; empty for none.
     */
    public ControlServer(final Path path, final String allowedGroup)
    {
        this.path = path;
        this.allowedGroup = allowedGroup;
        try
        {
            final Path dir = path.toAbsolutePath().getParent();
            if (!Files.isDirectory(dir))
            {
                Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(
                    PosixFilePermissions.fromString("rwxrwx---")));
            }
            removeStale(path);
            server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
            server.bind(UnixDomainSocketAddress.of(path));
            server.configureBlocking(false);
            Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("rw-rw----"));
            if (!allowedGroup.isEmpty())
            {
                final GroupPrincipal group =
                    path.getFileSystem().getUserPrincipalLookupService().lookupPrincipalByGroupName(allowedGroup);
                Files.setAttribute(path, "posix:group", group);
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot create control socket " + path + ": " +
                ex.getMessage() + " (check control.socket, control.group and the directory's permissions)", ex);
        }
    }

    private static void removeStale(final Path path) throws IOException
    {
        if (!Files.exists(path))
        {
            return;
        }
        try (SocketChannel probe = SocketChannel.open(UnixDomainSocketAddress.of(path)))
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "another blockmoverd is running on control " +
                "socket " + path + ": stop it first, or give this one another control.socket");
        }
        catch (final ConnectException ex)
        {
            Files.delete(path); // Nobody listens: a daemon died without removing it.
        }
    }

    public Path path()
    {
        return path;
    }

    /**
     * Registers the socket and every client from now on with a selector, so the owner can sleep until a
     * request arrives instead of polling.
     *
     * @param selector of the owner's thread.
     * @throws IOException when registration fails.
     */
    public void register(final Selector selector) throws IOException
    {
        this.selector = selector;
        server.register(selector, SelectionKey.OP_ACCEPT);
    }

    /**
     * @return requests refused for credentials or malformed input since start.
     */
    public long rejected()
    {
        return rejected;
    }

    /**
     * Accepts, reads, dispatches and writes whatever can be done now.
     *
     * @param handler of requests.
     * @return work done.
     */
    public int poll(final Handler handler)
    {
        int work = 0;
        try
        {
            SocketChannel channel;
            while ((channel = server.accept()) != null)
            {
                channel.configureBlocking(false);
                if (selector != null)
                {
                    channel.register(selector, SelectionKey.OP_READ);
                }
                final Client client = new Client(channel);
                clients.add(client);
                work++;
                if (!admit(channel))
                {
                    rejected++;
                    client.error(null, ErrorCode.PERMISSION_DENIED, "not allowed to use " + path + ": run as root, " +
                        "as the daemon's user" + (allowedGroup.isEmpty() ? "" : ", or with primary group " +
                        allowedGroup));
                    client.closeAfterWrite = true;
                }
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.INTERNAL, "control socket accept failed: " + ex, ex);
        }
        for (final Iterator<Client> it = clients.iterator(); it.hasNext();)
        {
            final Client client = it.next();
            work += client.poll(handler);
            if (client.closed)
            {
                it.remove();
            }
        }
        return work;
    }

    private boolean admit(final SocketChannel channel)
    {
        try
        {
            final UnixDomainPrincipal peer = channel.getOption(ExtendedSocketOptions.SO_PEERCRED);
            final String user = peer.user().getName();
            return user.equals("root") || user.equals("0") || user.equals(ownUser) ||
                (!allowedGroup.isEmpty() && peer.group().getName().equals(allowedGroup));
        }
        catch (final IOException | UnsupportedOperationException ex)
        {
            return false;
        }
    }

    @Override
    public void close()
    {
        for (final Client client : clients)
        {
            client.close();
        }
        clients.clear();
        try
        {
            server.close();
            Files.deleteIfExists(path);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot remove control socket " + path + ": " + ex, ex);
        }
    }

    /**
     * One connected client. Replies may be sent later (a copy replies once the peer has opened the volume).
     */
    public final class Client
    {
        private final SocketChannel channel;
        private final ByteBuffer in = ByteBuffer.allocate(MAX_LINE);
        private final ArrayDeque<ByteBuffer> out = new ArrayDeque<>();
        private boolean closeAfterWrite;
        private boolean closed;
        private long queuedBytes;

        Client(final SocketChannel channel)
        {
            this.channel = channel;
        }

        public boolean isClosed()
        {
            return closed;
        }

        /**
         * @param id     of the request.
         * @param result of the request.
         */
        public void reply(final Object id, final Object result)
        {
            final Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("id", id);
            reply.put("ok", true);
            reply.put("result", result);
            send(reply);
        }

        /**
         * @param id      of the request.
         * @param code    stable error code.
         * @param message for the operator, naming the fix.
         */
        public void error(final Object id, final ErrorCode code, final String message)
        {
            final Map<String, Object> error = new LinkedHashMap<>();
            error.put("code", code.name());
            error.put("message", message);
            final Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("id", id);
            reply.put("ok", false);
            reply.put("error", error);
            send(reply);
        }

        /**
         * Queues a line that is already encoded (a JSON object and its newline), e.g. an event shared by every
         * subscriber: the bytes are written as they are and never modified.
         *
         * @param line to send.
         */
        public void sendLine(final byte[] line)
        {
            if (closed)
            {
                return;
            }
            out.add(ByteBuffer.wrap(line));
            queuedBytes += line.length;
            try
            {
                flush();
            }
            catch (final IOException ex)
            {
                close();
            }
        }

        /**
         * @return bytes queued for this client and not yet taken by it (a stream's back-pressure).
         */
        public long pendingBytes()
        {
            return queuedBytes;
        }

        /**
         * Closes the connection once everything queued is written: the end of a stream.
         */
        public void closeAfterFlush()
        {
            closeAfterWrite = true;
            if (out.isEmpty())
            {
                close();
            }
        }

        private void send(final Map<String, Object> reply)
        {
            if (closed)
            {
                return;
            }
            try
            {
                final byte[] bytes = JSON.std.asBytes(reply);
                final ByteBuffer buffer = ByteBuffer.allocate(bytes.length + 1);
                buffer.put(bytes).put((byte)'\n').flip();
                out.add(buffer);
                queuedBytes += buffer.remaining();
                flush();
            }
            catch (final IOException ex)
            {
                close();
            }
        }

        private void flush() throws IOException
        {
            while (!out.isEmpty())
            {
                final ByteBuffer head = out.peek();
                queuedBytes -= channel.write(head);
                if (head.hasRemaining())
                {
                    interest(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                    return;
                }
                out.poll();
            }
            interest(SelectionKey.OP_READ);
            if (closeAfterWrite)
            {
                close();
            }
        }

        private void interest(final int ops)
        {
            final SelectionKey key = selector == null ? null : channel.keyFor(selector);
            if (key != null && key.isValid() && key.interestOps() != ops)
            {
                key.interestOps(ops);
            }
        }

        int poll(final Handler handler)
        {
            if (closed)
            {
                return 0;
            }
            int work = 0;
            try
            {
                flush();
                if (closed || closeAfterWrite)
                {
                    return work;
                }
                final int n = channel.read(in);
                if (n < 0)
                {
                    close();
                    return work;
                }
                work += n > 0 ? 1 : 0;
                in.flip();
                int lineStart = 0;
                for (int i = in.position(); i < in.limit(); i++)
                {
                    if (in.get(i) == '\n')
                    {
                        final String line = new String(in.array(), lineStart, i - lineStart, StandardCharsets.UTF_8);
                        lineStart = i + 1;
                        dispatch(line.trim(), handler);
                        work++;
                    }
                }
                in.position(lineStart);
                in.compact();
                if (!in.hasRemaining())
                {
                    rejected++;
                    error(null, ErrorCode.BAD_REQUEST, "request longer than " + MAX_LINE + " bytes");
                    closeAfterWrite = true;
                    in.clear();
                }
            }
            catch (final IOException ex)
            {
                close();
            }
            return work;
        }

        private void dispatch(final String line, final Handler handler)
        {
            if (line.isEmpty())
            {
                return;
            }
            final Object parsed;
            try
            {
                parsed = JSON.std.anyFrom(line);
            }
            catch (final IOException ex)
            {
                rejected++;
                error(null, ErrorCode.BAD_REQUEST, "malformed JSON request: " + ex.getMessage().split("\n")[0]);
                return;
            }
            if (!(parsed instanceof Map<?, ?> request) || !(request.get("op") instanceof String op))
            {
                rejected++;
                error(null, ErrorCode.BAD_REQUEST, "a request is a JSON object with a string \"op\"");
                return;
            }
            final Object args = request.get("args");
            if (args != null && !(args instanceof Map))
            {
                rejected++;
                error(request.get("id"), ErrorCode.BAD_REQUEST, "\"args\" must be a JSON object");
                return;
            }
            @SuppressWarnings("unchecked")
            final Map<String, Object> argMap = args == null ? Map.of() : (Map<String, Object>)args;
            handler.onRequest(this, request.get("id"), op, argMap);
        }

        void close()
        {
            closed = true;
            try
            {
                channel.close();
            }
            catch (final IOException ex)
            {
                return;
            }
        }
    }
}
