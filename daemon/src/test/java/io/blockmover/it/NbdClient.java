package io.blockmover.it;

import java.io.EOFException;
import java.io.IOException;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import io.blockmover.frontend.nbd.NbdProtocol;

/**
 * A small blocking NBD client over a Unix socket for the integration tests: fixed newstyle handshake, NBD_OPT_GO,
 * then one request at a time (QD1), so the test knows exactly which writes were acknowledged. It can also send
 * raw bytes, garbage included. One thread at a time; {@link #close()} from another thread unblocks a waiting call.
 *
 * <pre>
 * request:  u32 magic | u16 flags | u16 type | u64 cookie | u64 offset | u32 length | [payload]
 * reply:    u32 magic | u32 error | u64 cookie | [data of a successful READ]
 * </pre>
 */
final class NbdClient implements AutoCloseable
{
    /** {@link #awaitAnswer(long)}: the server closed the connection. */
    static final int CLOSED = -1;

    private final SocketChannel channel;
    private final ByteBuffer header = ByteBuffer.allocate(NbdProtocol.REQUEST_LENGTH);
    private final long size;
    private long cookie;

    private NbdClient(final SocketChannel channel, final long size)
    {
        this.channel = channel;
        this.size = size;
    }

    /**
     * Connects and selects an export with NBD_OPT_GO.
     *
     * @param socket the NBD server's Unix socket.
     * @param export the export name, e.g. "group/vol0.img".
     * @return the client, in the transmission phase.
     * @throws IOException when the server refuses the export (the message has the reply type) or the socket fails.
     */
    static NbdClient connect(final Path socket, final String export) throws IOException
    {
        final SocketChannel channel = SocketChannel.open(UnixDomainSocketAddress.of(socket));
        try
        {
            final ByteBuffer hello = readExactly(channel, 18);
            if (hello.getLong(0) != NbdProtocol.NBDMAGIC || hello.getLong(8) != NbdProtocol.IHAVEOPT)
            {
                throw new IOException("not an NBD newstyle server");
            }
            writeFully(channel, ByteBuffer.allocate(4)
                .putInt(NbdProtocol.FLAG_C_FIXED_NEWSTYLE | NbdProtocol.FLAG_C_NO_ZEROES).flip());
            final byte[] name = export.getBytes(StandardCharsets.UTF_8);
            final ByteBuffer go = ByteBuffer.allocate(16 + 4 + name.length + 2);
            go.putLong(NbdProtocol.IHAVEOPT).putInt(NbdProtocol.OPT_GO).putInt(4 + name.length + 2)
                .putInt(name.length).put(name).putShort((short)0).flip();
            writeFully(channel, go);
            long size = -1;
            while (true)
            {
                final ByteBuffer reply = readExactly(channel, 20);
                final int type = reply.getInt(12);
                final ByteBuffer data = readExactly(channel, reply.getInt(16));
                if (type == NbdProtocol.REP_ACK)
                {
                    break;
                }
                if (type < 0)
                {
                    throw new IOException("NBD_OPT_GO " + export + " refused: reply type 0x" +
                        Integer.toHexString(type) + " " + StandardCharsets.UTF_8.decode(data));
                }
                if (type == NbdProtocol.REP_INFO && data.getShort(0) == NbdProtocol.INFO_EXPORT)
                {
                    size = data.getLong(2);
                }
            }
            return new NbdClient(channel, size);
        }
        catch (final IOException | RuntimeException ex)
        {
            channel.close();
            throw ex;
        }
    }

    long size()
    {
        return size;
    }

    /**
     * @return the NBD error of the reply (0: acknowledged).
     */
    int write(final long offset, final byte[] data) throws IOException
    {
        request(NbdProtocol.CMD_WRITE, offset, data.length);
        writeFully(channel, ByteBuffer.wrap(data));
        return reply();
    }

    /**
     * @return the NBD error of the reply to a WRITE with FUA (0: acknowledged, and durable with all before it).
     */
    int writeFua(final long offset, final byte[] data) throws IOException
    {
        request(NbdProtocol.CMD_WRITE, NbdProtocol.CMD_FLAG_FUA, offset, data.length);
        writeFully(channel, ByteBuffer.wrap(data));
        return reply();
    }

    /**
     * Sends a WRITE without waiting for its reply (pipelining); read the replies with {@link #anyReply()}.
     */
    void sendWrite(final long offset, final byte[] data) throws IOException
    {
        request(NbdProtocol.CMD_WRITE, offset, data.length);
        writeFully(channel, ByteBuffer.wrap(data));
    }

