package io.blockmover.replication.verify;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.atomic.AtomicLong;

import org.agrona.BufferUtil;

import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.transport.FrameConnection;

/**
 * The destination's side of verify: the applier hands it each VERIFY record when it reaches the record's LSN,
 * so every earlier record is on the volume and no later one yet; it digests its own copy of the region and
 * queues the result, which the group's receiver sends back as a VERIFY_RESULT frame. The queue is a
 * pre-allocated single-producer (applier thread) single-consumer (receiver thread) ring: nothing allocates per
 * record. Results survive a lost session in the ring (the source ignores results of a job it no longer runs).
 */
public final class DestinationVerifier
{
    private static final int CAPACITY = 1024;

    private final int regionLength;
    private final VerifyRecord record = new VerifyRecord();
    private final long[] lsns = new long[CAPACITY];
    private final long[] jobIds = new long[CAPACITY];
    private final long[] offsets = new long[CAPACITY];
    private final long[] masks = new long[CAPACITY];
    private final int[] volumes = new int[CAPACITY];
    private final int[] statuses = new int[CAPACITY];
    private final AtomicLong head = new AtomicLong();
    private final AtomicLong tail = new AtomicLong();
    private final ByteBuffer resultPayload =
        BufferUtil.allocateDirectAligned(VerifyRecord.RESULT_LENGTH, 64).order(ByteOrder.LITTLE_ENDIAN);
    private volatile long regionsChecked;
    private volatile long regionsDifferent;
    private volatile long resultsDropped;
    private volatile Runnable resultQueued = () -> { };

    /**
     * @param regionLength the group's region length.
     */
    public DestinationVerifier(final int regionLength)
    {
        this.regionLength = regionLength;
    }

    /**
     * Compares this side's copy of a region with a VERIFY record's digests and queues the result; a record of job
     * id 0 is passed over. Applier thread.
     *
     * @param lsn     the record's LSN.
     * @param volume  the record's volume index.
     * @param offset  the record's offset: the region's first byte.
     * @param payload the record's payload (digests), position..limit.
     * @param target  the destination volume.
     * @param buffer  aligned scratch buffer of at least one region.
     */
    public void check(final long lsn, final int volume, final long offset, final ByteBuffer payload,
        final Volume target, final ByteBuffer buffer)
    {
        final long jobId = payload.remaining() >= VerifyRecord.DIGESTS_OFFSET ? record.jobId(payload) : 0;
        if (jobId == 0)
        {
            // Voided by the source (it found the record damaged in its own log and compares the region again), or
            // no job's: an answer would belong to nobody, and a comparison would count a difference that is not.
            return;
        }
        int status = VerifyRecord.STATUS_COMPARED;
        long mask;
        if (record.check(payload, regionLength) != null || offset % regionLength != 0 ||
            offset + record.covered(payload) > target.size())
        {
            status = VerifyRecord.STATUS_MALFORMED;
            mask = -1L;
        }
        else
        {
            try
            {
                target.read(offset, buffer, record.covered(payload));
                mask = record.compare(payload, buffer);
            }
            catch (final IOException ex)
            {
                status = VerifyRecord.STATUS_READ_ERROR;
                mask = -1L;
            }
        }
        regionsChecked++;
        if (mask != 0)
        {
            regionsDifferent++;
        }
        final long t = tail.get();
        if (t - head.get() >= CAPACITY)
        {
            // Only a source that ignores the window could fill it; its job then times out and says so.
            resultsDropped++;
            return;
        }
        final int i = (int)(t % CAPACITY);
        lsns[i] = lsn;
        jobIds[i] = jobId;
        offsets[i] = offset;
        masks[i] = mask;
        volumes[i] = volume;
        statuses[i] = status;
        tail.lazySet(t + 1);
        resultQueued.run();
    }

    /**
     * @param wakeup run (on the applier's thread) after each queued result: wakes the receiver that sends it.
     */
    public void onResultQueued(final Runnable wakeup)
    {
        resultQueued = wakeup;
    }

    /**
     * @return whether a result waits to be sent.
     */
    public boolean hasResult()
    {
        return head.get() != tail.get();
    }

    /**
     * Sends the oldest queued result, if any. Receiver thread, when the connection has nothing pending.
     *
     * @param connection the session's connection.
     * @param header     the receiver's send header.
     * @param sessionId  the session.
     * @return whether a result was sent.
     * @throws IOException when the connection failed.
     */
    public boolean sendNext(final FrameConnection connection, final FrameHeader header, final int sessionId)
        throws IOException
    {
        final long h = head.get();
        if (h == tail.get())
        {
            return false;
        }
        final int i = (int)(h % CAPACITY);
        resultPayload.clear().limit(VerifyRecord.RESULT_LENGTH);
        resultPayload.putLong(0, jobIds[i]);
        resultPayload.putInt(VerifyRecord.RESULT_STATUS_OFFSET, statuses[i]);
        resultPayload.putInt(VerifyRecord.RESULT_STATUS_OFFSET + 4, 0);
        header.reset(FrameType.VERIFY_RESULT).sessionId(sessionId).volumeId(volumes[i]).sequence(lsns[i])
            .offset(offsets[i]).aux(masks[i]).controlPayload(resultPayload).seal();
        connection.startSend(header, resultPayload);
        connection.flush();
        head.lazySet(h + 1);
        return true;
    }

    /**
     * @return regions compared on this side since start.
     */
    public long regionsChecked()
    {
        return regionsChecked;
    }

    /**
     * @return regions found different on this side since start.
     */
    public long regionsDifferent()
    {
        return regionsDifferent;
    }

    /**
     * @return results dropped because the ring was full.
     */
    public long resultsDropped()
    {
        return resultsDropped;
    }
}
