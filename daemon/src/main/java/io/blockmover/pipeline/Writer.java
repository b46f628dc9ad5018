package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.protocol.FrameType;

/**
 * Destination stage 2: writes received chunks to the volume with O_DIRECT, then makes a batch durable with one
 * force (group commit) and only then acknowledges each chunk of it, so an ACK always means "durable here".
 * Checksum requests and CLOSE come through the same ring, after every write they must follow. A slot is released
 * to the receiver before its ACK leaves, so the credit an ACK returns is always backed by a free slot.
 * Allocates nothing per chunk.
 */
public final class Writer implements Agent
{
    /** Events handled before a force: bounds the time a batch waits for its ACKs. */
    private static final int MAX_BATCH = 64;

    private final DestinationSession session;
    private final CRC32C crc32c = new CRC32C();
    private final long[] pendingAcks;
    private final UnsafeBuffer message = new UnsafeBuffer(new byte[16]);
    private final AtomicCounter chunksWritten;
    private final AtomicCounter forces;
    private int pendingAckCount;

    /**
     * @param session shared with the receiver.
     */
    public Writer(final DestinationSession session)
    {
        this.session = session;
        this.pendingAcks = new long[session.slotCount() * 2];
        this.chunksWritten = session.cnc.counter(SystemCounter.CHUNKS_WRITTEN);
        this.forces = session.cnc.counter(SystemCounter.VOLUME_FORCES);
    }

    @Override
    public String roleName()
    {
        return "writer-" + Integer.toHexString(session.sessionId);
    }

    @Override
    public int doWork()
    {
        try
        {
            final long available = session.ring.getCursor();
            long next = session.writerSequence.get() + 1;
            if (next > available)
            {
                if (!session.status.isRunning())
                {
                    // The receiver stopped (peer gone or finished): everything received is written; make it durable.
                    flushAcks();
                    session.writerDone();
                    throw new AgentTerminationException();
                }
                return 0;
            }
            int processed = 0;
            while (next <= available && processed < MAX_BATCH)
            {
                final SlotEvent event = session.ring.get(next);
                final ByteBuffer slot = session.slab.slot(session.slotBase + (int)(next & session.slotMask));
                switch (event.type)
                {
                    case SlotEvent.WRITE ->
                    {
                        session.volume.write(event.index * session.chunkLength, slot, event.length);
                        pendingAcks[pendingAckCount++] = event.index;
                        chunksWritten.incrementRelease();
                    }
                    case SlotEvent.SKIP -> emit(FrameType.NACK, event.index);
                    case SlotEvent.DIGEST_REQUEST ->
                    {
                        session.writerSequence.set(next - 1);
                        flushAcks();
                        emitDigests(event.index, event.count, slot);
                    }
                    case SlotEvent.CLOSE ->
                    {
                        session.writerSequence.set(next - 1);
                        flushAcks();
                        emitClose();
                    }
                    default -> throw new IllegalStateException("event type " + event.type);
                }
                next++;
                processed++;
            }
            session.writerSequence.set(next - 1);
            flushAcks();
            return processed;
        }
        catch (final IOException ex)
        {
            session.cnc.counter(SystemCounter.ERRORS).increment();
            session.status.fail(ErrorCode.IO_ERROR, "write to " + session.volume.path() + " failed: " +
                ex.getMessage(), false);
            session.writerDone();
            throw new AgentTerminationException(ex);
        }
    }

    private void flushAcks() throws IOException
    {
        if (pendingAckCount == 0)
        {
            return;
        }
        session.volume.force();
        forces.incrementRelease();
        for (int i = 0; i < pendingAckCount; i++)
        {
            emit(FrameType.ACK, pendingAcks[i]);
        }
        pendingAckCount = 0;
    }

    private void emit(final FrameType type, final long index)
    {
        message.putLong(0, index);
        while (!session.outbound.write(type.code(), message, 0, 8))
        {
            if (!session.status.isRunning())
            {
                return;
            }
            LockSupport.parkNanos(10_000);
        }
    }

    private void emitClose()
    {
        while (!session.outbound.write(FrameType.CLOSE.code(), message, 0, 0))
        {
            if (!session.status.isRunning())
            {
                return;
            }
            LockSupport.parkNanos(10_000);
        }
    }

    /**
     * Reads each region with O_DIRECT into the slot of this event (ours until released) and answers with their
     * CRC32C values, written straight into a claimed record of the outbound ring.
     */
    private void emitDigests(final long start, final int count, final ByteBuffer slot) throws IOException
    {
        final int length = 12 + count * 4;
        int index;
        while ((index = session.outbound.tryClaim(FrameType.DIGEST.code(), length)) <= 0)
        {
            if (!session.status.isRunning())
            {
                return;
            }
            LockSupport.parkNanos(10_000);
        }
        final UnsafeBuffer buffer = (UnsafeBuffer)session.outbound.buffer();
        try
        {
            buffer.putLong(index, start);
            buffer.putInt(index + 8, count);
            for (int i = 0; i < count; i++)
            {
                final long region = start + i;
                final int regionLength = session.lengthOf(region);
                session.volume.read(region * session.chunkLength, slot, regionLength);
                crc32c.reset();
                crc32c.update(slot);
                buffer.putInt(index + 12 + i * 4, (int)crc32c.getValue());
            }
            session.outbound.commit(index);
        }
        catch (final IOException | RuntimeException ex)
        {
            session.outbound.abort(index);
            throw ex;
        }
    }
}
