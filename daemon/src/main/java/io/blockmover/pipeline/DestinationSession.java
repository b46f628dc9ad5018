package io.blockmover.pipeline;

import java.nio.ByteBuffer;

import com.lmax.disruptor.RingBuffer;
import com.lmax.disruptor.Sequence;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.ringbuffer.OneToOneRingBuffer;
import org.agrona.concurrent.ringbuffer.RingBufferDescriptor;

import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.io.Volume;
import io.blockmover.transport.FrameConnection;

/**
 * The state a copy session shares between its {@link Receiver} and its {@link Writer} on the destination host.
 * Receiver to Writer: a Disruptor ring of slot events (the slot is implied by the sequence). Writer to Receiver:
 * an Agrona one-to-one ring buffer of small replies (ACK, NACK, DIGEST, CLOSE) that the Receiver encodes as
 * frames, so that only the Receiver ever touches the connection.
 */
public final class DestinationSession
{
    /** Outbound reply message: ACK (u64 chunk index). Message type ids are frame type codes. */
    static final int OUTBOUND_CAPACITY = 1024 * 1024;

    final int sessionId;
    final Volume volume;
    final long volumeLength;
    final int chunkLength;
    final Slab slab;
    final int slotBase;
    final int slotMask;
    final RingBuffer<SlotEvent> ring;
    final Sequence writerSequence = new Sequence();
    final OneToOneRingBuffer outbound;
    final FrameConnection connection;
    final long heartbeatIntervalNs;
    final long peerTimeoutNs;
    final int flushChunks;
    final long flushIntervalNs;
    final CncFile cnc;
    final SessionStatus status = new SessionStatus();
    private volatile boolean writerDone;

    /**
     * @param sessionId           chosen by the source, carried in every frame.
     * @param volume              destination volume, open for writing.
     * @param volumeLength        bytes the source will write (its volume size), at most volume.size().
     * @param chunkLength         bytes per chunk.
     * @param slab                shared slab.
     * @param slotBase            first leased slot.
     * @param slotCount           leased slots, a power of two: the credits granted.
     * @param connection          to the source, handshake done.
     * @param heartbeatIntervalNs heartbeat when idle this long.
     * @param peerTimeoutNs       peer considered gone when silent this long.
     * @param flushChunks         force the volume after this many chunks written...
     * @param flushIntervalNs     ...or this long after the first unforced write.
     * @param cnc                 counters.
     */
    public DestinationSession(
        final int sessionId,
        final Volume volume,
        final long volumeLength,
        final int chunkLength,
        final Slab slab,
        final int slotBase,
        final int slotCount,
        final FrameConnection connection,
        final long heartbeatIntervalNs,
        final long peerTimeoutNs,
        final int flushChunks,
        final long flushIntervalNs,
        final CncFile cnc)
    {
        this.sessionId = sessionId;
        this.volume = volume;
        this.volumeLength = volumeLength;
        this.chunkLength = chunkLength;
        this.slab = slab;
        this.slotBase = slotBase;
        this.slotMask = slotCount - 1;
        this.ring = RingBuffer.createSingleProducer(SlotEvent::new, slotCount);
        this.ring.addGatingSequences(writerSequence);
        final ByteBuffer outboundMemory =
            BufferUtil.allocateDirectAligned(OUTBOUND_CAPACITY + RingBufferDescriptor.TRAILER_LENGTH, 64);
        this.outbound = new OneToOneRingBuffer(new UnsafeBuffer(outboundMemory));
        this.connection = connection;
        this.heartbeatIntervalNs = heartbeatIntervalNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.flushChunks = flushChunks;
        this.flushIntervalNs = flushIntervalNs;
        this.cnc = cnc;
    }

    public SessionStatus status()
    {
        return status;
    }

    public FrameConnection connection()
    {
        return connection;
    }

    public int slotBase()
    {
        return slotBase;
    }

    public int slotCount()
    {
        return slotMask + 1;
    }

    public Volume volume()
    {
        return volume;
    }

    /**
     * @return whether the writer has written and forced everything it was given and stopped.
     */
    public boolean isWriterDone()
    {
        return writerDone;
    }

    void writerDone()
    {
        writerDone = true;
    }

    /**
     * @param index of a chunk.
     * @return its length.
     */
    int lengthOf(final long index)
    {
        return (int)Math.min(chunkLength, volumeLength - index * chunkLength);
    }

    long chunkCount()
    {
        return (volumeLength + chunkLength - 1) / chunkLength;
    }
}
