package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.protocol.ProtocolException;

/**
 * Source stage 2: owns the connection for the life of the session. Sends the chunks the {@link Reader}
 * published, within the credits the destination granted; takes ACKs (clear the dirty bit: the chunk is durable
 * there), NACKs (the chunk arrived damaged: read and send it again) and region checksums; decides the phase.
 * <p>
 * A chunk's slot goes back to the Reader only when the connection has released its frame
 * ({@link io.blockmover.transport.FrameConnection#framesReleased()}): over RDMA the device reads the slot itself,
 * after the post, so several chunks can be on the wire while their slots stay untouched. Slots are handed back in
 * ring order. Allocates nothing per frame.
 */
public final class Sender implements Agent
{
    private static final int DIGEST_WINDOW_BATCHES = 4;

    private final SourceSession session;
    private final NanoClock clock;
    private final FrameHeader sendHeader = new FrameHeader();
    private final FrameHeader receiveHeader = new FrameHeader();
    private final CRC32C crc32c = new CRC32C();
    private final ByteBuffer receivePayload =
        BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64).order(ByteOrder.LITTLE_ENDIAN);
    private final AtomicCounter chunksSent;
    private final AtomicCounter bytesSent;
    private final AtomicCounter chunksResent;
    private final AtomicCounter regionsCompared;
    private final AtomicCounter regionsDifferentCounter;
    private final AtomicCounter verifyMismatchesCounter;
    private final AtomicCounter frameErrors;

    /** Chunks sent whose frames the connection has not released: their frame numbers and ring sequences, FIFO. */
    private final long[] onWireFrame;
    private final long[] onWireSequence;
    private int onWireHead;
    private int onWireCount;
    private long credits;
    private long nextSequence;
    private boolean headerReceived;
    private long lastSendNs;
    private long lastReceiveNs;
    private long digestsRequested;
    private long remoteDigests;
    private long localDigests;
    private long digestsCompared;
    private long regionsDifferent;
    private long mismatches;
    private int verifyRound;
    private boolean closeSent;
    private int writtenNotDurableCount;

    /**
     * @param session shared with the reader.
     * @param clock   for heartbeats and the peer timeout.
     */
    public Sender(final SourceSession session, final NanoClock clock)
    {
        this.session = session;
        this.clock = clock;
        this.credits = session.initialCredits;
        this.onWireFrame = new long[session.slotCount()];
        this.onWireSequence = new long[session.slotCount()];
        this.chunksSent = session.cnc.counter(SystemCounter.CHUNKS_SENT);
        this.bytesSent = session.cnc.counter(SystemCounter.BYTES_SENT);
        this.chunksResent = session.cnc.counter(SystemCounter.CHUNKS_RESENT);
        this.regionsCompared = session.cnc.counter(SystemCounter.REGIONS_COMPARED);
        this.regionsDifferentCounter = session.cnc.counter(SystemCounter.REGIONS_DIFFERENT);
        this.verifyMismatchesCounter = session.cnc.counter(SystemCounter.VERIFY_MISMATCHES);
        this.frameErrors = session.cnc.counter(SystemCounter.FRAME_ERRORS);
    }

    @Override
    public String roleName()
    {
        return "sender-" + Integer.toHexString(session.sessionId);
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
            work += receive();
            final boolean flushed = session.connection.flush();
            releaseSlots();
            if (!flushed)
            {
                return work;
            }
            switch (session.phase())
            {
                case SourceSession.PHASE_SEED, SourceSession.PHASE_VERIFY -> work += digestWork();
                case SourceSession.PHASE_COPY -> work += copyWork();
                case SourceSession.PHASE_FINISH -> work += finishWork();
                default -> throw new IllegalStateException("phase " + session.phase());
            }
            work += keepAlive();
        }
        catch (final IOException ex)
        {
            session.cnc.counter(SystemCounter.CONNECTIONS_LOST).increment();
            session.status.fail(ex instanceof ProtocolException ? ErrorCode.PROTOCOL_ERROR : ErrorCode.PEER_UNREACHABLE,
                "connection to " + session.connection.remoteAddress() + " lost: " + ex.getMessage(), true);
            throw new AgentTerminationException(ex);
        }
        catch (final RuntimeException ex)
        {
            throw session.status.failOn(ex, ErrorCode.PEER_UNREACHABLE); // A bug: ends the session once.
        }
        return work;
    }

    private int copyWork() throws IOException
    {
        int work = 0;
        final long available = session.ring.getCursor();
        while (nextSequence <= available && !session.connection.isSendPending())
        {
            final SlotEvent event = session.ring.get(nextSequence);
            final boolean zeros = event.type == SlotEvent.ZERO_CHUNK;
            if ((event.type == SlotEvent.CHUNK || zeros) && session.dirty.get(event.index))
            {
                if (credits <= 0)
                {
                    break;
                }
                final int onWire = zeros ? 0 : event.length;
                if (!session.rateLimit.tryAcquire(onWire, clock.nanoTime()))
                {
                    break; // Out of tokens: idle (at most a millisecond) and try again.
                }
                final ByteBuffer slot = zeros ? null :
                    session.slab.slot(session.slotBase + (int)(nextSequence & session.slotMask));
                if (slot != null)
                {
                    slot.limit(event.length).position(0);
                }
                sendHeader.reset(FrameType.CHUNK)
                    .sessionId(session.sessionId)
                    .sequence(event.index)
                    .offset(event.index * session.chunkLength)
                    .payloadLength(onWire)
                    .payloadCrc(event.crc)
                    .aux(zeros ? FrameDescriptor.CHUNK_ZEROES : 0)
                    .seal();
                final int tail = (onWireHead + onWireCount) % onWireFrame.length;
                onWireFrame[tail] = session.connection.framesStarted(); // Numbered with the handshake's frames.
                onWireSequence[tail] = nextSequence++;
                onWireCount++;
                send(sendHeader, slot);
                credits--;
                chunksSent.incrementRelease();
                bytesSent.getAndAddRelease(onWire);
                if (zeros)
                {
                    session.zeroBytesSent(event.length);
                }
                work++;
            }
            else
            {
                // A chunk acknowledged meanwhile, or an event of an earlier phase: let the slot go.
                releaseStale(event);
                nextSequence++;
                work++;
            }
            releaseSlots();
        }
        if (session.dirty.cardinality() == 0 && nextSequence > session.ring.getCursor())
        {
            if (session.verify)
            {
                startDigestPhase(SourceSession.PHASE_VERIFY);
            }
            else
            {
                session.phase(SourceSession.PHASE_FINISH);
            }
            work++;
        }
        return work;
    }

    /**
     * Hands the Reader back every slot up to the first chunk whose frame the connection still reads.
     */
    private void releaseSlots()
    {
        final long released = session.connection.framesReleased();
        while (onWireCount > 0 && onWireFrame[onWireHead] < released)
        {
            onWireHead = (onWireHead + 1) % onWireFrame.length;
            onWireCount--;
        }
        session.senderSequence.set(onWireCount > 0 ? onWireSequence[onWireHead] - 1 : nextSequence - 1);
    }

    private void releaseStale(final SlotEvent event)
    {
        if (event.type == SlotEvent.CHUNK || event.type == SlotEvent.ZERO_CHUNK)
        {
            session.inflight.clear(event.index);
        }
    }

    private void startDigestPhase(final int phase)
    {
        digestsRequested = 0;
        remoteDigests = 0;
        localDigests = 0;
        digestsCompared = 0;
        mismatches = 0;
        session.phase(phase);
    }

    private int digestWork() throws IOException
    {
        int work = 0;
        final long window = (long)DIGEST_WINDOW_BATCHES * session.digestBatch;
        if (!session.connection.isSendPending() && digestsRequested < session.chunkCount &&
            digestsRequested - remoteDigests < window)
        {
            final int count = (int)Math.min(session.digestBatch, session.chunkCount - digestsRequested);
            sendHeader.reset(FrameType.DIGEST_REQUEST).sessionId(session.sessionId).sequence(digestsRequested)
                .aux(count).seal();
            send(sendHeader, null);
            digestsRequested += count;
            work++;
        }

        final long available = session.ring.getCursor();
        final int epoch = session.phaseEpoch();
        while (nextSequence <= available)
        {
            final SlotEvent event = session.ring.get(nextSequence);
            if (event.type == SlotEvent.DIGEST && event.epoch == epoch)
            {
                session.localDigests[(int)event.index] = event.crc;
                localDigests = event.index + 1;
            }
            else
            {
                releaseStale(event);
            }
            nextSequence++;
            work++;
        }
        releaseSlots();

        final boolean seeding = session.phase() == SourceSession.PHASE_SEED;
        final long comparable = Math.min(localDigests, remoteDigests);
        while (digestsCompared < comparable)
        {
            final int region = (int)digestsCompared++;
            final boolean equal = session.localDigests[region] == session.remoteDigests[region];
            regionsCompared.incrementRelease();
            if (seeding)
            {
                if (equal)
                {
                    if (session.dirty.clear(region))
                    {
                        session.bytesRemaining.getAndAddRelease(-session.lengthOf(region));
                    }
                }
                else
                {
                    regionsDifferent++;
                    regionsDifferentCounter.incrementRelease();
                }
            }
            else if (!equal)
            {
                mismatches++;
                verifyMismatchesCounter.incrementRelease();
                if (session.dirty.set(region))
                {
                    session.bytesRemaining.getAndAddRelease(session.lengthOf(region));
                }
            }
            work++;
        }

        session.regionsChecked(digestsCompared);
        if (digestsCompared == session.chunkCount)
        {
            if (seeding)
            {
                session.regionsDifferent(regionsDifferent);
                session.phase(SourceSession.PHASE_COPY);
            }
            else
            {
                session.verifyMismatches(session.verifyMismatches() + mismatches);
                if (mismatches == 0)
                {
                    session.verified(true);
                    session.phase(SourceSession.PHASE_FINISH);
                }
                else if (++verifyRound >= session.verifyRounds)
                {
                    session.status.fail(ErrorCode.VERIFY_MISMATCH, mismatches + " regions still differ after " +
                        verifyRound + " verify rounds: the destination does not keep what is written to it " +
                        "(failing disk, or written behind blockmover's back?)", false);
                }
                else
                {
                    session.phase(SourceSession.PHASE_COPY);
                }
            }
            work++;
        }
        return work;
    }

    private int finishWork() throws IOException
    {
        final long available = session.ring.getCursor();
        while (nextSequence <= available)
        {
            releaseStale(session.ring.get(nextSequence++));
        }
        releaseSlots();
        if (!closeSent && !session.connection.isSendPending())
        {
            sendHeader.reset(FrameType.CLOSE).sessionId(session.sessionId).seal();
            send(sendHeader, null);
            closeSent = true;
            return 1;
        }
        return 0;
    }

    private int keepAlive() throws IOException
    {
        final long now = clock.nanoTime();
        if (now - lastReceiveNs > session.peerTimeoutNs)
        {
            session.cnc.counter(SystemCounter.PEER_TIMEOUTS).increment();
            throw new IOException("peer silent for " + (now - lastReceiveNs) / 1_000_000 + " ms");
        }
        if (now - lastSendNs > session.heartbeatIntervalNs && !session.connection.isSendPending())
        {
            sendHeader.reset(FrameType.HEARTBEAT).sessionId(session.sessionId).seal();
            send(sendHeader, null);
            return 1;
        }
        return 0;
    }

    private void send(final FrameHeader header, final ByteBuffer payload) throws IOException
    {
        if (!session.connection.startSend(header, payload))
        {
            throw new IllegalStateException("a frame was started while the previous one still waits");
        }
        lastSendNs = clock.nanoTime();
        session.connection.flush();
    }

    private int receive() throws IOException
    {
        int work = 0;
        while (true)
        {
            if (!headerReceived)
            {
                if (!session.connection.receiveHeader(receiveHeader))
                {
                    return work;
                }
                lastReceiveNs = clock.nanoTime();
                final String problem = receiveHeader.validate(FrameDescriptor.MAX_CONTROL_PAYLOAD);
                if (problem != null)
                {
                    frameErrors.increment();
                    throw new ProtocolException("bad frame from peer: " + problem);
                }
                headerReceived = true;
                receivePayload.clear().limit(receiveHeader.payloadLength());
            }
            if (!session.connection.receivePayload(receivePayload))
            {
                return work;
            }
            headerReceived = false;
            receivePayload.flip();
            if (receiveHeader.payloadLength() > 0)
            {
                crc32c.reset();
                crc32c.update(receivePayload);
                receivePayload.flip();
                if ((int)crc32c.getValue() != receiveHeader.payloadCrc())
                {
                    frameErrors.increment();
                    throw new ProtocolException("payload CRC mismatch on a " + receiveHeader.type() + " frame");
                }
            }
            onFrame();
            work++;
        }
    }

    private void onFrame() throws IOException
    {
        final FrameType type = receiveHeader.type();
        switch (type)
        {
            case ACK ->
            {
                if (writtenNotDurableCount == session.writtenNotDurable.length)
                {
                    frameErrors.increment();
                    throw new ProtocolException("peer acknowledged more chunks than it may hold unforced");
                }
                session.writtenNotDurable[writtenNotDurableCount++] = chunkIndex();
                credits++;
            }
            case DURABLE -> onDurable();
            case NACK ->
            {
                session.inflight.clear(chunkIndex());
                chunksResent.incrementRelease();
                credits++;
            }
            case CREDIT -> credits += receiveHeader.aux();
            case DIGEST -> onDigest();
            case HEARTBEAT ->
            {
            }
            case CLOSE ->
            {
                if (session.phase() != SourceSession.PHASE_FINISH)
                {
                    throw new IOException("peer closed the session before it finished");
                }
                session.status.complete();
            }
            case ERROR ->
            {
                final byte[] text = new byte[receivePayload.remaining()];
                receivePayload.get(text);
                // A failure of the peer's disk (IO_ERROR: full, failing) may pass once the operator acts: the job
                // waits and tries again, showing the cause. Anything else (refused, mismatched) ends it.
                final ErrorCode code = ErrorPayload.code(text);
                session.status.fail(code, "peer reported: " + ErrorPayload.message(text), code == ErrorCode.IO_ERROR);
                throw new AgentTerminationException();
            }
            default ->
            {
                frameErrors.increment();
                throw new ProtocolException("unexpected " + type + " frame from the destination");
            }
        }
    }

    /**
     * Every chunk acknowledged before this frame is durable on the destination: only now may its bit clear.
     */
    private void onDurable()
    {
        for (int i = 0; i < writtenNotDurableCount; i++)
        {
            final long chunk = session.writtenNotDurable[i];
            if (session.dirty.clear(chunk))
            {
                final int length = session.lengthOf(chunk);
                session.bytesRemaining.getAndAddRelease(-length);
                session.bytesCopied.getAndAddRelease(length);
            }
            session.inflight.clear(chunk);
        }
        writtenNotDurableCount = 0;
    }

    private long chunkIndex() throws IOException
    {
        final long chunk = receiveHeader.sequence();
        if (chunk < 0 || chunk >= session.chunkCount)
        {
            frameErrors.increment();
            throw new ProtocolException("peer acknowledged chunk " + chunk + " of " + session.chunkCount);
        }
        return chunk;
    }

    private void onDigest() throws IOException
    {
        final long start = receiveHeader.sequence();
        final long count = receiveHeader.aux();
        if (start != remoteDigests || count <= 0 || start + count > digestsRequested ||
            receivePayload.remaining() != count * 4)
        {
            frameErrors.increment();
            throw new ProtocolException("unexpected checksums for regions " + start + "+" + count);
        }
        for (int i = 0; i < count; i++)
        {
            session.remoteDigests[(int)(start + i)] = receivePayload.getInt();
        }
        remoteDigests = start + count;
    }
}
