package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;

/**
 * An NBD server (newstyle fixed handshake; simple replies, structured ones for READ and BLOCK_STATUS where the
 * client asks for them, with the base:allocation context) on a Unix socket, a TCP address, or both.
 * <p>
 * Threads: one acceptor per listener, one watchdog, and per connection one reader plus
 * {@code workersPerConnection} workers (see {@link NbdConnection}), so requests of one connection run
 * concurrently and one client's faults or stalls reach no other client. The watchdog closes a connection whose
 * client has held up the handshake, a WRITE payload or the reading of a reply for longer than the I/O timeout;
 * an idle connection between requests is never timed out, as an attached block device may sit idle for days.
 * <p>
 * Negotiated with every client: minimum and preferred block size 4096 (O_DIRECT), maximum block size
 * {@code maxPayload}; requests must be 4096-aligned, except that a length may end in a shorter tail where the
 * request ends exactly at the export's size; anything else gets EINVAL. The empty export name means the only
 * export when there is exactly one.
 * <p>
 * Memory: each connection in transmission holds {@code workersPerConnection x maxPayload} bytes of aligned direct
 * memory (16 MiB with the defaults), allocated when it starts transmission and freed when it ends.
 * <p>
 * {@link #start()} and {@link #close()} are for the owning (conductor) thread; the counters may be read by any.
 */
public final class NbdServer implements AutoCloseable
{
    public static final int DEFAULT_WORKERS_PER_CONNECTION = 4;
    public static final int DEFAULT_MAX_PAYLOAD = 4 * 1024 * 1024;
    /** The largest request the NBD spec lets clients assume without negotiation is 32 MiB. */
    public static final int MAX_MAX_PAYLOAD = 32 * 1024 * 1024;
    public static final long DEFAULT_IO_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(30);

    private static final long WATCHDOG_PERIOD_MS = 200;
    private static final long JOIN_TIMEOUT_MS = 10_000;

    private final NbdExports exports;
    private final Path unixSocket;
    private final InetSocketAddress tcpAddress;
    private final int workersPerConnection;
    private final int maxPayload;
    private final long ioTimeoutNs;
    private final System.Logger logger;

    private final Set<NbdConnection> connections = ConcurrentHashMap.newKeySet();
    private final CountDownLatch stopping = new CountDownLatch(1);
    private final AtomicLong connectionIds = new AtomicLong();
    private final AtomicLong connectionsAccepted = new AtomicLong();
    private final AtomicLong requests = new AtomicLong();
    private final AtomicLong bytesRead = new AtomicLong();
    private final AtomicLong bytesWritten = new AtomicLong();
    private final AtomicLong errors = new AtomicLong();
    private final AtomicLong directRequests = new AtomicLong();
    private final AtomicLong directSubmissions = new AtomicLong();
    private final AtomicLong protocolErrors = new AtomicLong();
    private final AtomicLong timeouts = new AtomicLong();

    private volatile boolean running;
    private ServerSocketChannel unixServer;
    private ServerSocketChannel tcpServer;
    private Thread unixAcceptor;
    private Thread tcpAcceptor;
    private Thread watchdog;

    /**
     * With the default I/O timeout.
     *
     * @param exports              offered to clients.
     * @param unixSocket           path of a Unix socket to listen on, or null.
     * @param tcpAddress           TCP address to listen on (port 0 picks one), or null.
     * @param workersPerConnection concurrent requests per connection.
     * @param maxPayload           largest READ or WRITE, a multiple of 4096.
     * @param logger               for lifecycle lines.
     */
    public NbdServer(
        final NbdExports exports,
        final Path unixSocket,
        final InetSocketAddress tcpAddress,
        final int workersPerConnection,
        final int maxPayload,
        final System.Logger logger)
    {
        this(exports, unixSocket, tcpAddress, workersPerConnection, maxPayload, DEFAULT_IO_TIMEOUT_NS, logger);
    }

