package io.blockmover.replication.group;

import java.util.concurrent.atomic.AtomicIntegerArray;

/**
 * Which bytes of a group's volumes have a client write between its append and the end of its volume write, so that
 * a write to the same bytes can wait for it: overlapping writes must reach the volume in LSN order, the order the
 * partner applies them in and a replay writes them in. Regions (chunk.length, 1 MiB by default) were too coarse
 * for that: at queue depth 16, a random 4 KiB write to a 1 GiB volume found one of the other fifteen in its region
 * once in seventy, a sequential one every time, and each such write held its connection's reader, and so every
 * request behind it, until the earlier write's disk I/O ended.
 * <p>
 * Counters indexed by a hash of (volume, block), in three tables: one per 4 KiB block for small writes (at most
 * {@link #SMALL_LENGTH}); one per 64 KiB span for every write; one per 64 KiB span for large writes only. A small
 * write meets another small one on a shared block, and a large one on a shared span; a large write meets any write
 * in its spans. So a large write counts a few spans, not hundreds of blocks. Two writes that share a counter without
 * sharing bytes (a hash collision, or a large write beside a small one in a span) only wait when they need not,
 * rarely: the tables are far larger than what is in flight. Counts rise under the caller's lock, which also orders
 * the checks; they fall without it. Allocates nothing.
 */
final class InFlightWrites
{
    /** Writes of at most this many bytes count 4 KiB blocks; longer ones count 64 KiB spans. */
    static final int SMALL_LENGTH = 64 * 1024;
    private static final int BLOCK_SHIFT = 12;
    private static final int SPAN_SHIFT = 16;
    private static final int BLOCK_TABLE_BITS = 15;
    private static final int SPAN_TABLE_BITS = 13;
    private static final long GOLDEN = 0x9E3779B97F4A7C15L;
    private static final long MIX = 0xBF58476D1CE4E5B9L;

    private final AtomicIntegerArray smallBlocks = new AtomicIntegerArray(1 << BLOCK_TABLE_BITS);
    private final AtomicIntegerArray allSpans = new AtomicIntegerArray(1 << SPAN_TABLE_BITS);
    private final AtomicIntegerArray largeSpans = new AtomicIntegerArray(1 << SPAN_TABLE_BITS);

    /**
     * @return whether a write in flight may share bytes with this one. Under the lock that {@link #add} is called
     *     under.
     */
    boolean overlaps(final int vol, final long offset, final int length)
    {
        final long end = offset + Math.max(length, 1);
        if (length <= SMALL_LENGTH)
        {
            return any(smallBlocks, BLOCK_TABLE_BITS, vol, offset >>> BLOCK_SHIFT, (end - 1) >>> BLOCK_SHIFT) ||
                any(largeSpans, SPAN_TABLE_BITS, vol, offset >>> SPAN_SHIFT, (end - 1) >>> SPAN_SHIFT);
        }
        return any(allSpans, SPAN_TABLE_BITS, vol, offset >>> SPAN_SHIFT, (end - 1) >>> SPAN_SHIFT);
    }

    /**
     * Counts a write in flight, under the caller's lock. Pair with {@link #remove} of the same arguments.
     */
    void add(final int vol, final long offset, final int length)
    {
        count(vol, offset, length, 1);
    }

    /**
     * The write counted by {@link #add} has reached the volume (or failed); any thread.
     */
    void remove(final int vol, final long offset, final int length)
    {
        count(vol, offset, length, -1);
    }

    private void count(final int vol, final long offset, final int length, final int delta)
    {
        final long end = offset + Math.max(length, 1);
        final long firstSpan = offset >>> SPAN_SHIFT;
        final long lastSpan = (end - 1) >>> SPAN_SHIFT;
        add(allSpans, SPAN_TABLE_BITS, vol, firstSpan, lastSpan, delta);
        if (length <= SMALL_LENGTH)
        {
            add(smallBlocks, BLOCK_TABLE_BITS, vol, offset >>> BLOCK_SHIFT, (end - 1) >>> BLOCK_SHIFT, delta);
        }
        else
        {
            add(largeSpans, SPAN_TABLE_BITS, vol, firstSpan, lastSpan, delta);
        }
    }

    private static boolean any(final AtomicIntegerArray table, final int bits, final int vol, final long first,
        final long last)
    {
        for (long unit = first; unit <= last; unit++)
        {
            if (table.get(index(bits, vol, unit)) != 0)
            {
                return true;
            }
        }
        return false;
    }

    private static void add(final AtomicIntegerArray table, final int bits, final int vol, final long first,
        final long last, final int delta)
    {
        for (long unit = first; unit <= last; unit++)
        {
            table.getAndAdd(index(bits, vol, unit), delta);
        }
    }

    /**
     * Multiplicative hashing: neighbouring blocks, the common case in flight together, land far apart.
     */
    private static int index(final int bits, final int vol, final long unit)
    {
        return (int)(((unit + vol * GOLDEN) * MIX) >>> (Long.SIZE - bits));
    }
}
