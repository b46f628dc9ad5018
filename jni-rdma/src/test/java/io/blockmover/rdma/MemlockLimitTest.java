package io.blockmover.rdma;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MemlockLimitTest
{
    @Test
    void shouldNameTheFixWhenTheLimitIsTooLow()
    {
        final MemlockLimitException ex = assertThrows(MemlockLimitException.class,
            () -> MemlockLimit.check(0, 33_554_432, 65_536, false));

        assertEquals("RLIMIT_MEMLOCK 65536 < 33554432 bytes to register (0 already registered by this process): " +
            "set LimitMEMLOCK= in the unit or ulimit -l", ex.getMessage());
        assertEquals(65_536, ex.limitBytes());
        assertEquals(33_554_432, ex.requiredBytes());
        assertEquals("ibv_reg_mr", ex.functionName());
    }

    @Test
    void shouldCountWhatIsAlreadyRegistered()
    {
        assertDoesNotThrow(() -> MemlockLimit.check(0, 4096, 8192, false));
        assertThrows(MemlockLimitException.class, () -> MemlockLimit.check(8192, 4096, 8192, false));
    }

    @Test
    void shouldIgnoreTheLimitWithIpcLockOrWhenUnlimited()
    {
        assertDoesNotThrow(() -> MemlockLimit.check(0, 1L << 40, 65_536, true));
        assertDoesNotThrow(() -> MemlockLimit.check(0, 1L << 40, Long.MAX_VALUE, false));
    }

    @Test
    void shouldChargeWholePages()
    {
        assertEquals(4096, MemlockLimit.pinnedBytes(4096, 1));
        assertEquals(8192, MemlockLimit.pinnedBytes(4095, 2));
        assertEquals(1 << 20, MemlockLimit.pinnedBytes(1 << 20, 1 << 20));
    }

    @Test
    void shouldReadTheProcessLimit()
    {
        final long limit = MemlockLimit.softLimitBytes();
        assertTrue(limit > 0, "RLIMIT_MEMLOCK " + limit);
    }
}
