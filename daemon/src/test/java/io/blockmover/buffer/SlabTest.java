package io.blockmover.buffer;

import java.nio.ByteBuffer;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SlabTest
{
    @Test
    void shouldAlignEverySlotForDirectIo()
    {
        final Slab slab = new Slab(7, 3 * Slab.ALIGNMENT);
        final long base = BufferUtil.address(slab.memory());

        assertEquals(0, base % Slab.ALIGNMENT);
        for (int i = 0; i < slab.slotCount(); i++)
        {
            final ByteBuffer slot = slab.slot(i);
            assertTrue(slot.isDirect());
            assertEquals(0, BufferUtil.address(slot) % Slab.ALIGNMENT, "slot " + i);
            assertEquals(base + (long)i * slab.slotLength(), BufferUtil.address(slot), "slot " + i);
        }
    }

    @Test
    void shouldGiveEachSlotItsOwnCapacityAndMemory()
    {
        final Slab slab = new Slab(4, 2 * Slab.ALIGNMENT);

        assertEquals(4, slab.slotCount());
        assertEquals(2 * Slab.ALIGNMENT, slab.slotLength());
        assertEquals(4 * 2 * Slab.ALIGNMENT, slab.memory().capacity());
        for (int i = 0; i < slab.slotCount(); i++)
        {
            assertEquals(2 * Slab.ALIGNMENT, slab.slot(i).capacity());
            assertEquals(0, slab.slot(i).position());
            slab.slot(i).put(0, (byte)(i + 1));
            slab.slot(i).put(slab.slotLength() - 1, (byte)(i + 101));
        }
        for (int i = 0; i < slab.slotCount(); i++)
        {
            assertEquals(i + 1, slab.slot(i).get(0));
            assertEquals(i + 101, slab.slot(i).get(slab.slotLength() - 1));
            assertEquals(i + 1, slab.memory().get(i * slab.slotLength()));
        }
        assertSame(slab.slot(2), slab.slot(2));
        assertNotSame(slab.slot(1), slab.slot(2));
    }

    @Test
    void shouldLeaseAndReleaseContiguousRanges()
    {
        final Slab slab = new Slab(8, Slab.ALIGNMENT);

        assertEquals(0, slab.lease(3));
        assertEquals(3, slab.lease(2));
        assertEquals(3, slab.freeSlots());
        slab.release(0, 3);
        assertEquals(6, slab.freeSlots());
        assertEquals(0, slab.lease(3));
        assertEquals(5, slab.lease(3));
        assertEquals(0, slab.freeSlots());
        slab.release(3, 2);
        assertEquals(3, slab.lease(2));
    }

    @Test
    void shouldFailLeaseWhenFullOrFragmented()
    {
        final Slab slab = new Slab(8, Slab.ALIGNMENT);
        final int a = slab.lease(2);
        final int b = slab.lease(2);
        final int c = slab.lease(2);
        final int d = slab.lease(2);

        assertEquals(-1, slab.lease(1), "full");
        slab.release(a, 2);
        slab.release(c, 2);
        assertEquals(4, slab.freeSlots());
        assertEquals(-1, slab.lease(3), "4 free slots in two runs of 2 hold no run of 3");
        assertEquals(-1, slab.lease(9), "more than the slab");
        assertEquals(4, slab.freeSlots(), "a failed lease takes nothing");
        assertEquals(a, slab.lease(2));
        slab.release(b, 2);
        slab.release(d, 2);
        assertEquals(b, slab.lease(4), "b, c and d freed form one run from b");
    }

    @Test
    void shouldThrowOnDoubleRelease()
    {
        final Slab slab = new Slab(4, Slab.ALIGNMENT);
        final int first = slab.lease(2);
        slab.release(first, 2);

        final IllegalStateException ex = assertThrows(IllegalStateException.class, () -> slab.release(first, 2));
        assertTrue(ex.getMessage().contains("released twice"), ex.getMessage());
        assertThrows(IllegalStateException.class, () -> slab.release(3, 1), "never leased");
    }

    @Test
    void shouldRejectSlotLengthNotMultipleOfAlignment()
    {
        assertThrows(IllegalArgumentException.class, () -> new Slab(4, 4095));
        assertThrows(IllegalArgumentException.class, () -> new Slab(4, 4096 + 512));
        assertThrows(IllegalArgumentException.class, () -> new Slab(4, 0));
        assertThrows(IllegalArgumentException.class, () -> new Slab(4, -4096));
    }

    @Test
    void shouldRejectImpossibleSlotCount()
    {
        assertThrows(IllegalArgumentException.class, () -> new Slab(0, Slab.ALIGNMENT));
        assertThrows(IllegalArgumentException.class, () -> new Slab(1 << 20, 1 << 20));
    }
}
