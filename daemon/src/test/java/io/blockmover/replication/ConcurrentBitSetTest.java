package io.blockmover.replication;

import java.util.BitSet;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ConcurrentBitSetTest
{
    private static ConcurrentBitSet bitSet(final long bitCount)
    {
        return new ConcurrentBitSet(new UnsafeBuffer(new byte[8 + ConcurrentBitSet.wordsLength(bitCount)]), 8,
            bitCount);
    }

    @Test
    void shouldSizeWordsForPartialLastWord()
    {
        assertEquals(0, ConcurrentBitSet.wordsLength(0));
        assertEquals(8, ConcurrentBitSet.wordsLength(1));
        assertEquals(8, ConcurrentBitSet.wordsLength(64));
        assertEquals(16, ConcurrentBitSet.wordsLength(65));
        assertEquals(24, ConcurrentBitSet.wordsLength(130));
    }

    @Test
    void shouldSetClearAndGetAcrossWordBoundaries()
    {
        final ConcurrentBitSet bits = bitSet(130);
        final long[] probe = {0, 1, 62, 63, 64, 65, 127, 128, 129};

        for (final long bit : probe)
        {
            assertFalse(bits.get(bit));
            assertTrue(bits.set(bit), "first set of " + bit);
            assertFalse(bits.set(bit), "second set of " + bit);
            assertTrue(bits.get(bit));
        }
        assertEquals(probe.length, bits.cardinality());
        assertFalse(bits.get(2));
        assertFalse(bits.get(66));

        assertTrue(bits.clear(63));
        assertFalse(bits.clear(63));
        assertTrue(bits.clear(129));
        assertFalse(bits.get(63));
        assertTrue(bits.get(62));
        assertTrue(bits.get(64));
        assertEquals(probe.length - 2, bits.cardinality());
    }

    @Test
    void shouldFindNextSetBitAcrossWordsAndInLastPartialWord()
    {
        final ConcurrentBitSet bits = bitSet(130);
        bits.set(3);
        bits.set(64);
        bits.set(129);

        assertEquals(3, bits.nextSetBit(0));
        assertEquals(3, bits.nextSetBit(3));
        assertEquals(64, bits.nextSetBit(4));
        assertEquals(64, bits.nextSetBit(64));
        assertEquals(129, bits.nextSetBit(65));
        assertEquals(129, bits.nextSetBit(129));
        assertEquals(-1, bits.nextSetBit(130));
        assertEquals(-1, bits.nextSetBit(1000));
        bits.clear(129);
        assertEquals(-1, bits.nextSetBit(65));
    }

    @ParameterizedTest
    @ValueSource(longs = {1, 63, 64, 65, 100, 127, 128, 129, 1000})
    void shouldSetExactlyBitCountBitsWithSetAll(final long bitCount)
    {
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[ConcurrentBitSet.wordsLength(bitCount)]);
        final ConcurrentBitSet bits = new ConcurrentBitSet(buffer, 0, bitCount);

        bits.setAll();

        assertEquals(bitCount, bits.cardinality());
        long counted = 0;
        for (int i = 0; i < buffer.capacity(); i += 8)
        {
            counted += Long.bitCount(buffer.getLong(i));
        }
        assertEquals(bitCount, counted, "bits beyond bitCount in the last word must stay clear");
        assertEquals(bitCount - 1, lastSetBit(bits));
        bits.recount();
        assertEquals(bitCount, bits.cardinality());

        bits.clearAll();
        assertEquals(0, bits.cardinality());
        assertEquals(-1, bits.nextSetBit(0));
    }

    private static long lastSetBit(final ConcurrentBitSet bits)
    {
        long last = -1;
        for (long bit = bits.nextSetBit(0); bit >= 0; bit = bits.nextSetBit(bit + 1))
        {
            last = bit;
        }
        return last;
    }

    @Test
    void shouldRecountFromWordsLoadedFromElsewhere()
    {
        final UnsafeBuffer buffer = new UnsafeBuffer(new byte[16]);
        buffer.putLong(0, 0xF0L);
        buffer.putLong(8, 1L);

        final ConcurrentBitSet bits = new ConcurrentBitSet(buffer, 0, 100);

        assertEquals(5, bits.cardinality());
        assertEquals(4, bits.nextSetBit(0));
        assertEquals(64, bits.nextSetBit(8));
    }

    @Test
    void shouldRejectBitsOutsideRangeAndBadPlacement()
    {
        final ConcurrentBitSet bits = bitSet(100);

        assertThrows(IndexOutOfBoundsException.class, () -> bits.set(100));
        assertThrows(IndexOutOfBoundsException.class, () -> bits.get(-1));
        assertThrows(IndexOutOfBoundsException.class, () -> bits.clear(128));
        assertThrows(IllegalArgumentException.class, () -> new ConcurrentBitSet(new UnsafeBuffer(new byte[16]), 4,
            64));
        assertThrows(IllegalArgumentException.class, () -> new ConcurrentBitSet(new UnsafeBuffer(new byte[8]), 0,
            65));
    }

    @Test
    void shouldMatchJavaBitSetUnderRandomOperations()
    {
        final int bitCount = 333;
        final ConcurrentBitSet bits = bitSet(bitCount);
        final BitSet model = new BitSet(bitCount);
        final Random random = new Random(42);
        for (int i = 0; i < 10_000; i++)
        {
            final int bit = random.nextInt(bitCount);
            if (random.nextBoolean())
            {
                assertEquals(!model.get(bit), bits.set(bit));
                model.set(bit);
            }
            else
            {
                assertEquals(model.get(bit), bits.clear(bit));
                model.clear(bit);
            }
            final int from = random.nextInt(bitCount + 1);
            final int expected = model.nextSetBit(from);
            assertEquals(expected, bits.nextSetBit(from), "nextSetBit(" + from + ")");
        }
        assertEquals(model.cardinality(), bits.cardinality());
    }

    @Test
    void shouldKeepCardinalityExactUnderConcurrentSetAndClear() throws InterruptedException
    {
        final int bitCount = 4096 + 17;
        final ConcurrentBitSet bits = bitSet(bitCount);
        bits.setAll();
        final CountDownLatch start = new CountDownLatch(1);
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        // Thread A clears the even bits, thread B the odd ones then sets every fourth again: they share words.
        final Thread clearer = new Thread(() -> run(start, failure, () ->
        {
            for (int round = 0; round < 50; round++)
            {
                for (int bit = 0; bit < bitCount; bit += 2)
                {
                    bits.clear(bit);
                    bits.set(bit);
                    bits.clear(bit);
                }
            }
        }), "clearer");
        final Thread setter = new Thread(() -> run(start, failure, () ->
        {
            for (int round = 0; round < 50; round++)
            {
                for (int bit = 1; bit < bitCount; bit += 2)
                {
                    bits.clear(bit);
                    if ((bit & 3) == 1)
                    {
                        bits.set(bit);
                    }
                }
            }
        }), "setter");
        clearer.start();
        setter.start();
        start.countDown();
        clearer.join(TimeUnit.SECONDS.toMillis(60));
        setter.join(TimeUnit.SECONDS.toMillis(60));

        assertFalse(clearer.isAlive());
        assertFalse(setter.isAlive());
        assertNull(failure.get());
        long expected = 0;
        for (int bit = 0; bit < bitCount; bit++)
        {
            final boolean shouldBeSet = (bit & 1) == 1 && (bit & 3) == 1;
            assertEquals(shouldBeSet, bits.get(bit), "bit " + bit);
            expected += shouldBeSet ? 1 : 0;
        }
        assertEquals(expected, bits.cardinality());
        bits.recount();
        assertEquals(expected, bits.cardinality());
    }

    private static void run(final CountDownLatch start, final AtomicReference<Throwable> failure,
        final Runnable body)
    {
        try
        {
            start.await();
            body.run();
        }
        catch (final Throwable ex)
        {
            failure.compareAndSet(null, ex);
        }
    }
}
