package io.blockmover.frontend.nbd;

import java.io.EOFException;
import java.io.IOException;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A deliberately plain NBD client for protocol tests: blocking, byte-exact, and able to send anything, garbage
 * included. Not thread-safe.
 */
final class RawNbdClient implements AutoCloseable
{
    /** One option reply. */
    record OptionReply(int option, int type, byte[] data)
    {
        ByteBuffer buffer()
        {
            return ByteBuffer.wrap(data);
        }
    }

    /** One simple reply; data only for a successful READ. */
    record Reply(int error, long cookie, byte[] data)
    {
    }

    /** One structured reply chunk: its header's fields and its payload. */
    record Chunk(int flags, int type, long cookie, byte[] payload)
    {
        ByteBuffer buffer()
        {
            return ByteBuffer.wrap(payload);
        }
    }

    final SocketChannel channel;
    int handshakeFlags;
    long size;
    int transmissionFlags;
    int minimumBlock;
    int preferredBlock;
    int maximumBlock;

    RawNbdClient(final Path socket) throws IOException
    {
        channel = SocketChannel.open(UnixDomainSocketAddress.of(socket));
    }

    /**
     * Reads the server's greeting and answers with the client flags.
     */
    RawNbdClient handshake(final int clientFlags) throws IOException
    {
        final ByteBuffer hello = readExactly(18);
        assertEquals(NbdProtocol.NBDMAGIC, hello.getLong(0));
        assertEquals(NbdProtocol.IHAVEOPT, hello.getLong(8));
        handshakeFlags = hello.getShort(16) & 0xFFFF;
        final ByteBuffer flags = ByteBuffer.allocate(4).putInt(clientFlags).flip();
        write(flags);
        return this;
    }

    RawNbdClient handshake() throws IOException
    {
        return handshake(NbdProtocol.FLAG_C_FIXED_NEWSTYLE | NbdProtocol.FLAG_C_NO_ZEROES);
    }

    void sendOption(final int option, final byte[] data) throws IOException
    {
        final ByteBuffer buffer = ByteBuffer.allocate(16 + data.length);
        buffer.putLong(NbdProtocol.IHAVEOPT).putInt(option).putInt(data.length).put(data).flip();
        write(buffer);
    }

    OptionReply readOptionReply() throws IOException
    {
        final ByteBuffer header = readExactly(20);
        assertEquals(NbdProtocol.OPTION_REPLY_MAGIC, header.getLong(0));
        final int length = header.getInt(16);
        final byte[] data = new byte[length];
        readExactly(length).get(data);
        return new OptionReply(header.getInt(8), header.getInt(12), data);
    }

    /**
     * Replies up to and including the first ACK or error.
     */
    List<OptionReply> readOptionReplies() throws IOException
    {
        final List<OptionReply> replies = new ArrayList<>();
        while (true)
        {
            final OptionReply reply = readOptionReply();
            replies.add(reply);
            if (reply.type() == NbdProtocol.REP_ACK || reply.type() < 0)
            {
                return replies;
            }
        }
    }

    static byte[] infoData(final String name, final int... infos)
    {
        final byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
        final ByteBuffer data = ByteBuffer.allocate(4 + bytes.length + 2 + 2 * infos.length);
        data.putInt(bytes.length).put(bytes).putShort((short)infos.length);
        for (final int info : infos)
        {
            data.putShort((short)info);
        }
        return data.array();
    }

    /**
     * NBD_OPT_GO asking for the block size; remembers size, flags and block sizes.
     *
     * @return the replies, ending with ACK or an error.
     */
    List<OptionReply> go(final String name) throws IOException
    {
        sendOption(NbdProtocol.OPT_GO, infoData(name, NbdProtocol.INFO_BLOCK_SIZE));
        final List<OptionReply> replies = readOptionReplies();
        for (final OptionReply reply : replies)
        {
            if (reply.type() == NbdProtocol.REP_INFO)
            {
                final ByteBuffer data = reply.buffer();
                final int type = data.getShort(0);
                if (type == NbdProtocol.INFO_EXPORT)
                {
                    size = data.getLong(2);
                    transmissionFlags = data.getShort(10) & 0xFFFF;
                }
                else if (type == NbdProtocol.INFO_BLOCK_SIZE)
                {
                    minimumBlock = data.getInt(2);
                    preferredBlock = data.getInt(6);
                    maximumBlock = data.getInt(10);
                }
            }
        }
        return replies;
    }

