package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.transport.FrameConnection;

/**
 * A test double of the transport: frames sent are recorded (headers and payload copies, in preallocated storage,
 * so that recording allocates nothing); frames to receive are queued by the test, or by a linked peer double
 * whose sends arrive here. Single threaded, like the agents it serves.
 * <p>
 * Queued frames are stored as {@code [int payload bytes][64-byte header][payload]}, so a header that lies about
 * its length still leaves frame boundaries intact.
 */
final class CapturingFrameConnection implements FrameConnection
{
    private static final int HEADER = FrameDescriptor.HEADER_LENGTH;
    private static final int PREFIX = 4;

    private final UnsafeBuffer inbox;
    private int inboxRead;
    private int inboxWrite;
    private int payloadRemaining;
    private int maxPayloadBytesPerCall = Integer.MAX_VALUE;

    private final int recordCapacity;
    private final UnsafeBuffer sentHeaders;
    private final UnsafeBuffer sentPayloads;
    private final int[] payloadOffsets;
    private final int[] payloadLengths;
    private final int[] sentByType = new int[256];
    private int payloadWrite;
    private int sentCount;

    private CapturingFrameConnection peer;
    private int stalledFlushes;
    private int flushesToStall;
    private boolean sendPending;
    private boolean holdPayloads;
    private long framesHeldFrom = -1;
    private Exception failure;
    private long bytesSent;
    private long bytesReceived;

    /**
     * @param inboxCapacity   bytes of frames that may wait to be received.
     * @param recordCapacity  frames whose headers are kept (the latest ones).
     * @param payloadCapacity bytes of payload copies kept (the latest ones that fit).
     */
    CapturingFrameConnection(final int inboxCapacity, final int recordCapacity, final int payloadCapacity)
    {
        this.inbox = new UnsafeBuffer(BufferUtil.allocateDirectAligned(inboxCapacity, 64));
        this.recordCapacity = recordCapacity;
        this.sentHeaders = new UnsafeBuffer(BufferUtil.allocateDirectAligned(recordCapacity * HEADER, 64));
        this.sentPayloads = new UnsafeBuffer(BufferUtil.allocateDirectAligned(Math.max(64, payloadCapacity), 64));
        this.payloadOffsets = new int[recordCapacity];
        this.payloadLengths = new int[recordCapacity];
    }

    /**
     * Sends of this connection arrive at {@code peer}, and the other way round.
     */
    static void link(final CapturingFrameConnection a, final CapturingFrameConnection b)
    {
        a.peer = b;
        b.peer = a;
    }

    // ---- control of the double --------------------------------------------------------------------------------

    /**
     * The next call that touches the network throws this.
     */
    void failWith(final IOException ex)
    {
        failure = ex;
    }

    /**
     * The next call that touches the network throws this: a bug, not the network.
     */
    void failWith(final RuntimeException ex)
    {
        failure = ex;
    }

    /**
     * Every following send stays pending for this many flushes.
     */
    void stallFlushes(final int flushes)
    {
        flushesToStall = flushes;
    }

    /**
     * Frames started from now on keep their payloads in use, as an RDMA send from registered memory does until its
     * completion, until {@link #releaseFrames(long)} lets them go.
     */
    void holdPayloads()
    {
        holdPayloads = true;
        framesHeldFrom = sentCount;
    }

    /**
     * @param count frames, counted from 0 since creation, whose payloads are released from now on.
     */
    void releaseFrames(final long count)
    {
        framesHeldFrom = Math.max(framesHeldFrom, count);
    }

    /**
     * Payload bytes handed out per {@link #receivePayload(ByteBuffer)} call, to exercise partial reads.
     */
    void maxPayloadBytesPerCall(final int bytes)
    {
        maxPayloadBytesPerCall = bytes;
    }

    /**
     * Queues a frame to be received: the header as it is (sealed or not), the payload from 0 to its limit.
     */
    void deliver(final FrameHeader header, final ByteBuffer payload)
    {
        enqueue(header.buffer(), payload, payload == null ? 0 : payload.limit());
    }

    /**
     * @return bytes queued and not yet received.
     */
    int pendingInbound()
    {
        return inboxWrite - inboxRead;
    }

    // ---- what was sent ----------------------------------------------------------------------------------------

    int sentCount()
    {
        return sentCount;
    }

    int sentCount(final FrameType type)
    {
        return sentByType[type.code()];
    }

    /**
     * @param index of a frame sent, counted from 0 since creation; must be among the latest recordCapacity.
     * @return a copy of its header.
     */
    FrameHeader sentHeader(final int index)
    {
        checkRecorded(index);
        final FrameHeader copy = new FrameHeader();
        copy.buffer().putBytes(0, sentHeaders, (index % recordCapacity) * HEADER, HEADER);
        return copy;
    }

    /**
     * @return a copy of the payload of frame {@code index}, or null when none was kept.
     */
    byte[] sentPayload(final int index)
    {
        checkRecorded(index);
        final int slot = index % recordCapacity;
        if (payloadLengths[slot] < 0)
        {
            return null;
        }
        final byte[] bytes = new byte[payloadLengths[slot]];
        sentPayloads.getBytes(payloadOffsets[slot], bytes);
        return bytes;
    }

