package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.BufferUtil;

import io.blockmover.buffer.Slab;
import io.blockmover.io.LinuxAio;

/**
 * A destination's applied records written to their volumes with O_DIRECT, many per system call: the records are
 * copied into one aligned staging buffer, then submitted together ({@link LinuxAio}) and waited for together.
 * <p>
 * Why not the page cache: buffered, the records of a whole force interval (200 ms: 3,000 random 4 KiB writes at
 * 15k IOPS) became dirty pages that the force then wrote back all at once, thousands of requests dumped into the
 * device queue. Anything else on that disk waited behind the burst: the destination's own log forces, which a
 * sync source's FLUSH waits for, and, where both sites share a disk as on a test host, the source's volume writes
 * (measured with a block-layer trace: 0.6% of them took 10-128 ms at the device, against a p50 of 128-256 us).
 * Written directly in batches of at most {@link #MAX_RECORDS}, the applier keeps only that many writes queued on
 * the device at any time, and a force has little left but the device flush. One thread (the applier's).
 * <p>
 * Order: the records of one batch are in flight at once, so two that write the same bytes never share one (the
 * later would race the earlier): {@link #mustDrainBefore} says when the batch must be written first. Nothing is
 * in flight between two calls to {@link #writeAll()}: it returns only once every write it submitted has ended.
 * <p>
 * Durability: a direct write sits in the disk's volatile cache, where any flush (the next force, another
 * writer's) makes it durable at once, before or after the writes around it. That is safe only because the
 * applier takes records durable in the log (DestinationGroup.applyLimit): a power cut replays every one not yet
 * released, in LSN order. Before that rule this class was reverted (7202a17, f8a940c): the power-cut test found
 * an async destination holding block 161 and not 160, both records lost from a log not yet forced.
 */
final class ApplyBatch implements AutoCloseable
{
    /** Most records in one batch: the most writes the applier queues on the device at once. */
    static final int MAX_RECORDS = 32;
    /** Bytes of staging: records longer than a batch's share go to the volume on their own. */
    static final int STAGING_BYTES = 1024 * 1024;
    /** Records longer than this are not batched: they take the long records' path, written on their own. */
    static final int MAX_RECORD_LENGTH = DestinationGroup.DIRECT_APPLY_LENGTH - 1;

    private final LinuxAio aio;
    private final ByteBuffer staging;
    private final long stagingAddress;
    private final int[] volume = new int[MAX_RECORDS];
    private final long[] offset = new long[MAX_RECORDS];
    private final int[] length = new int[MAX_RECORDS];
    private final long[] position = new long[MAX_RECORDS];
    private final long[] lsn = new long[MAX_RECORDS];
    private final boolean[] resync = new boolean[MAX_RECORDS];
    private final long[] stagedAt = new long[MAX_RECORDS];
    /** Per slot: bytes written, or a negated errno (Long.MIN_VALUE: refused at submission, errno in refusedErrno). */
    private final long[] result = new long[MAX_RECORDS];
    private final int[] refusedErrno = new int[MAX_RECORDS];
    private final LinuxAio.Refused onRefused = this::refused;
    private int count;
    private int stagedBytes;
    private int failedIndex = -1;

    private ApplyBatch(final LinuxAio aio)
    {
        this.aio = aio;
        this.staging = BufferUtil.allocateDirectAligned(STAGING_BYTES, Slab.ALIGNMENT);
        this.stagingAddress = BufferUtil.address(staging);
    }

    /**
     * @return a batch, or null where Linux AIO is not to be had (an unknown architecture, or fs.aio-max-nr
     *     reached): the applier then writes every record through the page cache, as it did before batches.
     */
    static ApplyBatch openOrNull()
    {
        if (!LinuxAio.isAvailable())
        {
            return null;
        }
        try
        {
            return new ApplyBatch(new LinuxAio(MAX_RECORDS));
        }
        catch (final IOException ex)
        {
            return null;
        }
    }

    /**
     * @param directFd the volume's O_DIRECT descriptor, or -1.
     * @return whether a record of this place and length can go in a batch at all: O_DIRECT needs the offset and
     *     length aligned, and a long record is written on its own.
     */
    static boolean batchable(final int directFd, final long offset, final int length)
    {
        return directFd >= 0 && length > 0 && length <= MAX_RECORD_LENGTH && aligned(offset, length);
    }

