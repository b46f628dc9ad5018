package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.io.Volume;
import io.blockmover.io.ZeroCheck;
import io.blockmover.protocol.FrameType;

/**
 * Destination stage 2: writes received chunks to the volume with O_DIRECT and acknowledges each as written (ACK
 * returns its credit), then makes many of them durable with one force (group commit) and says so with one
 * DURABLE, which covers every ACK sent before it. The source clears a chunk's dirty bit only on DURABLE, so a
 * crash of either host costs a resend, never a gap. Forcing once per {@code flushChunks} chunks or
 * {@code flushIntervalNs} instead of per batch matters: on this kind of host a flush costs in proportion to the
 * cached bytes it pushes out, and frequent small ones halve the throughput.
 * <p>
 * Checksum requests and CLOSE come through the same ring, after every write they must follow; both force first.
 * A slot is released to the receiver before its ACK leaves, so the credit an ACK returns is always backed by a
 * free slot. Allocates nothing per chunk.
 */
public final class Writer implements Agent
{
    /** Events handled per duty cycle. */
    private static final int MAX_BATCH = 64;

    private final DestinationSession session;
    private final NanoClock clock;
    private final CRC32C crc32c = new CRC32C();
    private final long[] batchAcks = new long[MAX_BATCH];
    private final UnsafeBuffer message = new UnsafeBuffer(new byte[16]);
    private final ZeroCheck zeroCheck = new ZeroCheck();
    private final UnsafeBuffer slotView = new UnsafeBuffer(0, 0);
    private final AtomicCounter chunksWritten;
    private final AtomicCounter forces;
    private int batchAckCount;
    private int unforcedChunks;
    private long firstUnforcedNs;

    /**
     * @param session shared with the receiver.
     * @param clock   for the flush interval.
     */
    public Writer(final DestinationSession session, final NanoClock clock)
    {
        this.session = session;
        this.clock = clock;
        this.chunksWritten = session.cnc.counter(SystemCounter.CHUNKS_WRITTEN);
        this.forces = session.cnc.counter(SystemCounter.VOLUME_FORCES);
    }

    @Override
    public String roleName()
    {
        return "writer-" + Integer.toHexString(session.sessionId);
    }

    /**
     * A chunk of zeros becomes a hole where the destination deallocates (a sparse file, a block device: a thin
     * volume stays thin where the source holds nothing), and so do the zero pieces of a chunk that also holds data
     * (a sparse source's data around its holes); otherwise, and for any other chunk, it is written.
     */
    private void writeOrDeallocate(final long position, final ByteBuffer slot, final int length) throws IOException
    {
        final Volume volume = session.volume;
        if (ZeroCheck.worthChecking(volume, position, length))
        {
            slot.clear().limit(length);
            if (zeroCheck.isAllZeros(slot) && volume.deallocate(position, length))
            {
                return;
            }
            // One pass over the pieces: a chunk with none of zeros is one write, as below.
            zeroCheck.writeAroundZeroPieces(volume, position, slot, length);
            return;
        }
        volume.write(position, slot, length);
    }

    /**
     * A chunk the source sent as zeros, without them: a hole where the destination deallocates, else the zeros
     * written from the slot, cleared for it.
     */
    private void writeZeros(final long position, final ByteBuffer slot, final int length) throws IOException
    {
        final Volume volume = session.volume;
        if (ZeroCheck.worthChecking(volume, position, length) && volume.deallocate(position, length))
        {
            return;
        }
        slotView.wrap(slot, 0, length);
        slotView.setMemory(0, length, (byte)0);
        volume.write(position, slot.clear().limit(length), length);
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
                    forceAndAnnounce();
                    session.writerDone();
                    throw new AgentTerminationException();
                }
                if (unforcedChunks > 0 && clock.nanoTime() - firstUnforcedNs >= session.flushIntervalNs)
                {
                    forceAndAnnounce();
                    session.connection.wakeup();
                    return 1;
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
                        writeOrDeallocate(event.index * session.chunkLength, slot, event.length);
                        batchAcks[batchAckCount++] = event.index;
                        chunksWritten.incrementRelease();
                    }
                    case SlotEvent.WRITE_ZEROES ->
                    {
                        writeZeros(event.index * session.chunkLength, slot, event.length);
                        batchAcks[batchAckCount++] = event.index;
                        chunksWritten.incrementRelease();
                    }
                    case SlotEvent.SKIP -> emit(FrameType.NACK, event.index);
                    case SlotEvent.DIGEST_REQUEST ->
                    {
                        releaseAndAcknowledge(next - 1);
                        forceAndAnnounce();
                        emitDigests(event.index, event.count, slot);
                    }
                    case SlotEvent.CLOSE ->
                    {
                        releaseAndAcknowledge(next - 1);
                        forceAndAnnounce();
                        emit(FrameType.CLOSE, 0);
                    }
                    default -> throw new IllegalStateException("event type " + event.type);
                }
                next++;
                processed++;
            }
            releaseAndAcknowledge(next - 1);
            if (unforcedChunks >= session.flushChunks)
            {
                forceAndAnnounce();
            }
            session.connection.wakeup(); // The receiver sends what we emitted.
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
        catch (final RuntimeException ex)
        {
            final AgentTerminationException end = session.status.failOn(ex, ErrorCode.IO_ERROR); // A bug: see failOn.
            session.writerDone(); // Again when the stage's own end came this way: a flag.
            throw end;
        }
    }

    /**
     * Releases slots up to {@code sequence}, then acknowledges the chunks written from them: in that order, so a
     * credit never outruns a free slot.
     */
    private void releaseAndAcknowledge(final long sequence)
    {
        session.writerSequence.set(sequence);
        if (batchAckCount > 0 && unforcedChunks == 0)
        {
            firstUnforcedNs = clock.nanoTime();
        }
        for (int i = 0; i < batchAckCount; i++)
        {
            emit(FrameType.ACK, batchAcks[i]);
        }
        unforcedChunks += batchAckCount;
        batchAckCount = 0;
    }

    private void forceAndAnnounce() throws IOException
    {
        if (unforcedChunks == 0)
        {
            return;
        }
        session.volume.force();
        forces.incrementRelease();
        unforcedChunks = 0;
        emit(FrameType.DURABLE, 0);
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
                session.volume.read(region * session.chunkLength, slot, session.lengthOf(region));
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
