package io.blockmover.transport.rdma;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.ProtocolException;
import io.blockmover.rdma.CompletionHandler;
import io.blockmover.rdma.RdmaEndpoint;
import io.blockmover.rdma.RegisteredMemory;
import io.blockmover.rdma.WorkCompletion;
import io.blockmover.transport.FrameConnection;

/**
 * Frames over an RDMA reliable connection made with rdma_cm (iWARP or RoCE): each frame, header and payload, is
 * one SEND into one of the receive buffers the peer posted ahead, each big enough for the largest frame. No
 * write-with-immediate (iWARP has none). The receiver reposts a buffer as soon as the frame in it has been taken,
 * and the protocol's credits bound how many frames can be in flight, so a SEND always finds a posted receive
 * (iWARP has no receiver-not-ready retry).
 * <p>
 * Send side, zero-copy: a payload that lies inside the daemon's slab (registered once per protection domain, see
 * {@link RdmaDevices}) is not copied: the SEND gathers two SGEs, the header from a small registered send buffer
 * and the payload straight from its slot. The slot must then stay unchanged until the device has read it, so
 * {@link #framesReleased()} counts such a frame only at its send completion, while {@link #flush()} returns true as
 * soon as it is posted: up to {@link #SEND_BUFFERS} chunks are on the wire at once, and the Sender hands each slot
 * back to the Reader when its frame is released. (One at a time left the link idle from each completion until the
 * owner's next post, one nap of 50 us or more, where a 1 MiB chunk is on a 100 Gb wire for 84 us; and rxe reports
 * a send complete only once the peer acknowledged it.) Send completions arrive in posting order on one queue pair,
 * so the release is a count. Any other payload (a control buffer, a
 * view into a memory-mapped log) is copied into the send buffer behind the header and is released when posted.
 * <pre>
 *   registered send buffers (4)              posted receive buffers (receiveDepth)
 *   +--------+ - - - - - - - - +             +--------+----------------+
 *   | header | copied payload  |  SEND  ->   | header | payload        |  each HEADER_LENGTH + maxPayload
 *   +--------+ - - - - - - - - +             +--------+----------------+
 *       sge[0]   + sge[1]: slab slot (zero-copy)    or the copied payload in sge[0]
 * </pre>
 * Receive side: the payload is copied once, out of the receive buffer into the caller's slot. Receiving straight
 * into the slot would need the slot chosen before the frame arrives (receives posted with a scatter list, or an
 * RDMA WRITE into a slot the receiver advertised), which the Receiver chooses only after it has read the header.
 * <p>
 * The connection's own buffers are registered once per connection, the slab once per device, never per transfer.
 * Allocates nothing per frame. One thread at a time, like the endpoint.
 */
public final class RdmaFrameConnection implements FrameConnection
{
    /** Frames a sender may have posted and not yet completed. */
    public static final int SEND_BUFFERS = 4;
    private static final int EVENT_POLL_INTERVAL = 64;
    /** Longest nap while the connection is not established yet (no queues to wait on). */
    private static final long MAX_PARK_NS = 1_000_000;

    private final RdmaEndpoint endpoint;
    private final RegisteredMemory sendMemory;
    private final RegisteredMemory receiveMemory;
    private final RegisteredMemory slabMemory;
    private final AtomicCounter zeroCopySendsCounter;
    private final long slabAddress;
    private final long slabLength;
    private final UnsafeBuffer sendBuffer;
    private final UnsafeBuffer receiveBuffer;
    private final int bufferLength;
    private final int receiveDepth;
    private final boolean[] sendBusy = new boolean[SEND_BUFFERS];
    /** The frame number of the zero-copy frame each send buffer carries until its completion, or -1. */
    private final long[] zeroCopyFrame = new long[SEND_BUFFERS];
    private final int[] readyIndex;
    private final int[] readyLength;
    private final CompletionHandler onCompletion = this::onCompletion;
    private final String remoteAddress;
    private int readyHead;
    private int readyCount;
    private int current = -1;
    private int currentLength;
    private int currentOffset;
    private FrameHeader pendingHeader;
    private ByteBuffer pendingPayload;
    private boolean sendPending;
    private long framesStarted;
    private int zeroCopyInFlight;
    private long zeroCopySends;
    private IOException failure;
    private long bytesSent;
    private long bytesReceived;
    private int pollsSinceEvents;
    private long completions;

