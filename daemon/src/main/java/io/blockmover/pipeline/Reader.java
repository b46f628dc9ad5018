package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.zip.CRC32C;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.io.ZeroCheck;

/**
 * Source stage 1: reads dirty chunks of the volume with O_DIRECT into slots, computes each chunk's CRC32C on the
 * bytes as read, and publishes the slot to the {@link Sender}. In a checksum phase it reads every region in order
 * and publishes its checksum instead. One chunk per duty cycle; blocks only in the read itself. Allocates
 * nothing.
 */
public final class Reader implements Agent
{
    private final SourceSession session;
    private final CRC32C crc32c = new CRC32C();
    private final ZeroCheck zeroCheck = new ZeroCheck();
    private int epoch = -1;
    private long cursor;
    private boolean wrapped;

    /**
     * @param session shared with the sender.
     */
    public Reader(final SourceSession session)
    {
        this.session = session;
    }

    @Override
    public String roleName()
    {
        return "reader-" + Integer.toHexString(session.sessionId);
    }

    @Override
    public int doWork()
    {
        if (!session.status.isRunning())
        {
            throw new AgentTerminationException();
        }
        final int currentEpoch = session.phaseEpoch();
        final int phase = session.phase();
        if (currentEpoch != epoch)
        {
            epoch = currentEpoch;
            cursor = 0;
            wrapped = false;
        }
        try
        {
            if (phase == SourceSession.PHASE_COPY)
            {
                return readNextDirtyChunk();
            }
            if (phase == SourceSession.PHASE_SEED || phase == SourceSession.PHASE_VERIFY)
            {
                return readNextRegionDigest();
            }
            return 0;
        }
        catch (final IOException ex)
        {
            session.cnc.counter(SystemCounter.ERRORS).increment();
            session.status.fail(ErrorCode.IO_ERROR, "read of " + session.volume.path() + " failed at chunk " +
                cursor + ": " + ex.getMessage(), false);
            throw new AgentTerminationException(ex);
        }
        catch (final RuntimeException ex)
        {
            throw session.status.failOn(ex, ErrorCode.IO_ERROR); // A bug: ends the session once (see failOn).
        }
    }

    private int readNextDirtyChunk() throws IOException
    {
        if (!session.ring.hasAvailableCapacity(1))
        {
            return 0;
        }
        final long chunk = nextDirtyNotInFlight();
        if (chunk < 0)
        {
            return 0;
        }
        session.inflight.set(chunk);
        final long sequence = session.ring.next();
        final ByteBuffer slot = session.slab.slot(session.slotBase + (int)(sequence & session.slotMask));
        final int length = session.lengthOf(chunk);
        session.ring.get(sequence).type = SlotEvent.NONE;
        try
        {
            final long position = chunk * session.chunkLength;
            // An empty chunk (most of a thin volume's) goes as such, without its zeros, where the destination takes
            // that: one that is a hole of its file is not even read, and random data fails the compare at its first
            // bytes.
            final boolean hole = session.zeroChunks && session.volume.isHole(position, length);
            if (!hole)
            {
                session.volume.read(position, slot, length);
            }
            if (hole || session.zeroChunks && zeroCheck.isAllZeros(slot))
            {
                session.ring.get(sequence).set(SlotEvent.ZERO_CHUNK, epoch, chunk, length, 0, 0);
            }
            else
            {
                session.ring.get(sequence).set(SlotEvent.CHUNK, epoch, chunk, length, crc(slot), 0);
            }
        }
        finally
        {
            session.ring.publish(sequence);
            session.connection.wakeup();
        }
        cursor = chunk + 1;
        return 1;
    }

    /**
     * Finds the next chunk that is dirty and not already on its way, wrapping once to pick up chunks that came
     * back damaged (NACK). Re-checks dirty after in-flight, since an ACK clears dirty before in-flight.
     */
    private long nextDirtyNotInFlight()
    {
        while (true)
        {
            long chunk = session.dirty.nextSetBit(cursor);
            while (chunk >= 0 && session.inflight.get(chunk))
            {
                chunk = session.dirty.nextSetBit(chunk + 1);
            }
            if (chunk >= 0 && session.dirty.get(chunk))
            {
                wrapped = false;
                return chunk;
            }
            if (chunk >= 0)
            {
                cursor = chunk + 1;
                continue;
            }
            if (wrapped || cursor == 0)
            {
                // Nothing to read now: wait for ACKs or NACKs, then scan again from the start.
                cursor = 0;
                wrapped = false;
                return -1;
            }
            cursor = 0;
            wrapped = true;
        }
    }

    private int readNextRegionDigest() throws IOException
    {
        if (cursor >= session.chunkCount || !session.ring.hasAvailableCapacity(1))
        {
            return 0;
        }
        final long sequence = session.ring.next();
        final ByteBuffer slot = session.slab.slot(session.slotBase + (int)(sequence & session.slotMask));
        final int length = session.lengthOf(cursor);
        session.ring.get(sequence).type = SlotEvent.NONE;
        try
        {
            session.volume.read(cursor * session.chunkLength, slot, length);
            session.ring.get(sequence).set(SlotEvent.DIGEST, epoch, cursor, length, crc(slot), 0);
        }
        finally
        {
            session.ring.publish(sequence);
            session.connection.wakeup();
        }
        cursor++;
        return 1;
    }

    private int crc(final ByteBuffer slot)
    {
        crc32c.reset();
        crc32c.update(slot);
        return (int)crc32c.getValue();
    }
}
