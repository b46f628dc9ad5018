package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.agrona.MutableDirectBuffer;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.MessageHandler;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.protocol.ProtocolException;

/**
 * Destination stage 1: owns the connection. Reads each CHUNK's payload straight into the slot of the next ring
 * sequence, checks its CRC32C and hands it to the {@link Writer} (or, when damaged, hands over a SKIP so the
 * Writer answers NACK in order); passes checksum requests and CLOSE through the same ring so they follow every
 * write before them; encodes the Writer's replies as frames. Allocates nothing per frame.
 */
public final class Receiver implements Agent
{
    private static final int STATE_HEADER = 0;
    private static final int STATE_CLAIM = 1;
    private static final int STATE_PAYLOAD = 2;
    private static final int STATE_CONTROL_PAYLOAD = 3;

    private final DestinationSession session;
    private final NanoClock clock;
    private final FrameHeader receiveHeader = new FrameHeader();
    private final FrameHeader sendHeader = new FrameHeader();
    private final ByteBuffer controlPayload =
        BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64).order(ByteOrder.LITTLE_ENDIAN);
    private final ByteBuffer digestPayload =
        BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64).order(ByteOrder.LITTLE_ENDIAN);
    private final UnsafeBuffer digestPayloadBuffer = new UnsafeBuffer(digestPayload);
    private final CRC32C crc32c = new CRC32C();
    private final MessageHandler outboundHandler = this::onOutbound;
    private final int maxPayloadLength;
    private final AtomicCounter chunksReceived;
    private final AtomicCounter bytesReceived;
    private final AtomicCounter crcErrors;
    private final AtomicCounter frameErrors;

    private int state = STATE_HEADER;
    private long claimedSequence;
    private ByteBuffer payloadSlot;
    private long lastSendNs;
    private long lastReceiveNs;
    private boolean closing;

    /**
     * @param session shared with the writer.
     * @param clock   for heartbeats and the peer timeout.
     */
    public Receiver(final DestinationSession session, final NanoClock clock)
    {
        this.session = session;
        this.clock = clock;
        this.maxPayloadLength = Math.max(session.chunkLength, FrameDescriptor.MAX_CONTROL_PAYLOAD);
        this.chunksReceived = session.cnc.counter(SystemCounter.CHUNKS_RECEIVED);
        this.bytesReceived = session.cnc.counter(SystemCounter.BYTES_RECEIVED);
        this.crcErrors = session.cnc.counter(SystemCounter.PAYLOAD_CRC_ERRORS);
        this.frameErrors = session.cnc.counter(SystemCounter.FRAME_ERRORS);
    }

    @Override
    public String roleName()
    {
        return "receiver-" + Integer.toHexString(session.sessionId);
    }

    @Override
    public void onStart()
    {
        lastSendNs = clock.nanoTime();
        lastReceiveNs = lastSendNs;
    }

    @Override
    public int doWork()
    {
        if (!session.status.isRunning())
        {
            throw new AgentTerminationException();
        }
        int work = 0;
        try
        {
            work += drainOutbound();
            if (closing && !session.connection.isSendPending())
            {
                session.status.complete();
                throw new AgentTerminationException();
            }
            work += receive();
            work += keepAlive();
        }
        catch (final IOException ex)
        {
            session.cnc.counter(SystemCounter.CONNECTIONS_LOST).increment();
            session.status.fail(ex instanceof ProtocolException ? ErrorCode.PROTOCOL_ERROR : ErrorCode.PEER_UNREACHABLE,
                "connection from " + session.connection.remoteAddress() + " lost: " + ex.getMessage(), true);
            throw new AgentTerminationException(ex);
        }
        catch (final RuntimeException ex)
        {
            throw session.status.failOn(ex, ErrorCode.PEER_UNREACHABLE); // A bug: ends the session once.
        }
        return work;
    }

    private int drainOutbound() throws IOException
    {
        int work = 0;
        while (session.connection.flush() && !closing)
        {
            if (session.outbound.read(outboundHandler, 1) == 0)
            {
                break;
            }
            work++;
        }
        return work;
    }

    private void onOutbound(final int msgTypeId, final MutableDirectBuffer buffer, final int index, final int length)
    {
        final FrameType type = FrameType.fromCode(msgTypeId);
        sendHeader.reset(type).sessionId(session.sessionId);
        ByteBuffer payload = null;
        switch (type)
        {
            case ACK, NACK -> sendHeader.sequence(buffer.getLong(index));
            case DURABLE ->
            {
            }
            case DIGEST ->
            {
                final int count = buffer.getInt(index + 8);
                digestPayloadBuffer.putBytes(0, buffer, index + 12, count * 4);
                digestPayload.clear().limit(count * 4);
                sendHeader.sequence(buffer.getLong(index)).aux(count).controlPayload(digestPayload);
                payload = digestPayload;
            }
            case CLOSE -> closing = true;
            default -> throw new IllegalStateException("unexpected outbound message " + type);
        }
        sendHeader.seal();
        session.connection.startSend(sendHeader, payload);
        lastSendNs = clock.nanoTime();
    }

    private int receive() throws IOException
    {
        int work = 0;
        while (true)
        {
            switch (state)
            {
                case STATE_HEADER ->
                {
                    if (!session.connection.receiveHeader(receiveHeader))
                    {
                        return work;
                    }
                    lastReceiveNs = clock.nanoTime();
                    onHeader();
                }
                case STATE_CLAIM ->
                {
                    if (!session.ring.hasAvailableCapacity(1))
                    {
                        return work; // The writer is behind: wait for it, TCP pushes back on the peer.
                    }
                    claim();
                }
                case STATE_PAYLOAD ->
                {
                    if (!session.connection.receivePayload(payloadSlot))
                    {
                        return work;
                    }
                    onChunk();
                    work++;
                }
                case STATE_CONTROL_PAYLOAD ->
                {
                    if (!session.connection.receivePayload(controlPayload))
                    {
                        return work;
                    }
                    onControlPayload();
                }
                default -> throw new IllegalStateException("state " + state);
            }
        }
    }

    private void onHeader() throws IOException
    {
        final String problem = receiveHeader.validate(maxPayloadLength);
        if (problem != null)
        {
            throw protocolError("bad frame: " + problem);
        }
        if (receiveHeader.sessionId() != session.sessionId)
        {
            throw protocolError("frame of session " + receiveHeader.sessionId() + " on session " + session.sessionId);
        }
        final FrameType type = receiveHeader.type();
        switch (type)
        {
            case CHUNK ->
            {
                final long index = receiveHeader.sequence();
                final boolean zeros = (receiveHeader.aux() & FrameDescriptor.CHUNK_ZEROES) != 0;
                if (index < 0 || index >= session.chunkCount() ||
                    receiveHeader.offset() != index * session.chunkLength ||
                    receiveHeader.payloadLength() != (zeros ? 0 : session.lengthOf(index)))
                {
                    throw protocolError("chunk " + index + " at offset " + receiveHeader.offset() + " length " +
                        receiveHeader.payloadLength() + " is outside the volume's geometry");
                }
                state = STATE_CLAIM;
            }
            case DIGEST_REQUEST ->
            {
                final long start = receiveHeader.sequence();
                final long count = receiveHeader.aux();
                if (start < 0 || count <= 0 || count * 4 > FrameDescriptor.MAX_CONTROL_PAYLOAD ||
                    start + count > session.chunkCount())
                {
                    throw protocolError("checksum request for regions " + start + "+" + count + " out of range");
                }
                state = STATE_CLAIM;
            }
            case CLOSE -> state = STATE_CLAIM;
            case HEARTBEAT -> state = STATE_HEADER;
            case ERROR ->
            {
                controlPayload.clear().limit(receiveHeader.payloadLength());
                state = STATE_CONTROL_PAYLOAD;
            }
            default -> throw protocolError("unexpected " + type + " frame from the source");
        }
    }

    private void claim()
    {
        claimedSequence = session.ring.next();
        final SlotEvent event = session.ring.get(claimedSequence);
        final FrameType type = receiveHeader.type();
        if (type == FrameType.CHUNK && (receiveHeader.aux() & FrameDescriptor.CHUNK_ZEROES) != 0)
        {
            // Nothing follows: the chunk's length is the volume's geometry, its bytes zeros.
            final long index = receiveHeader.sequence();
            event.set(SlotEvent.WRITE_ZEROES, 0, index, session.lengthOf(index), 0, 0);
            session.ring.publish(claimedSequence);
            chunksReceived.incrementRelease();
            state = STATE_HEADER;
            return;
        }
        if (type == FrameType.CHUNK)
        {
            payloadSlot = session.slab.slot(session.slotBase + (int)(claimedSequence & session.slotMask));
            payloadSlot.clear().limit(receiveHeader.payloadLength());
            state = STATE_PAYLOAD;
            return;
        }
        if (type == FrameType.DIGEST_REQUEST)
        {
            event.set(SlotEvent.DIGEST_REQUEST, 0, receiveHeader.sequence(), 0, 0, (int)receiveHeader.aux());
        }
        else
        {
            event.set(SlotEvent.CLOSE, 0, 0, 0, 0, 0);
        }
        session.ring.publish(claimedSequence);
        state = STATE_HEADER;
    }

    private void onChunk()
    {
        payloadSlot.flip();
        crc32c.reset();
        crc32c.update(payloadSlot);
        final int length = receiveHeader.payloadLength();
        final boolean intact = (int)crc32c.getValue() == receiveHeader.payloadCrc();
        if (!intact)
        {
            crcErrors.increment();
        }
        session.ring.get(claimedSequence).set(intact ? SlotEvent.WRITE : SlotEvent.SKIP, 0,
            receiveHeader.sequence(), length, receiveHeader.payloadCrc(), 0);
        session.ring.publish(claimedSequence);
        chunksReceived.incrementRelease();
        bytesReceived.getAndAddRelease(length);
        state = STATE_HEADER;
    }

    private void onControlPayload()
    {
        controlPayload.flip();
        final byte[] text = new byte[controlPayload.remaining()];
        controlPayload.get(text);
        session.status.fail(ErrorPayload.code(text), "source reported: " + ErrorPayload.message(text), false);
        throw new AgentTerminationException();
    }

    private int keepAlive() throws IOException
    {
        final long now = clock.nanoTime();
        if (now - lastReceiveNs > session.peerTimeoutNs)
        {
            session.cnc.counter(SystemCounter.PEER_TIMEOUTS).increment();
            throw new IOException("source silent for " + (now - lastReceiveNs) / 1_000_000 + " ms");
        }
        if (now - lastSendNs > session.heartbeatIntervalNs && !session.connection.isSendPending())
        {
            sendHeader.reset(FrameType.HEARTBEAT).sessionId(session.sessionId).seal();
            session.connection.startSend(sendHeader, null);
            lastSendNs = now;
            session.connection.flush();
            return 1;
        }
        return 0;
    }

    private ProtocolException protocolError(final String message)
    {
        frameErrors.increment();
        return new ProtocolException(message);
    }
}
