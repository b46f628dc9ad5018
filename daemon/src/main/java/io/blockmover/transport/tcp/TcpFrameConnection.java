package io.blockmover.transport.tcp;

import java.io.EOFException;
import java.io.IOException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.util.function.Consumer;

import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.transport.FrameConnection;

/**
 * Frames over a non-blocking TCP socket. A frame goes out with one gathering write of header and payload, so
 * payload bytes go from the slot to the socket with no copy in between. Coming in, one read fills a small buffer
 * with as many frames as the socket holds (a replication stream of 4 KiB records arrives many to a read: one
 * system call per read instead of two or three per frame), and what remains of a large payload is read straight
 * into the slot the receiver chose. While corked ({@link #cork()}), small frames are copied one behind the other
 * and go out with one write at {@link #uncork()}: a shipper with sixteen 4 KiB records to send pays one system
 * call and one trip through the network stack for all of them, not one per record. Allocates nothing per frame.
 */
public final class TcpFrameConnection implements FrameConnection
{
    /** Room for several chunks in the kernel, so each system call moves a chunk rather than a sliver of one. */
    private static final int SOCKET_BUFFER_BYTES = 4 * 1024 * 1024;
    /**
     * Small frames are read through this many bytes of buffer. Large enough for a burst of 4 KiB records, small
     * enough that at most this much of a 1 MiB chunk is copied once instead of read straight into its slot.
     */
    static final int READ_BUFFER_BYTES = 64 * 1024;

    private final SocketChannel channel;
    private final Selector selector;
    private final SelectionKey key;
    private final Consumer<SelectionKey> onReady = (readyKey) -> { };
    private final String remoteAddress;
    /** While corked, a frame whose payload is at most this long is copied behind the others held. */
    static final int COALESCE_PAYLOAD_BYTES = 16 * 1024;
    private static final int COALESCE_BYTES = 256 * 1024;

    // Held frames, then the current frame's header and payload: one gathering write.
    private final ByteBuffer[] sendVector = new ByteBuffer[3];
    private int sendVectorLength;
    private volatile boolean sendPending;
    // Frames in the pending write.
    private int sendVectorFrames;
    /**
     * Frames held while corked, copied whole (write mode: position is the bytes held). Made at the first cork:
     * most connections (copy sessions, receivers) never cork.
     */
    private ByteBuffer coalesced;
    private int coalescedFrames;
    private boolean corked;
    private long framesStarted;
    private long bytesSent;
    private long bytesReceived;
    private long socketReads;
    private int headerBytesRead;
    /** Bytes read from the socket and not yet handed out: position..limit (read mode). */
    private final ByteBuffer readBuffer = ByteBuffer.allocateDirect(READ_BUFFER_BYTES).limit(0);

    /**
     * @param channel connected socket; it is made non-blocking with TCP_NODELAY.
     * @throws IOException when the socket cannot be configured.
     */
    public TcpFrameConnection(final SocketChannel channel) throws IOException
    {
        this.channel = channel;
        channel.configureBlocking(false);
        channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
        channel.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
        channel.setOption(StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER_BYTES);
        channel.setOption(StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER_BYTES);
        this.remoteAddress = String.valueOf(channel.getRemoteAddress());
        this.selector = Selector.open();
        this.key = channel.register(selector, SelectionKey.OP_READ);
    }

    @Override
    public void awaitIo(final long timeoutMs) throws IOException
    {
        if (readBuffer.hasRemaining())
        {
            // Bytes already read are as good as a readable socket: the socket itself may have nothing more.
            return;
        }
        final int ops = sendPending ? SelectionKey.OP_READ | SelectionKey.OP_WRITE : SelectionKey.OP_READ;
        if (key.interestOps() != ops)
        {
            key.interestOps(ops);
        }
        // The consumer form does not fill the selected-key set, so a wait allocates nothing.
        selector.select(onReady, timeoutMs);
    }

    @Override
    public void wakeup()
    {
        selector.wakeup();
    }

    @Override
    public String transportName()
    {
        return "tcp";
    }

    @Override
    public String remoteAddress()
    {
        return remoteAddress;
    }

    /**
     * {@inheritDoc}
     * <p>
     * The send side touches only its own state and the channel's write half, which the JDK locks apart from its
     * read half; awaitIo reads whether a send is pending, and a sender that leaves one wakes the owner.
     */
    @Override
    public boolean sendsFromAnyThread()
    {
        return true;
    }