    private RdmaFrameConnection(
        final RdmaEndpoint endpoint,
        final RegisteredMemory slabMemory,
        final AtomicCounter zeroCopySendsCounter,
        final int maxPayload,
        final int receiveDepth)
    {
        this.endpoint = endpoint;
        this.zeroCopySendsCounter = zeroCopySendsCounter;
        this.slabMemory = slabMemory != null && slabMemory.device() == endpoint.device() ? slabMemory : null;
        this.slabAddress = this.slabMemory != null ? this.slabMemory.address() : 0;
        this.slabLength = this.slabMemory != null ? this.slabMemory.length() : 0;
        this.bufferLength = align(FrameDescriptor.HEADER_LENGTH + maxPayload, 64);
        this.receiveDepth = receiveDepth;
        this.readyIndex = new int[receiveDepth];
        this.readyLength = new int[receiveDepth];
        final ByteBuffer send = BufferUtil.allocateDirectAligned(bufferLength * SEND_BUFFERS, 4096);
        final ByteBuffer receive = BufferUtil.allocateDirectAligned(bufferLength * receiveDepth, 4096);
        this.sendMemory = endpoint.device().register(send);
        RegisteredMemory registered = null;
        try
        {
            registered = endpoint.device().register(receive);
        }
        finally
        {
            if (registered == null)
            {
                sendMemory.close();
            }
        }
        this.receiveMemory = registered;
        this.sendBuffer = new UnsafeBuffer(send);
        this.receiveBuffer = new UnsafeBuffer(receive);
        this.remoteAddress = String.valueOf(endpoint.remoteAddress());
        Arrays.fill(zeroCopyFrame, -1);
    }

    /**
     * Registers the buffers and posts every receive: call right after {@code RdmaEndpoint.connect} returns, or on
     * a server between {@code listener.poll()} and {@code accept}, before the peer can send anything.
     *
     * @param endpoint     whose queue pair exists.
     * @param slabMemory   the slab's registration on the endpoint's device, whose payloads are sent without a
     *                     copy; null (or another device's) to copy every payload. Not owned: it outlives the
     *                     connection.
     * @param zeroCopySendsCounter counts frames sent without a copy (any thread may share it); or null.
     * @param maxPayload   the largest payload a frame may carry.
     * @param receiveDepth receives kept posted; at most the endpoint's receive queue depth.
     * @return the connection; it owns the endpoint from now on.
     * @throws IOException when a receive cannot be posted.
     */
    public static RdmaFrameConnection create(
        final RdmaEndpoint endpoint,
        final RegisteredMemory slabMemory,
        final AtomicCounter zeroCopySendsCounter,
        final int maxPayload,
        final int receiveDepth) throws IOException
    {
        final RdmaFrameConnection connection =
            new RdmaFrameConnection(endpoint, slabMemory, zeroCopySendsCounter, maxPayload, receiveDepth);
        for (int i = 0; i < receiveDepth; i++)
        {
            connection.repost(i);
        }
        return connection;
    }

    /**
     * @param maxPayload   the largest payload a frame may carry.
     * @param receiveDepth receives kept posted.
     * @return bytes one connection registers (pins): its send and receive buffers.
     */
    public static long registeredBytes(final int maxPayload, final int receiveDepth)
    {
        return (long)align(FrameDescriptor.HEADER_LENGTH + maxPayload, 64) * (SEND_BUFFERS + receiveDepth);
    }

    private static int align(final int value, final int alignment)
    {
        return (value + alignment - 1) & -alignment;
    }

    /**
     * @return the endpoint, for connection management (accept, events) by its owner.
     */
    public RdmaEndpoint endpoint()
    {
        return endpoint;
    }

    @Override
    public String transportName()
    {
        return "rdma";
    }

    @Override
    public String remoteAddress()
    {
        return remoteAddress;
    }

    @Override
    public boolean startSend(final FrameHeader header, final ByteBuffer payload)
    {
        if (sendPending)
        {
            return false;
        }
        pendingHeader = header;
        pendingPayload = payload;
        sendPending = true;
        framesStarted++;
        postPending();
        return true;
    }

    @Override
    public boolean flush() throws IOException
    {
        poll();
        if (sendPending)
        {
            postPending();
        }
        return !sendPending;
    }

    @Override
    public long framesStarted()
    {
        return framesStarted;
    }

    /**
     * {@inheritDoc}
     * <p>
     * A payload sent from the slab without a copy is released once the device has read it (its send completion);
     * a copied one once it is posted.
     */
    @Override
    public long framesReleased()
    {
        long released = sendPending ? framesStarted - 1 : framesStarted;
        if (zeroCopyInFlight > 0)
        {
            for (int i = 0; i < SEND_BUFFERS; i++)
            {
                if (zeroCopyFrame[i] >= 0 && zeroCopyFrame[i] < released)
                {
                    released = zeroCopyFrame[i];
                }
            }
        }
        return released;
    }