    RawNbdClient connect(final String name) throws IOException
    {
        final List<OptionReply> replies = handshake().go(name);
        assertEquals(NbdProtocol.REP_ACK, replies.get(replies.size() - 1).type());
        return this;
    }

    void sendRequest(final int type, final int flags, final long cookie, final long offset, final long length,
        final byte[] payload) throws IOException
    {
        final ByteBuffer request = ByteBuffer.allocate(NbdProtocol.REQUEST_LENGTH + (payload == null ? 0 :
            payload.length));
        request.putInt(NbdProtocol.REQUEST_MAGIC).putShort((short)flags).putShort((short)type).putLong(cookie)
            .putLong(offset).putInt((int)length);
        if (payload != null)
        {
            request.put(payload);
        }
        request.flip();
        write(request);
    }

    /**
     * @param readLength bytes of data that follow a successful reply (a READ's length), else 0.
     */
    Reply readReply(final int readLength) throws IOException
    {
        final ByteBuffer header = readExactly(NbdProtocol.SIMPLE_REPLY_LENGTH);
        assertEquals(NbdProtocol.SIMPLE_REPLY_MAGIC, header.getInt(0));
        final int error = header.getInt(4);
        byte[] data = null;
        if (error == 0 && readLength > 0)
        {
            data = new byte[readLength];
            readExactly(readLength).get(data);
        }
        return new Reply(error, header.getLong(8), data);
    }

    Chunk readChunk() throws IOException
    {
        final ByteBuffer header = readExactly(NbdProtocol.STRUCTURED_REPLY_LENGTH);
        assertEquals(NbdProtocol.STRUCTURED_REPLY_MAGIC, header.getInt(0));
        final byte[] payload = new byte[header.getInt(16)];
        readExactly(payload.length).get(payload);
        return new Chunk(header.getShort(4) & 0xFFFF, header.getShort(6) & 0xFFFF, header.getLong(8), payload);
    }

    /**
     * NBD_OPT_SET_META_CONTEXT (or LIST) for an export and these queries.
     *
     * @return the replies, ending with ACK or an error.
     */
    List<OptionReply> metaContext(final int option, final String name, final String... queries) throws IOException
    {
        final byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
        int length = 4 + bytes.length + 4;
        for (final String query : queries)
        {
            length += 4 + query.getBytes(StandardCharsets.UTF_8).length;
        }
        final ByteBuffer data = ByteBuffer.allocate(length).putInt(bytes.length).put(bytes).putInt(queries.length);
        for (final String query : queries)
        {
            final byte[] q = query.getBytes(StandardCharsets.UTF_8);
            data.putInt(q.length).put(q);
        }
        sendOption(option, data.array());
        return readOptionReplies();
    }

    int write(final long offset, final byte[] data, final int flags) throws IOException
    {
        sendRequest(NbdProtocol.CMD_WRITE, flags, offset, offset, data.length, data);
        final Reply reply = readReply(0);
        assertEquals(offset, reply.cookie());
        return reply.error();
    }

    Reply read(final long offset, final int length) throws IOException
    {
        sendRequest(NbdProtocol.CMD_READ, 0, offset, offset, length, null);
        final Reply reply = readReply(length);
        assertEquals(offset, reply.cookie());
        return reply;
    }

    int command(final int type, final int flags, final long offset, final long length) throws IOException
    {
        sendRequest(type, flags, 42, offset, length, null);
        final Reply reply = readReply(0);
        assertEquals(42, reply.cookie());
        return reply.error();
    }

    void write(final ByteBuffer buffer) throws IOException
    {
        while (buffer.hasRemaining())
        {
            channel.write(buffer);
        }
    }

    ByteBuffer readExactly(final int length) throws IOException
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

    /**
     * @return true when the server has closed the connection (reads end of stream).
     */
    boolean isClosedByServer() throws IOException
    {
        try
        {
            return channel.read(ByteBuffer.allocate(1)) < 0;
        }
        catch (final IOException ex)
        {
            return true;
        }
    }

    @Override
    public void close() throws IOException
    {
        channel.close();
    }
}