    /**
     * @param exports              offered to clients.
     * @param unixSocket           path of a Unix socket to listen on, or null.
     * @param tcpAddress           TCP address to listen on (port 0 picks one), or null.
     * @param workersPerConnection concurrent requests per connection.
     * @param maxPayload           largest READ or WRITE, a multiple of 4096.
     * @param ioTimeoutNs          longest a client may stall a handshake, payload or reply.
     * @param logger               for lifecycle lines.
     */
    public NbdServer(
        final NbdExports exports,
        final Path unixSocket,
        final InetSocketAddress tcpAddress,
        final int workersPerConnection,
        final int maxPayload,
        final long ioTimeoutNs,
        final System.Logger logger)
    {
        if (unixSocket == null && tcpAddress == null)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID,
                "the NBD server needs a Unix socket path, a TCP address, or both");
        }
        if (workersPerConnection < 1 || workersPerConnection > 64)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "NBD workers per connection " +
                workersPerConnection + " is not in 1..64");
        }
        if (maxPayload < Slab.ALIGNMENT || maxPayload > MAX_MAX_PAYLOAD || maxPayload % Slab.ALIGNMENT != 0)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "NBD max payload " + maxPayload +
                " is not a multiple of " + Slab.ALIGNMENT + " between " + Slab.ALIGNMENT + " and " + MAX_MAX_PAYLOAD);
        }
        if (ioTimeoutNs <= 0)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "NBD I/O timeout must be positive");
        }
        this.exports = exports;
        this.unixSocket = unixSocket;
        this.tcpAddress = tcpAddress;
        this.workersPerConnection = workersPerConnection;
        this.maxPayload = maxPayload;
        this.ioTimeoutNs = ioTimeoutNs;
        this.logger = logger;
    }

    /**
     * Binds the listeners and starts accepting. A stale Unix socket file from a dead server is replaced; a live
     * server on the same path makes start fail.
     */
    public void start()
    {
        if (running)
        {
            throw new IllegalStateException("NBD server already started");
        }
        try
        {
            if (unixSocket != null)
            {
                final Path dir = unixSocket.toAbsolutePath().getParent();
                if (!Files.isDirectory(dir))
                {
                    Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(
                        PosixFilePermissions.fromString("rwxrwx---")));
                }
                removeStale(unixSocket);
                unixServer = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
                unixServer.bind(UnixDomainSocketAddress.of(unixSocket));
                Files.setPosixFilePermissions(unixSocket, PosixFilePermissions.fromString("rw-rw----"));
            }
            if (tcpAddress != null)
            {
                tcpServer = ServerSocketChannel.open(StandardProtocolFamily.INET);
                tcpServer.setOption(StandardSocketOptions.SO_REUSEADDR, true);
                tcpServer.bind(tcpAddress);
            }
        }
        catch (final IOException ex)
        {
            closeListeners();
            if (unixServer != null)
            {
                try
                {
                    Files.deleteIfExists(unixSocket);
                }
                catch (final IOException deleteEx)
                {
                    ex.addSuppressed(deleteEx);
                }
            }
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot listen for NBD on " +
                (unixSocket != null ? unixSocket : "") + (tcpAddress != null ? " " + tcpAddress : "") + ": " +
                ex.getMessage() + " (check nbd.socket / nbd.address and the directory's permissions)", ex);
        }
        running = true;
        if (unixServer != null)
        {
            unixAcceptor = new Thread(() -> accept(unixServer, false), "nbd-accept-unix");
            unixAcceptor.setDaemon(true);
            unixAcceptor.start();
        }
        if (tcpServer != null)
        {
            tcpAcceptor = new Thread(() -> accept(tcpServer, true), "nbd-accept-tcp");
            tcpAcceptor.setDaemon(true);
            tcpAcceptor.start();
        }
        watchdog = new Thread(this::watch, "nbd-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        logger.log(System.Logger.Level.INFO, "NBD server listening on {0}{1}, {2} workers per connection, " +
            "max payload {3} bytes", unixSocket != null ? "unix:" + unixSocket : "",
            tcpServer != null ? " tcp:" + tcpAddress() : "", workersPerConnection, maxPayload);
    }

    private static void removeStale(final Path path) throws IOException
    {
        if (!Files.exists(path))
        {
            return;
        }
        try (SocketChannel probe = SocketChannel.open(UnixDomainSocketAddress.of(path)))
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "an NBD server is already listening on " +
                path + ": stop it first, or give this one another nbd.socket");
        }
        catch (final ConnectException ex)
        {
            Files.delete(path); // Nobody listens: a server died without removing it.
        }
    }

    private void accept(final ServerSocketChannel server, final boolean tcp)
    {
        while (running)
        {
            final SocketChannel channel;
            try
            {
                channel = server.accept();
            }
            catch (final ClosedChannelException ex)
            {
                return;
            }
            catch (final IOException ex)
            {
                if (!running)
                {
                    return;
                }
                protocolErrors.incrementAndGet();
                logger.log(System.Logger.Level.WARNING, "NBD accept failed: {0}", ex);
                awaitStop(100); // Out of file descriptors, say: do not spin.
                continue;
            }
            String peer = tcp ? "tcp" : "unix";
            try
            {
                if (tcp)
                {
                    channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
                    peer = String.valueOf(channel.getRemoteAddress());
                }
            }
            catch (final IOException ex)
            {
                logger.log(System.Logger.Level.DEBUG, "NBD peer setup failed: {0}", ex);
            }
            final NbdConnection connection = new NbdConnection(this, connectionIds.incrementAndGet(), channel, peer);
            connectionsAccepted.incrementAndGet();
            connections.add(connection);
            connection.start();
        }
    }

    private void watch()
    {
        while (!awaitStop(WATCHDOG_PERIOD_MS))
        {
            final long nowNs = System.nanoTime();
            for (final NbdConnection connection : connections)
            {
                if (connection.deadlineExpired(nowNs))
                {
                    timeouts.incrementAndGet();
                    logger.log(System.Logger.Level.WARNING, "{0}: client stalled for more than {1} ms, closing",
                        connection.name(), TimeUnit.NANOSECONDS.toMillis(ioTimeoutNs));
                    connection.close();
                }
            }
        }
    }

    private boolean awaitStop(final long timeoutMs)
    {
        try
        {
            return stopping.await(timeoutMs, TimeUnit.MILLISECONDS);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            return true;
        }
    }

    /**
     * @return the bound TCP address (with the port picked), or null without TCP.
     */
    public InetSocketAddress tcpAddress()
    {
        try
        {
            return tcpServer == null ? null : (InetSocketAddress)tcpServer.getLocalAddress();
        }
        catch (final IOException ex)
        {
            return null;
        }
    }

    public Path unixSocket()
    {
        return unixSocket;
    }

    NbdExports exports()
    {
        return exports;
    }

    int workersPerConnection()
    {
        return workersPerConnection;
    }

    int maxPayload()
    {
        return maxPayload;
    }

    long ioTimeoutNs()
    {
        return ioTimeoutNs;
    }

    System.Logger logger()
    {
        return logger;
    }

    void connectionClosed(final NbdConnection connection)
    {
        connections.remove(connection);
    }

    void request()
    {
        requests.incrementAndGet();
    }

    void bytesRead(final long bytes)
    {
        bytesRead.addAndGet(bytes);
    }

    void bytesWritten(final long bytes)
    {
        bytesWritten.addAndGet(bytes);
    }

    /**
     * @param count READs and WRITEs handed to the kernel in one io_submit.
     */
    void directSubmission(final int count)
    {
        directRequests.addAndGet(count);
        directSubmissions.incrementAndGet();
    }

    void error()
    {
        errors.incrementAndGet();
    }

    void protocolError()
    {
        protocolErrors.incrementAndGet();
    }

    /**
     * @return transmission requests received, NBD_CMD_DISC included.
     */
    public long requests()
    {
        return requests.get();
    }

    public long bytesRead()
    {
        return bytesRead.get();
    }

    public long bytesWritten()
    {
        return bytesWritten.get();
    }

    /**
     * @return READs and WRITEs submitted through Linux AIO rather than run by a worker or the reader.
     */
    public long directRequests()
    {
        return directRequests.get();
    }

    /**
     * @return io_submit calls that carried {@link #directRequests()}: their ratio is the batch the kernel saw.
     */
    public long directSubmissions()
    {
        return directSubmissions.get();
    }

    /**
     * @return requests answered with an error (refused or failed).
     */
    public long errors()
    {
        return errors.get();
    }

    /**
     * @return connections closed for breaking the protocol (bad magic, bad handshake, unknown export).
     */
    public long protocolErrors()
    {
        return protocolErrors.get();
    }

    /**
     * @return connections closed by the watchdog for stalling.
     */
    public long timeouts()
    {
        return timeouts.get();
    }

    public long connectionsAccepted()
    {
        return connectionsAccepted.get();
    }

    /**
     * @return connections open now.
     */
    public int connections()
    {
        return connections.size();
    }

    /**
     * Stops listening, closes every connection, joins every thread and removes the socket file.
     */
    @Override
    public void close()
    {
        running = false;
        stopping.countDown();
        closeListeners();
        try
        {
            join(unixAcceptor);
            join(tcpAcceptor);
            for (final NbdConnection connection : connections)
            {
                connection.close();
            }
            for (final NbdConnection connection : connections)
            {
                connection.join(JOIN_TIMEOUT_MS);
            }
            join(watchdog);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
        }
        if (unixServer != null)
        {
            try
            {
                Files.deleteIfExists(unixSocket);
            }
            catch (final IOException ex)
            {
                throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot remove NBD socket " + unixSocket + ": " +
                    ex, ex);
            }
        }
        logger.log(System.Logger.Level.INFO, "NBD server stopped: {0} connections, {1} requests ({2} submitted " +
            "to the kernel in {3} batches), {4} errors", connectionsAccepted.get(), requests.get(),
            directRequests.get(), directSubmissions.get(), errors.get());
    }

    private static void join(final Thread thread) throws InterruptedException
    {
        if (thread != null)
        {
            thread.join(JOIN_TIMEOUT_MS);
        }
    }

    private void closeListeners()
    {
        closeQuietly(unixServer);
        closeQuietly(tcpServer);
    }

    private void closeQuietly(final ServerSocketChannel server)
    {
        if (server != null)
        {
            try
            {
                server.close();
            }
            catch (final IOException ex)
            {
                logger.log(System.Logger.Level.DEBUG, "NBD listener close failed: {0}", ex);
            }
        }
    }
}
