package io.blockmover.cli;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ConnectException;
import java.net.SocketException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import com.fasterxml.jackson.jr.ob.JSON;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

/**
 * The client side of the control socket: one JSON line out, one JSON line back. A missing daemon is reported
 * with how to start it.
 */
public final class ControlClient implements AutoCloseable
{
    /**
     * How long a query waits for its answer unless --timeout says otherwise. A query is answered at once by a
     * daemon that works; one that accepted the connection and says nothing is starting (checking its groups'
     * logs), or stuck: a script that asks for its status (a monitoring check from cron) must not wait for ever.
     */
    static final long QUERY_TIMEOUT_MS = 30_000;
    /**
     * Requests answered at once, which change nothing. The others wait without limit unless --timeout says
     * otherwise: a group create waits for the partner to accept, a switch for the partner to take over.
     */
    private static final Set<String> QUERIES = Set.of("ping", "status", "jobs", "job", "config", "groups",
        "group-status", "group-verify-status", "peer-show", "topology-status");
    private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor((task) ->
    {
        final Thread thread = new Thread(task, "control-timeout");
        thread.setDaemon(true);
        return thread;
    });

    private final SocketChannel channel;
    private final BufferedReader reader;
    private final long timeoutMs;
    private long nextId = 1;

    private ControlClient(final SocketChannel channel, final long timeoutMs)
    {
        this.channel = channel;
        this.timeoutMs = timeoutMs;
        this.reader = new BufferedReader(new InputStreamReader(Channels.newInputStream(channel),
            StandardCharsets.UTF_8));
    }

    /**
     * @param socket path of the daemon's control socket.
     * @return a connected client.
     * @throws BlockmoverException DAEMON_NOT_RUNNING or PERMISSION_DENIED with the fix.
     */
    public static ControlClient connect(final Path socket)
    {
        return connect(socket, -1);
    }

    /**
     * @param socket    path of the daemon's control socket.
     * @param timeoutMs how long every request waits for its answer; 0 for ever; -1 for the default
     *                  ({@link #QUERY_TIMEOUT_MS} for a query, for ever for the others).
     * @return a connected client.
     * @throws BlockmoverException DAEMON_NOT_RUNNING or PERMISSION_DENIED with the fix.
     */
    public static ControlClient connect(final Path socket, final long timeoutMs)
    {
        final String howToStart = "start it with 'systemctl start blockmoverd' (or scripts/blockmoverd --config " +
            "FILE), or point --socket / BLOCKMOVER_SOCKET at a running daemon's control socket";
        if (!Files.exists(socket))
        {
            throw new BlockmoverException(ErrorCode.DAEMON_NOT_RUNNING,
                "blockmoverd is not running: no control socket at " + socket + "; " + howToStart);
        }
        try
        {
            final SocketChannel channel = SocketChannel.open(StandardProtocolFamily.UNIX);
            channel.connect(UnixDomainSocketAddress.of(socket));
            return new ControlClient(channel, timeoutMs);
        }
        catch (final ConnectException ex)
        {
            throw new BlockmoverException(ErrorCode.DAEMON_NOT_RUNNING, "blockmoverd is not running: " + socket +
                " is a stale socket (nobody listens); " + howToStart);
        }
        catch (final AccessDeniedException ex)
        {
            throw new BlockmoverException(ErrorCode.PERMISSION_DENIED, "permission denied on " + socket +
                ": run as root or as a member of the daemon's control group");
        }
        catch (final SocketException ex)
        {
            final boolean denied = String.valueOf(ex.getMessage()).contains("Permission denied");
            throw new BlockmoverException(denied ? ErrorCode.PERMISSION_DENIED : ErrorCode.DAEMON_NOT_RUNNING,
                "cannot connect to " + socket + ": " + ex.getMessage() + (denied ? "" : "; " + howToStart));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.DAEMON_NOT_RUNNING, "cannot connect to " + socket + ": " +
                ex.getMessage());
        }
    }

    /**
     * Sends a request and waits for its reply.
     *
     * @param op   operation.
     * @param args arguments.
     * @return the result.
     * @throws BlockmoverException with the daemon's error code and message.
     */
    public Object call(final String op, final Map<String, Object> args)
    {
        final Map<String, Object> request = new LinkedHashMap<>();
        final long id = nextId++;
        request.put("id", id);
        request.put("op", op);
        request.put("args", args);
        final long waitMs = timeoutMs >= 0 ? timeoutMs : QUERIES.contains(op) ? QUERY_TIMEOUT_MS : 0;
        // Closing the channel is what ends a blocked read of it; the flag tells that close from the daemon's.
        final AtomicBoolean timedOut = new AtomicBoolean();
        final ScheduledFuture<?> timeout = waitMs == 0 ? null : TIMER.schedule(() ->
        {
            timedOut.set(true);
            close();
        }, waitMs, TimeUnit.MILLISECONDS);
        try
        {
            final byte[] bytes = JSON.std.asBytes(request);
            final ByteBuffer buffer = ByteBuffer.allocate(bytes.length + 1).put(bytes).put((byte)'\n').flip();
            while (buffer.hasRemaining())
            {
                channel.write(buffer);
            }
            final String line = reader.readLine();
            if (line == null)
            {
                throw new BlockmoverException(ErrorCode.DAEMON_NOT_RUNNING, timedOut.get() ? notAnswered(op, waitMs) :
                    unanswered(op, "closed"));
            }
            final Map<String, Object> reply = JSON.std.mapFrom(line);
            if (Boolean.TRUE.equals(reply.get("ok")))
            {
                return reply.get("result");
            }
            @SuppressWarnings("unchecked")
            final Map<String, Object> error = (Map<String, Object>)reply.get("error");
            throw new BlockmoverException(ErrorCode.parse(String.valueOf(error.get("code"))),
                String.valueOf(error.get("message")));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.DAEMON_NOT_RUNNING, timedOut.get() ? notAnswered(op, waitMs) :
                unanswered(op, "dropped (" + ex.getMessage() + ")"));
        }
        finally
        {
            if (timeout != null)
            {
                timeout.cancel(false);
            }
        }
    }

    /**
     * What to say when the daemon holds the connection and does not answer in time.
     */
    private static String notAnswered(final String op, final long waitMs)
    {
        return "blockmoverd did not answer '" + op + "' within " + Format.duration(waitMs / 1000.0) + ": it is " +
            "busy with a long step (checking a group's log of many GiB at a failover), or stuck (a hung disk " +
            "under its state directory?). Its log says which (journalctl -u blockmoverd); --timeout 0 waits " +
            "without limit" + (QUERIES.contains(op) ? "" : ". Whether '" + op + "' took effect is unknown: check " +
            "with 'blockmover status' once it answers");
    }

    /**
     * What to say when the daemon went away with a request unanswered: it may have stopped (a fatal error stops
     * it at once, as a crash would), and the request may or may not have been carried out.
     */
    private static String unanswered(final String op, final String how)
    {
        return "blockmoverd " + how + " the control connection before answering '" + op + "': did it stop? Its " +
            "log says why (journalctl -u blockmoverd). Whether '" + op + "' took effect is unknown: check with " +
            "'blockmover status' once it runs again";
    }

    /**
     * Reads the next line the daemon sends on its own after a subscription ({@code events}).
     *
     * @return the line, or null when the daemon closed the connection.
     */
    public String readLine()
    {
        try
        {
            return reader.readLine();
        }
        catch (final IOException ex)
        {
            return null;
        }
    }

    @Override
    public void close()
    {
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