    private void postPending()
    {
        if (!endpoint.isEstablished())
        {
            return;
        }
        int free = -1;
        for (int i = 0; i < SEND_BUFFERS; i++)
        {
            if (!sendBusy[i])
            {
                free = i;
                break;
            }
        }
        if (free < 0)
        {
            return;
        }
        final int offset = free * bufferLength;
        sendBuffer.putBytes(offset, pendingHeader.buffer(), 0, FrameDescriptor.HEADER_LENGTH);
        final ByteBuffer payload = pendingPayload;
        final int payloadLength = payload != null ? payload.remaining() : 0;
        final long slabOffset = slabOffsetOf(payload, payloadLength);
        final boolean zeroCopy = slabOffset >= 0;
        if (zeroCopy)
        {
            if (!endpoint.postSend(sendMemory, offset, FrameDescriptor.HEADER_LENGTH, slabMemory, (int)slabOffset,
                payloadLength, free))
            {
                return;
            }
            zeroCopyInFlight++;
            zeroCopySends++;
            if (null != zeroCopySendsCounter)
            {
                zeroCopySendsCounter.increment();
            }
        }
        else
        {
            if (payloadLength > 0)
            {
                sendBuffer.putBytes(offset + FrameDescriptor.HEADER_LENGTH, payload, payload.position(), payloadLength);
            }
            if (!endpoint.postSend(sendMemory, offset, FrameDescriptor.HEADER_LENGTH + payloadLength, free))
            {
                return;
            }
        }
        sendBusy[free] = true;
        zeroCopyFrame[free] = zeroCopy ? framesStarted - 1 : -1;
        bytesSent += FrameDescriptor.HEADER_LENGTH + payloadLength;
        sendPending = false;
        pendingHeader = null;
        pendingPayload = null;
    }

    private long slabOffsetOf(final ByteBuffer payload, final int payloadLength)
    {
        return null == slabMemory ? -1 : offsetWithin(payload, payloadLength, slabAddress, slabLength);
    }

    /**
     * @param payload       a payload from its position, {@code payloadLength} bytes.
     * @param payloadLength bytes of it.
     * @param regionAddress start of a registered region.
     * @param regionLength  bytes of the region.
     * @return the payload's offset in the region, or -1 when it is empty, on the heap or not wholly inside the
     *         region (then it must be copied).
     */
    static long offsetWithin(
        final ByteBuffer payload, final int payloadLength, final long regionAddress, final long regionLength)
    {
        if (payloadLength <= 0 || null == payload || !payload.isDirect())
        {
            return -1;
        }
        final long offset = BufferUtil.address(payload) + payload.position() - regionAddress;
        return offset >= 0 && offset <= regionLength - payloadLength ? offset : -1;
    }

    /**
     * @return frames whose payload was sent straight from the slab, without a copy.
     */
    public long zeroCopySends()
    {
        return zeroCopySends;
    }

    @Override
    public boolean isSendPending()
    {
        return sendPending;
    }

    @Override
    public boolean receiveHeader(final FrameHeader header) throws IOException
    {
        if (current < 0)
        {
            poll();
            if (readyCount == 0)
            {
                checkAlive();
                return false;
            }
            current = readyIndex[readyHead];
            currentLength = readyLength[readyHead];
            readyHead = (readyHead + 1) % receiveDepth;
            readyCount--;
        }
        if (currentLength < FrameDescriptor.HEADER_LENGTH)
        {
            throw new ProtocolException("RDMA message of " + currentLength + " bytes is shorter than a frame header");
        }
        final int base = current * bufferLength;
        header.buffer().putBytes(0, receiveBuffer, base, FrameDescriptor.HEADER_LENGTH);
        bytesReceived += currentLength;
        currentOffset = FrameDescriptor.HEADER_LENGTH;
        final int payloadLength = header.payloadLength();
        if (payloadLength < 0 || FrameDescriptor.HEADER_LENGTH + payloadLength != currentLength)
        {
            throw new ProtocolException("frame announces " + payloadLength + " payload bytes in an RDMA message of " +
                currentLength);
        }
        if (payloadLength == 0)
        {
            releaseCurrent();
        }
        return true;
    }

