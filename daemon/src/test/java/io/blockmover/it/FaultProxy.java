package io.blockmover.it;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A TCP proxy on loopback that forwards a peer link and flips one bit every {@code flipEveryBytes} bytes of the
 * forward direction, at a random position: a damaged link, for real, between two real daemons. It can also reset
 * the first connections once the dialling side has sent something (see {@link #resetFirst}).
 */
final class FaultProxy implements AutoCloseable
{
    private final ServerSocket server;
    private final long flipEveryBytes;
    private final long reverseFlipEveryBytes;
    private final AtomicLong reverseFlips = new AtomicLong();
    private final AtomicLong flips = new AtomicLong();
    // Bytes left before the next flip, per direction, carried from one connection to the next (-1: none yet). A
    // schedule that started over with each connection, seeded alike, never reached its first reverse flip when
    // every session ended before carrying that many bytes back: FaultIT waited for reverse flips until it timed out.
    private final AtomicLong untilFlip = new AtomicLong(-1);
    private final AtomicLong untilReverseFlip = new AtomicLong(-1);
    private final AtomicLong connections = new AtomicLong();
    private final List<Socket> sockets = new ArrayList<>();
    private volatile InetSocketAddress target;
    private final AtomicLong resets = new AtomicLong();
    private volatile int resetsLeft;
    private volatile boolean closed;

    FaultProxy(final long flipEveryBytes) throws IOException
    {
        this(flipEveryBytes, 0);
    }

    /**
     * @param flipEveryBytes        average distance between flipped bits from the dialling side to the target.
     * @param reverseFlipEveryBytes the same for the replies, or 0 to leave them whole.
     */
    FaultProxy(final long flipEveryBytes, final long reverseFlipEveryBytes) throws IOException
    {
        this.flipEveryBytes = flipEveryBytes;
        this.reverseFlipEveryBytes = reverseFlipEveryBytes;
        this.server = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
        final Thread acceptor = new Thread(this::acceptLoop, "fault-proxy-accept");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    int port()
    {
        return server.getLocalPort();
    }

    void target(final String hostPort)
    {
        final int colon = hostPort.lastIndexOf(':');
        target = new InetSocketAddress(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1)));
    }

    /**
     * The next {@code count} connections are reset (RST, not a clean close) as soon as the dialling side's first
     * bytes arrive, without reaching the target: a handshake broken after the connection was made.
     */
    void resetFirst(final int count)
    {
        resetsLeft = count;
    }

    long resets()
    {
        return resets.get();
    }

    long flips()
    {
        return flips.get();
    }

    long reverseFlips()
    {
        return reverseFlips.get();
    }

    private void acceptLoop()
    {
        while (!closed)
        {
            try
            {
                final Socket client = server.accept();
                if (resetsLeft > 0)
                {
                    resetsLeft--;
                    resetOnceHeard(client);
                    continue;
                }
                final Socket upstream = new Socket();
                upstream.connect(target, 5000);
                // As the daemons do: with Nagle, each small frame (a record of a QD1 writer, its ACK) could wait
                // for the previous one's delayed ACK, tens of milliseconds each.
                client.setTcpNoDelay(true);
                upstream.setTcpNoDelay(true);
                synchronized (sockets)
                {
                    sockets.add(client);
                    sockets.add(upstream);
                }
                final long connection = connections.incrementAndGet();
                pump(client, upstream, flipEveryBytes, flips, untilFlip, 2 * connection);
                pump(upstream, client, reverseFlipEveryBytes, reverseFlips, untilReverseFlip, 2 * connection + 1);
            }
            catch (final IOException ex)
            {
                if (closed)
                {
                    return;
                }
            }
        }
    }

    private void resetOnceHeard(final Socket client)
    {
        try (client)
        {
            client.setSoTimeout(10_000);
            client.getInputStream().read(new byte[1]);
            client.setSoLinger(true, 0);
            resets.incrementAndGet();
        }
        catch (final IOException ex)
        {
            return;
        }
    }

    private void pump(final Socket from, final Socket to, final long every, final AtomicLong counter,
        final AtomicLong carried, final long seed)
    {
        final Thread thread = new Thread(() ->
        {
            final SplittableRandom random = new SplittableRandom(seed);
            final boolean damage = every > 0;
            final long left = carried.get();
            long untilFlip = !damage ? Long.MAX_VALUE : left >= 0 ? left : every / 2 + random.nextLong(every);
            final byte[] buffer = new byte[64 * 1024];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream())
            {
                int n;
                while ((n = in.read(buffer)) > 0)
                {
                    while (damage && untilFlip < n)
                    {
                        buffer[(int)untilFlip] ^= (byte)(1 << random.nextInt(8));
                        counter.incrementAndGet();
                        untilFlip += every / 2 + random.nextLong(every);
                    }
                    untilFlip -= n;
                    if (damage)
                    {
                        carried.set(untilFlip);
                    }
                    out.write(buffer, 0, n);
                }
            }
            catch (final IOException ex)
            {
                // One side closed: close the other so the daemons see the link end.
                closeQuietly(to);
                closeQuietly(from);
            }
            closeQuietly(to);
        }, "fault-proxy-pump");
        thread.setDaemon(true);
        thread.start();
    }

    private static void closeQuietly(final Socket socket)
    {
        try
        {
            socket.close();
        }
        catch (final IOException ex)
        {
            return;
        }
    }

    @Override
    public void close() throws IOException
    {
        closed = true;
        server.close();
        synchronized (sockets)
        {
            sockets.forEach(FaultProxy::closeQuietly);
        }
    }
}
