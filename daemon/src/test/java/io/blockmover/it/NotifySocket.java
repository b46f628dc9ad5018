package io.blockmover.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Predicate;

import com.sun.jna.LastErrorException;
import com.sun.jna.Native;

/**
 * A Unix datagram socket the test owns, standing in for systemd's NOTIFY_SOCKET: it receives what the daemon
 * sends with sd_notify. Java has no Unix datagram channel, so it is libc's socket, bind and recv through JNA.
 * Messages are kept in arrival order; {@link #await} returns the first one after a cursor that matches, so a
 * test can check their order (RELOADING=1 before READY=1). A thread drains the socket all the time, as systemd
 * does: libsystemd's sd_notify blocks when the receiver's queue is full, which would stall the daemon's conductor.
 */
final class NotifySocket implements AutoCloseable
{
    private static final int AF_UNIX = 1;
    private static final int SOCK_DGRAM = 2;
    private static final int SOL_SOCKET = 1;
    private static final int SO_RCVTIMEO = 20;

    static
    {
        Native.register(NotifySocket.class, "c");
    }

    final Path path;
    private final int fd;
    private final List<String> messages = new ArrayList<>();
    private final Thread reader;
    private volatile boolean running = true;
    private int cursor;

    NotifySocket(final Path path) throws Exception
    {
        this.path = path;
        Files.deleteIfExists(path);
        fd = socket(AF_UNIX, SOCK_DGRAM, 0);
        final byte[] name = path.toString().getBytes(StandardCharsets.UTF_8);
        final byte[] address = new byte[110];
        address[0] = AF_UNIX; // sa_family_t, little endian
        System.arraycopy(name, 0, address, 2, name.length);
        bind(fd, address, 2 + name.length + 1);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, new long[] {0, 200_000}, 16); // struct timeval: 200 ms
        reader = new Thread(() ->
        {
            while (running)
            {
                receive();
            }
        }, "notify-socket");
        reader.setDaemon(true);
        reader.start();
    }

    /**
     * @param what      for the failure message.
     * @param timeoutMs how long to wait.
     * @param matches   the message wanted.
     * @return the first message after the cursor that matches; the cursor moves past it.
     */
    String await(final String what, final long timeoutMs, final Predicate<String> matches)
    {
        final long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (true)
        {
            synchronized (messages)
            {
                for (int i = cursor; i < messages.size(); i++)
                {
                    if (matches.test(messages.get(i)))
                    {
                        cursor = i + 1;
                        return messages.get(i);
                    }
                }
                if (System.nanoTime() > deadline)
                {
                    throw new AssertionError("no sd_notify message " + what + " within " + timeoutMs + " ms; " +
                        "received since the last match: " + messages.subList(cursor, messages.size()));
                }
            }
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        }
    }

    private void receive()
    {
        final byte[] buffer = new byte[4096];
        try
        {
            final long length = recv(fd, buffer, buffer.length, 0);
            synchronized (messages)
            {
                messages.add(new String(buffer, 0, (int)length, StandardCharsets.UTF_8));
            }
        }
        catch (final LastErrorException ex)
        {
            if (ex.getErrorCode() != 11) // EAGAIN: the 200 ms receive timeout passed
            {
                throw ex;
            }
        }
    }

    /**
     * Stops the reader (it notices within its 200 ms receive timeout), then closes the socket. Interrupted
     * meanwhile, it still waits, so the socket is never closed under the reader, and keeps the interrupt.
     */
    @Override
    public void close() throws IOException
    {
        running = false;
        boolean interrupted = false;
        while (reader.isAlive())
        {
            try
            {
                reader.join();
            }
            catch (final InterruptedException ex)
            {
                interrupted = true;
            }
        }
        close(fd);
        Files.deleteIfExists(path);
        if (interrupted)
        {
            Thread.currentThread().interrupt();
        }
    }

    private static native int socket(int domain, int type, int protocol) throws LastErrorException;

    private static native int bind(int fd, byte[] address, int length) throws LastErrorException;

    private static native int setsockopt(int fd, int level, int name, long[] value, int length)
        throws LastErrorException;

    private static native long recv(int fd, byte[] buffer, long length, int flags) throws LastErrorException;

    private static native int close(int fd);
}
