package io.blockmover.replication;

import java.util.concurrent.atomic.AtomicLong;

import org.agrona.concurrent.AtomicBuffer;

/**
 * A fixed-size bit set over an {@link AtomicBuffer} (heap, direct or memory-mapped) whose bits may be set and
 * cleared from several threads at once, with a count of set bits kept exact. Lock free; allocates nothing.
 */
public final class ConcurrentBitSet
{
    private final AtomicBuffer buffer;
    private final int wordsOffset;
    private final long bitCount;
    private final AtomicLong cardinality = new AtomicLong();

    /**
     * @param buffer      holding the words.
     * @param wordsOffset byte offset of word 0, 8-byte aligned.
     * @param bitCount    number of bits.
     */
    public ConcurrentBitSet(final AtomicBuffer buffer, final int wordsOffset, final long bitCount)
    {
        if ((wordsOffset & 7) != 0 || (long)wordsOffset + wordsLength(bitCount) > buffer.capacity())
        {
            throw new IllegalArgumentException("bit set does not fit the buffer");
        }
        this.buffer = buffer;
        this.wordsOffset = wordsOffset;
        this.bitCount = bitCount;
        recount();
    }

    /**
     * @param bitCount number of bits.
     * @return bytes needed for the words.
     */
    public static int wordsLength(final long bitCount)
    {
        return (int)(((bitCount + 63) >>> 6) << 3);
    }

    public long bitCount()
    {
        return bitCount;
    }

    /**
     * @return the number of set bits.
     */
    public long cardinality()
    {
        return cardinality.get();
    }

    public boolean get(final long bit)
    {
        return (buffer.getLongVolatile(wordOffset(bit)) & mask(bit)) != 0;
    }

    /**
     * @param bit to set.
     * @return true when this call changed it.
     */
    public boolean set(final long bit)
    {
        final int offset = wordOffset(bit);
        final long mask = mask(bit);
        while (true)
        {
            final long word = buffer.getLongVolatile(offset);
            if ((word & mask) != 0)
            {
                return false;
            }
            if (buffer.compareAndSetLong(offset, word, word | mask))
            {
                cardinality.incrementAndGet();
                return true;
            }
        }
    }

    /**
     * @param bit to clear.
     * @return true when this call changed it.
     */
    public boolean clear(final long bit)
    {
        final int offset = wordOffset(bit);
        final long mask = mask(bit);
        while (true)
        {
            final long word = buffer.getLongVolatile(offset);
            if ((word & mask) == 0)
            {
                return false;
            }
            if (buffer.compareAndSetLong(offset, word, word & ~mask))
            {
                cardinality.decrementAndGet();
                return true;
            }
        }
    }

    /**
     * Sets every bit. Not to be raced with other writers.
     */
    public void setAll()
    {
        final int words = wordsLength(bitCount) >>> 3;
        for (int i = 0; i < words; i++)
        {
            final long remaining = bitCount - ((long)i << 6);
            buffer.putLongVolatile(wordsOffset + (i << 3), remaining >= 64 ? -1L : (1L << remaining) - 1);
        }
        cardinality.set(bitCount);
    }

    /**
     * Clears every bit. Not to be raced with other writers.
     */
    public void clearAll()
    {
        buffer.setMemory(wordsOffset, wordsLength(bitCount), (byte)0);
        cardinality.set(0);
    }

    /**
     * @param from first bit to look at.
     * @return index of the first set bit at or after from, or -1.
     */
    public long nextSetBit(final long from)
    {
        if (from >= bitCount)
        {
            return -1;
        }
        int word = (int)(from >>> 6);
        final int words = wordsLength(bitCount) >>> 3;
        long bits = buffer.getLongVolatile(wordsOffset + (word << 3)) & (-1L << (from & 63));
        while (true)
        {
            if (bits != 0)
            {
                final long bit = ((long)word << 6) + Long.numberOfTrailingZeros(bits);
                return bit < bitCount ? bit : -1;
            }
            if (++word >= words)
            {
                return -1;
            }
            bits = buffer.getLongVolatile(wordsOffset + (word << 3));
        }
    }

    /**
     * Recomputes the count from the words, after the words were loaded from a file.
     */
    public void recount()
    {
        long count = 0;
        final int words = wordsLength(bitCount) >>> 3;
        for (int i = 0; i < words; i++)
        {
            count += Long.bitCount(buffer.getLongVolatile(wordsOffset + (i << 3)));
        }
        cardinality.set(count);
    }

    private int wordOffset(final long bit)
    {
        if (bit < 0 || bit >= bitCount)
        {
            throw new IndexOutOfBoundsException("bit " + bit + " not in 0.." + (bitCount - 1));
        }
        return wordsOffset + (int)((bit >>> 6) << 3);
    }

    private static long mask(final long bit)
    {
        return 1L << (bit & 63);
    }
}
