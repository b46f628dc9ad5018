package io.blockmover.buffer;

import java.nio.ByteBuffer;

import org.agrona.BufferUtil;

/**
 * One aligned, off-heap region carved into fixed-size slots, allocated once at start-up. A slot holds one chunk
 * or record while it moves through the pipeline; stages pass slot indices, never copies. Sessions lease a
 * contiguous range of slots from the conductor and give it back when they end.
 * <pre>
 *  +--------+--------+--------+-----+--------+
 *  | slot 0 | slot 1 | slot 2 | ... | slot n |   each slotLength bytes, each aligned to {@link #ALIGNMENT}
 *  +--------+--------+--------+-----+--------+
 * </pre>
 * Leasing is for the conductor thread only; a leased slot belongs to whichever stage holds its index.
 */
public final class Slab
{
    /** O_DIRECT through the JDK demands 4096-byte alignment of address, position and length. */
    public static final int ALIGNMENT = 4096;

    private final ByteBuffer memory;
    private final ByteBuffer[] slots;
    private final boolean[] leased;
    private final int slotLength;

    /**
     * @param slotCount  number of slots.
     * @param slotLength bytes in a slot, a multiple of {@link #ALIGNMENT}.
     */
    public Slab(final int slotCount, final int slotLength)
    {
        if (slotLength <= 0 || slotLength % ALIGNMENT != 0)
        {
            throw new IllegalArgumentException("slot length " + slotLength + " is not a multiple of " + ALIGNMENT);
        }
        final long total = (long)slotCount * slotLength;
        if (slotCount <= 0 || total > Integer.MAX_VALUE)
        {
            throw new IllegalArgumentException("slab of " + slotCount + " x " + slotLength + " bytes is not possible");
        }
        this.slotLength = slotLength;
        this.memory = BufferUtil.allocateDirectAligned((int)total, ALIGNMENT);
        this.slots = new ByteBuffer[slotCount];
        this.leased = new boolean[slotCount];
        for (int i = 0; i < slotCount; i++)
        {
            slots[i] = memory.duplicate().position(i * slotLength).limit((i + 1) * slotLength).slice();
        }
    }

    /**
     * @return the whole slab, for registration with an RDMA device.
     */
    public ByteBuffer memory()
    {
        return memory;
    }

    public int slotCount()
    {
        return slots.length;
    }

    public int slotLength()
    {
        return slotLength;
    }

    /**
     * The buffer of one slot. The same instance is returned every time; its position and limit belong to the
     * stage that holds the slot.
     *
     * @param index of the slot.
     * @return the slot's buffer.
     */
    public ByteBuffer slot(final int index)
    {
        return slots[index];
    }

    /**
     * Leases a contiguous range of free slots. Conductor thread only.
     *
     * @param count slots wanted.
     * @return index of the first slot, or -1 when no such range is free.
     */
    public int lease(final int count)
    {
        int runStart = 0;
        int runLength = 0;
        for (int i = 0; i < leased.length; i++)
        {
            if (leased[i])
            {
                runStart = i + 1;
                runLength = 0;
            }
            else if (++runLength == count)
            {
                for (int j = runStart; j < runStart + count; j++)
                {
                    leased[j] = true;
                }
                return runStart;
            }
        }
        return -1;
    }

    /**
     * Returns a leased range. Conductor thread only.
     *
     * @param first slot of the range.
     * @param count slots in the range.
     */
    public void release(final int first, final int count)
    {
        for (int i = first; i < first + count; i++)
        {
            if (!leased[i])
            {
                throw new IllegalStateException("slot " + i + " released twice");
            }
            leased[i] = false;
        }
    }

    /**
     * @return number of slots not leased.
     */
    public int freeSlots()
    {
        int free = 0;
        for (final boolean l : leased)
        {
            free += l ? 0 : 1;
        }
        return free;
    }
}