    /**
     * @return the error of the next reply, whichever request it answers (replies may come out of order).
     */
    int anyReply() throws IOException
    {
        final ByteBuffer reply = readExactly(channel, NbdProtocol.SIMPLE_REPLY_LENGTH);
        if (reply.getInt(0) != NbdProtocol.SIMPLE_REPLY_MAGIC)
        {
            throw new IOException("bad reply magic 0x" + Integer.toHexString(reply.getInt(0)));
        }
        return reply.getInt(4);
    }

    /**
     * @return the NBD error of the reply (0: everything acknowledged before it is durable).
     */
    int flush() throws IOException
    {
        request(NbdProtocol.CMD_FLUSH, 0, 0);
        return reply();
    }

    /**
     * @return the data read.
     * @throws IOException also when the server answers with an error.
     */
    byte[] read(final long offset, final int length) throws IOException
    {
        request(NbdProtocol.CMD_READ, offset, length);
        final int error = reply();
        if (error != 0)
        {
            throw new IOException("READ " + offset + "+" + length + ": NBD error " + error);
        }
        final byte[] data = new byte[length];
        readExactly(channel, length).get(data);
        return data;
    }

    /**
     * Sends any bytes, e.g. a request with a wrong magic.
     */
    void sendRaw(final ByteBuffer bytes) throws IOException
    {
        writeFully(channel, bytes);
    }

    /**
     * @return the error of the next simple reply.
     * @throws IOException when the server closes the connection instead.
     */
    int reply() throws IOException
    {
        final ByteBuffer reply = readExactly(channel, NbdProtocol.SIMPLE_REPLY_LENGTH);
        if (reply.getInt(0) != NbdProtocol.SIMPLE_REPLY_MAGIC)
        {
            throw new IOException("bad reply magic 0x" + Integer.toHexString(reply.getInt(0)));
        }
        if (reply.getLong(8) != cookie)
        {
            throw new IOException("reply for cookie " + reply.getLong(8) + ", expected " + cookie);
        }
        return reply.getInt(4);
    }

    /**
     * Waits for the server's answer to something sent raw: a simple reply or the end of the connection. Leaves
     * the connection non-blocking: close it afterwards.
     *
     * @return the reply's NBD error (0: success), or {@link #CLOSED} when the server closed the connection.
     * @throws AssertionError when neither comes within the timeout.
     */
    int awaitAnswer(final long timeoutMs) throws IOException
    {
        final ByteBuffer reply = ByteBuffer.allocate(NbdProtocol.SIMPLE_REPLY_LENGTH);
        channel.configureBlocking(false);
        try (Selector selector = Selector.open())
        {
            channel.register(selector, SelectionKey.OP_READ);
            final long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
            while (reply.hasRemaining())
            {
                final long leftMs = (deadline - System.nanoTime()) / 1_000_000L;
                if (leftMs <= 0)
                {
                    throw new AssertionError("the NBD server neither answered nor closed within " + timeoutMs + " ms");
                }
                selector.select(leftMs);
                selector.selectedKeys().clear();
                try
                {
                    if (channel.read(reply) < 0)
                    {
                        return CLOSED;
                    }
                }
                catch (final IOException ex)
                {
                    return CLOSED;
                }
            }
        }
        reply.flip();
        if (reply.getInt(0) != NbdProtocol.SIMPLE_REPLY_MAGIC)
        {
            throw new IOException("bad reply magic 0x" + Integer.toHexString(reply.getInt(0)));
        }
        return reply.getInt(4);
    }

    private void request(final int type, final long offset, final int length) throws IOException
    {
        request(type, 0, offset, length);
    }

    private void request(final int type, final int flags, final long offset, final int length) throws IOException
    {
        cookie++;
        header.clear();
        header.putInt(NbdProtocol.REQUEST_MAGIC).putShort((short)flags).putShort((short)type).putLong(cookie)
            .putLong(offset).putInt(length).flip();
        writeFully(channel, header);
    }

    private static void writeFully(final SocketChannel channel, final ByteBuffer buffer) throws IOException
    {
        while (buffer.hasRemaining())
        {
            channel.write(buffer);
        }
    }

    private static ByteBuffer readExactly(final SocketChannel channel, final int length) throws IOException
    {
        final ByteBuffer buffer = ByteBuffer.allocate(length);
        while (buffer.hasRemaining())
        {
            if (channel.read(buffer) < 0)
            {
                throw new EOFException("server closed after " + buffer.position() + " of " + length + " bytes");
            }
        }
        return buffer.flip();
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
            throw new AssertionError("cannot close the NBD connection: " + ex, ex);
        }
    }
}
