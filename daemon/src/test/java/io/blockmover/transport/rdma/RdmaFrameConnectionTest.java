package io.blockmover.transport.rdma;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.Test;

import io.blockmover.buffer.Slab;

/**
 * Which payloads go out without a copy: only those wholly inside the registered slab. The verbs themselves are
 * tested on real (soft) RDMA devices in the VM (RdmaEndpointVmTest, scripts/test-rdma).
 */
class RdmaFrameConnectionTest
{
    private final Slab slab = new Slab(4, 4096);
    private final long slabAddress = BufferUtil.address(slab.memory());
    private final long slabLength = slab.memory().capacity();

    @Test
    void shouldSendASlotWithoutACopy()
    {
        final ByteBuffer slot = slab.slot(2);
        slot.clear();
        assertEquals(2 * 4096, RdmaFrameConnection.offsetWithin(slot, slot.remaining(), slabAddress, slabLength));
    }

    @Test
    void shouldHonourThePayloadsPosition()
    {
        final ByteBuffer slot = slab.slot(1);
        slot.limit(1000).position(100);
        assertEquals(4096 + 100, RdmaFrameConnection.offsetWithin(slot, slot.remaining(), slabAddress, slabLength));
    }

    @Test
    void shouldSendTheLastSlotUpToTheSlabsEnd()
    {
        final ByteBuffer slot = slab.slot(3);
        slot.clear();
        assertEquals(3 * 4096, RdmaFrameConnection.offsetWithin(slot, 4096, slabAddress, slabLength));
    }

    @Test
    void shouldCopyAPayloadThatRunsPastTheRegion()
    {
        final ByteBuffer slot = slab.slot(3);
        slot.clear();
        assertEquals(-1, RdmaFrameConnection.offsetWithin(slot, 4097, slabAddress, slabLength));
    }

    @Test
    void shouldCopyAPayloadOutsideTheRegion()
    {
        final ByteBuffer other = ByteBuffer.allocateDirect(4096);
        assertEquals(-1, RdmaFrameConnection.offsetWithin(other, 4096, slabAddress, slabLength));
        assertEquals(-1, RdmaFrameConnection.offsetWithin(slab.slot(0), 4096, slabAddress + 1, slabLength - 1));
    }

    @Test
    void shouldCopyHeapAndEmptyPayloads()
    {
        assertEquals(-1, RdmaFrameConnection.offsetWithin(ByteBuffer.allocate(64), 64, slabAddress, slabLength));
        assertEquals(-1, RdmaFrameConnection.offsetWithin(null, 0, slabAddress, slabLength));
        assertEquals(-1, RdmaFrameConnection.offsetWithin(slab.slot(0), 0, slabAddress, slabLength));
    }
}