    /**
     * @return whether O_DIRECT can take a write of this place and length.
     */
    static boolean aligned(final long offset, final int length)
    {
        return ((offset | length) & (Slab.ALIGNMENT - 1)) == 0;
    }

    /**
     * @return whether the batch must be written before a record of this place and length is added (or, for a
     *     record that is not batched, written at all): it is full, or holds a record writing any of these bytes.
     */
    boolean mustDrainBefore(final int vol, final long at, final int bytes)
    {
        if (count == 0)
        {
            return false;
        }
        if (count == MAX_RECORDS || stagedBytes + bytes > STAGING_BYTES)
        {
            return true;
        }
        final long end = at + bytes;
        for (int i = 0; i < count; i++)
        {
            if (volume[i] == vol && offset[i] < end && at < offset[i] + length[i])
            {
                return true;
            }
        }
        return false;
    }

    /**
     * Copies a record into the batch; the caller has checked {@link #batchable} and {@link #mustDrainBefore}.
     *
     * @param payload the record's bytes, between its position and limit; its position moves to its limit.
     */
    void add(final int vol, final int directFd, final long at, final ByteBuffer payload, final long recordPosition,
        final long recordLsn, final boolean isResync, final long nowNs)
    {
        final int bytes = payload.remaining();
        staging.limit(stagedBytes + bytes).position(stagedBytes);
        staging.put(payload);
        volume[count] = vol;
        offset[count] = at;
        length[count] = bytes;
        position[count] = recordPosition;
        lsn[count] = recordLsn;
        resync[count] = isResync;
        stagedAt[count] = nowNs;
        aio.prepare(count, true, directFd, stagingAddress + stagedBytes, bytes, at, false);
        stagedBytes += bytes;
        count++;
    }

    /**
     * Submits every record of the batch and waits until each has ended, written or failed. The batch keeps its
     * records (read them with the accessors) until {@link #clear()}.
     *
     * @throws IOException the first record's failure, in batch order ({@link #failedIndex()}); the others may or
     *     may not be written.
     */
    void writeAll() throws IOException
    {
        failedIndex = -1;
        for (int i = 0; i < count; i++)
        {
            result[i] = Long.MIN_VALUE + 1;
            aio.queue(i);
        }
        int inFlight = count;
        aio.submit(onRefused);
        for (int i = 0; i < count; i++)
        {
            if (result[i] == Long.MIN_VALUE)
            {
                inFlight--;
            }
        }
        while (inFlight > 0)
        {
            final int reaped = aio.reap(inFlight, Long.MAX_VALUE / 2);
            for (int i = 0; i < reaped; i++)
            {
                result[aio.completedSlot(i)] = aio.result(i);
            }
            inFlight -= reaped;
        }
        for (int i = 0; i < count; i++)
        {
            if (result[i] != length[i])
            {
                failedIndex = i;
                throw result[i] == Long.MIN_VALUE ?
                    new IOException("write refused (errno " + refusedErrno[i] + ")") :
                    LinuxAio.failure(result[i], length[i]);
            }
        }
    }

    private void refused(final int slot, final int errno)
    {
        result[slot] = Long.MIN_VALUE;
        refusedErrno[slot] = errno;
    }

    /**
     * Empties the batch, written or not. Nothing is in flight by then ({@link #writeAll()} waits for all).
     */
    void clear()
    {
        count = 0;
        stagedBytes = 0;
    }

    int count()
    {
        return count;
    }

    /**
     * @return the index of the record whose failure {@link #writeAll()} threw, or -1.
     */
    int failedIndex()
    {
        return failedIndex;
    }

    int volume(final int index)
    {
        return volume[index];
    }

    int length(final int index)
    {
        return length[index];
    }

    long position(final int index)
    {
        return position[index];
    }

    long lsn(final int index)
    {
        return lsn[index];
    }

    boolean resync(final int index)
    {
        return resync[index];
    }

    long stagedAtNs(final int index)
    {
        return stagedAt[index];
    }

    /**
     * Destroys the AIO context; nothing is in flight between batches, so this waits for nothing.
     */
    @Override
    public void close()
    {
        aio.close();
    }
}