    @Override
    public boolean startSend(final FrameHeader header, final ByteBuffer payload)
    {
        if (sendPending)
        {
            return false;
        }
        framesStarted++;
        final int payloadLength = payload == null ? 0 : payload.remaining();
        if (corked && payloadLength <= COALESCE_PAYLOAD_BYTES &&
            coalesced.remaining() >= FrameDescriptor.HEADER_LENGTH + payloadLength)
        {
            coalesced.put(header.byteBuffer().clear().limit(FrameDescriptor.HEADER_LENGTH));
            if (payloadLength > 0)
            {
                // Absolute: the caller's payload buffer keeps its position, as with a gathering write of it.
                coalesced.put(coalesced.position(), payload, payload.position(), payloadLength);
                coalesced.position(coalesced.position() + payloadLength);
            }
            coalescedFrames++;
            return true;
        }
        int n = takeHeldFrames();
        sendVector[n++] = header.byteBuffer().clear().limit(FrameDescriptor.HEADER_LENGTH);
        if (payloadLength > 0)
        {
            sendVector[n++] = payload;
        }
        sendVectorLength = n;
        sendVectorFrames++;
        sendPending = true;
        return true;
    }

    /**
     * Puts the frames held while corked, if any, first in the next write.
     *
     * @return the number of vector entries they take: 0 or 1.
     */
    private int takeHeldFrames()
    {
        sendVectorFrames = coalescedFrames;
        if (coalescedFrames == 0)
        {
            return 0;
        }
        coalescedFrames = 0;
        sendVector[0] = coalesced.flip();
        return 1;
    }

    @Override
    public boolean flush() throws IOException
    {
        if (!sendPending)
        {
            if (corked || coalescedFrames == 0)
            {
                return true;
            }
            sendVectorLength = takeHeldFrames();
            sendPending = true;
        }
        final long n = channel.write(sendVector, 0, sendVectorLength);
        bytesSent += n;
        if (!sendVector[sendVectorLength - 1].hasRemaining())
        {
            sendPending = false;
            sendVectorFrames = 0;
            for (int i = 0; i < sendVectorLength; i++)
            {
                sendVector[i] = null;
            }
            if (coalesced != null)
            {
                coalesced.clear(); // Empty already unless it was written as part of this vector.
            }
        }
        return !sendPending;
    }

    @Override
    public void cork()
    {
        if (coalesced == null)
        {
            coalesced = ByteBuffer.allocateDirect(COALESCE_BYTES);
        }
        corked = true;
    }

    @Override
    public boolean uncork() throws IOException
    {
        corked = false;
        return flush();
    }

    @Override
    public long framesStarted()
    {
        return framesStarted;
    }

    /**
     * {@inheritDoc}
     * <p>
     * The socket copies what it takes: a frame is released once it is wholly written.
     */
    @Override
    public long framesReleased()
    {
        return framesStarted - sendVectorFrames - coalescedFrames;
    }

    @Override
    public boolean isSendPending()
    {
        return sendPending || coalescedFrames > 0;
    }

    @Override
    public boolean receiveHeader(final FrameHeader header) throws IOException
    {
        final ByteBuffer buffer = header.byteBuffer();
        if (headerBytesRead == 0)
        {
            buffer.clear().limit(FrameDescriptor.HEADER_LENGTH);
        }
        headerBytesRead += drainInto(buffer);
        if (buffer.hasRemaining())
        {
            fill();
            headerBytesRead += drainInto(buffer);
            if (buffer.hasRemaining())
            {
                return false;
            }
        }
        headerBytesRead = 0;
        return true;
    }

    @Override
    public boolean receivePayload(final ByteBuffer dst) throws IOException
    {
        drainInto(dst);
        if (!dst.hasRemaining())
        {
            return true;
        }
        if (dst.remaining() >= READ_BUFFER_BYTES)
        {
            // The rest of a large payload: straight into the caller's buffer, no copy.
            final int n = channel.read(dst);
            socketReads++;
            if (n < 0)
            {
                throw new EOFException("peer " + remoteAddress + " closed the connection");
            }
            bytesReceived += n;
        }
        else
        {
            fill();
            drainInto(dst);
        }
        return !dst.hasRemaining();
    }

    /**
     * One read from the socket into the (empty) read buffer.
     */
    private void fill() throws IOException
    {
        readBuffer.clear();
        final int n = channel.read(readBuffer);
        socketReads++;
        readBuffer.flip();
        if (n < 0)
        {
            throw new EOFException("peer " + remoteAddress + " closed the connection");
        }
        bytesReceived += n;
    }

    /**
     * Moves buffered bytes into dst, as many as both allow.
     *
     * @return bytes moved.
     */
    private int drainInto(final ByteBuffer dst)
    {
        final int n = Math.min(readBuffer.remaining(), dst.remaining());
        if (n > 0)
        {
            dst.put(dst.position(), readBuffer, readBuffer.position(), n);
            dst.position(dst.position() + n);
            readBuffer.position(readBuffer.position() + n);
        }
        return n;
    }

    @Override
    public long bytesSent()
    {
        return bytesSent;
    }

    /**
     * @return read system calls made so far (tests: small frames arrive many to a read).
     */
    long socketReads()
    {
        return socketReads;
    }

    @Override
    public long bytesReceived()
    {
        return bytesReceived;
    }

    @Override
    public void close()
    {
        try
        {
            selector.close();
            channel.close();
        }
        catch (final IOException ex)
        {
            // Closing a socket that already failed: the failure was reported where it happened.
            return;
        }
    }
}