    @Override
    public boolean receivePayload(final ByteBuffer dst) throws IOException
    {
        if (!dst.hasRemaining())
        {
            return true;
        }
        if (current < 0)
        {
            throw new IllegalStateException("no frame to take a payload from");
        }
        final int n = Math.min(dst.remaining(), currentLength - currentOffset);
        receiveBuffer.getBytes(current * bufferLength + currentOffset, dst, dst.position(), n);
        dst.position(dst.position() + n);
        currentOffset += n;
        if (currentOffset == currentLength)
        {
            releaseCurrent();
        }
        return !dst.hasRemaining();
    }

    private void releaseCurrent() throws IOException
    {
        final int index = current;
        current = -1;
        repost(index);
    }

    private void repost(final int index) throws IOException
    {
        if (!endpoint.postReceive(receiveMemory, index * bufferLength, bufferLength, index))
        {
            throw new IOException("cannot post an RDMA receive (queue full or connection failed): " +
                endpoint.state());
        }
    }

    private void poll() throws IOException
    {
        endpoint.pollCompletions(onCompletion);
        if (++pollsSinceEvents >= EVENT_POLL_INTERVAL)
        {
            pollsSinceEvents = 0;
            endpoint.pollEvents(System.nanoTime());
        }
        if (failure != null)
        {
            throw failure;
        }
    }

    private void checkAlive() throws IOException
    {
        final RdmaEndpoint.State state = endpoint.state();
        if (state == RdmaEndpoint.State.DISCONNECTED || state == RdmaEndpoint.State.FAILED ||
            state == RdmaEndpoint.State.CLOSED || state == RdmaEndpoint.State.DISCONNECTING)
        {
            throw new EOFException("RDMA connection to " + remoteAddress + " is " + state.name().toLowerCase() +
                (endpoint.failure() != null ? ": " + endpoint.failure().getMessage() : ""));
        }
    }

    private void onCompletion(final WorkCompletion completion)
    {
        completions++;
        final int index = (int)completion.wrId();
        if (!completion.isSuccess())
        {
            if (failure == null)
            {
                failure = new IOException("RDMA " + (completion.isReceive() ? "receive" : "send") + " to " +
                    remoteAddress + " failed: " + completion.status());
            }
            if (!completion.isReceive() && index >= 0 && index < SEND_BUFFERS)
            {
                onSendCompleted(index);
            }
            return;
        }
        if (completion.isReceive())
        {
            final int tail = (readyHead + readyCount) % receiveDepth;
            readyIndex[tail] = index;
            readyLength[tail] = completion.byteLength();
            readyCount++;
        }
        else
        {
            onSendCompleted(index);
        }
    }

    private void onSendCompleted(final int index)
    {
        if (sendBusy[index] && zeroCopyFrame[index] >= 0)
        {
            zeroCopyInFlight--;
        }
        sendBusy[index] = false;
        zeroCopyFrame[index] = -1;
    }

    /**
     * Blocks on the endpoint's completion channel: armed, polled once more (a completion that came before the
     * arming raises no event), then a wait that a completion, a connection event or {@link #wakeup()} ends at once,
     * through an interrupt rather than a timer. Timed naps cost the idle owner a timer each (about 55 us of CPU per
     * park in the emulated test VM) and delayed every completion by up to a nap: for a sync group over RDMA, each
     * acknowledgement.
     */
    @Override
    public void awaitIo(final long timeoutMs) throws IOException
    {
        endpoint.pollEvents(System.nanoTime());
        if (!endpoint.isEstablished())
        {
            LockSupport.parkNanos(Math.min(MAX_PARK_NS, timeoutMs * 1_000_000L));
            return;
        }
        endpoint.armCompletionEvents();
        final long before = completions;
        poll();
        if (completions != before || readyCount > 0 || failure != null)
        {
            return;
        }
        endpoint.awaitEvents((int)Math.min(Integer.MAX_VALUE, timeoutMs));
    }

    /**
     * Any thread: ends the owner's current or next wait in {@link #awaitIo(long)}: the eventfd keeps a wake-up
     * that comes before the wait starts, so none is lost (callers that wake often check their own sleeping flag
     * first, as the shipper does). One system call.
     */
    @Override
    public void wakeup()
    {
        endpoint.wakeup();
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
        // The endpoint destroys its queue pair first; only then may the memory it used be deregistered. The slab's
        // registration is the device's, not ours: once the queue pair is gone nothing reads a slot any more.
        endpoint.close();
        sendMemory.close();
        receiveMemory.close();
        // The queue pair is gone: no device reads a payload any more.
        zeroCopyInFlight = 0;
        Arrays.fill(zeroCopyFrame, -1);
    }
}