    /**
     * @return types of the frames sent from {@code from} on.
     */
    List<FrameType> sentTypes(final int from)
    {
        final List<FrameType> types = new ArrayList<>();
        for (int i = from; i < sentCount; i++)
        {
            types.add(sentHeader(i).type());
        }
        return types;
    }

    /**
     * @return indices of the frames of {@code type} sent from {@code from} on.
     */
    List<Integer> sentIndices(final FrameType type, final int from)
    {
        final List<Integer> indices = new ArrayList<>();
        for (int i = from; i < sentCount; i++)
        {
            if (sentHeader(i).type() == type)
            {
                indices.add(i);
            }
        }
        return indices;
    }

    private void checkRecorded(final int index)
    {
        if (index < 0 || index >= sentCount || index < sentCount - recordCapacity)
        {
            throw new IllegalArgumentException("frame " + index + " not recorded (sent " + sentCount + ")");
        }
    }

    // ---- FrameConnection --------------------------------------------------------------------------------------

    @Override
    public String transportName()
    {
        return "test";
    }

    @Override
    public String remoteAddress()
    {
        return "test-peer";
    }

    @Override
    public boolean startSend(final FrameHeader header, final ByteBuffer payload)
    {
        if (sendPending)
        {
            return false;
        }
        final int length = payload == null ? 0 : payload.limit();
        final int slot = sentCount % recordCapacity;
        sentHeaders.putBytes(slot * HEADER, header.buffer(), 0, HEADER);
        if (length <= sentPayloads.capacity())
        {
            if (payloadWrite + length > sentPayloads.capacity())
            {
                payloadWrite = 0;
            }
            if (length > 0)
            {
                sentPayloads.putBytes(payloadWrite, payload, 0, length);
            }
            payloadOffsets[slot] = payloadWrite;
            payloadLengths[slot] = length;
            payloadWrite += length;
        }
        else
        {
            payloadLengths[slot] = -1;
        }
        sentByType[header.typeCode()]++;
        sentCount++;
        bytesSent += HEADER + length;
        if (peer != null)
        {
            peer.enqueue(header.buffer(), payload, length);
        }
        stalledFlushes = flushesToStall;
        sendPending = stalledFlushes > 0;
        return true;
    }

    @Override
    public boolean flush() throws IOException
    {
        throwIfFailed();
        if (sendPending && --stalledFlushes <= 0)
        {
            sendPending = false;
        }
        return !sendPending;
    }

    @Override
    public long framesStarted()
    {
        return sentCount;
    }

    @Override
    public long framesReleased()
    {
        final long handedOver = sendPending ? sentCount - 1 : sentCount;
        return holdPayloads ? Math.min(framesHeldFrom, handedOver) : handedOver;
    }

    @Override
    public boolean isSendPending()
    {
        return sendPending;
    }

    @Override
    public boolean receiveHeader(final FrameHeader header) throws IOException
    {
        throwIfFailed();
        if (payloadRemaining > 0)
        {
            throw new IllegalStateException("header read before the previous payload (" + payloadRemaining +
                " bytes left)");
        }
        if (inboxWrite - inboxRead < PREFIX + HEADER)
        {
            return false;
        }
        payloadRemaining = inbox.getInt(inboxRead);
        header.buffer().putBytes(0, inbox, inboxRead + PREFIX, HEADER);
        inboxRead += PREFIX + HEADER;
        bytesReceived += HEADER;
        compactIfEmpty();
        return true;
    }

    @Override
    public boolean receivePayload(final ByteBuffer dst) throws IOException
    {
        throwIfFailed();
        final int n = Math.min(Math.min(dst.remaining(), payloadRemaining), maxPayloadBytesPerCall);
        if (n > 0)
        {
            inbox.getBytes(inboxRead, dst, dst.position(), n);
            dst.position(dst.position() + n);
            inboxRead += n;
            payloadRemaining -= n;
            bytesReceived += n;
            compactIfEmpty();
        }
        return !dst.hasRemaining();
    }

    @Override
    public long bytesSent()
    {
        return bytesSent;
    }

    @Override
    public long bytesReceived()
    {
        return bytesReceived;
    }

    @Override
    public void close()
    {
        failure = new IOException("closed");
    }

    private void throwIfFailed() throws IOException
    {
        if (failure instanceof RuntimeException bug)
        {
            throw bug;
        }
        if (failure != null)
        {
            throw (IOException)failure;
        }
    }

    private void enqueue(final UnsafeBuffer header, final ByteBuffer payload, final int length)
    {
        final int needed = PREFIX + HEADER + length;
        if (inboxWrite + needed > inbox.capacity() && inboxRead > 0)
        {
            final int queued = inboxWrite - inboxRead;
            inbox.putBytes(0, inbox, inboxRead, queued);
            inboxRead = 0;
            inboxWrite = queued;
        }
        if (inboxWrite + needed > inbox.capacity())
        {
            throw new IllegalStateException("test inbox full: make it larger");
        }
        inbox.putInt(inboxWrite, length);
        inbox.putBytes(inboxWrite + PREFIX, header, 0, HEADER);
        if (length > 0)
        {
            inbox.putBytes(inboxWrite + PREFIX + HEADER, payload, 0, length);
        }
        inboxWrite += needed;
    }

    private void compactIfEmpty()
    {
        if (inboxRead == inboxWrite && payloadRemaining == 0)
        {
            inboxRead = 0;
            inboxWrite = 0;
        }
    }
}
