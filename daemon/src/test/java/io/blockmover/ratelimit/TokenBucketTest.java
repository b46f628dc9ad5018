package io.blockmover.ratelimit;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class TokenBucketTest
{
    private static final long MS = 1_000_000L;
    private static final int CHUNK = 1 << 20;

    @Test
    void shouldNeverThrottleWhenUnlimited()
    {
        final TokenBucket bucket = new TokenBucket(0);
        for (int i = 0; i < 10_000; i++)
        {
            assertTrue(bucket.tryAcquire(CHUNK, 0));
        }
        assertEquals(0, bucket.throttledCount());
    }

    @Test
    void shouldHoldTheRateOverManyFramesWithAControlledClock()
    {
        final long rate = 20L << 20; // 20 MiB/s: a 1 MiB chunk costs 50 ms.
        final TokenBucket bucket = new TokenBucket(rate, 50 * MS);
        long nowNs = 1_000 * MS;
        long sent = 0;
        // A sender polling every millisecond for 10 simulated seconds.
        for (int tick = 0; tick < 10_000; tick++)
        {
            while (bucket.tryAcquire(CHUNK, nowNs))
            {
                sent += CHUNK;
            }
            nowNs += MS;
        }
        final double seconds = 10.0;
        final double achieved = sent / seconds;
        // At most the burst (one chunk here, plus the one that may run into debt) beyond the rate.
        assertTrue(achieved <= rate + 2.0 * CHUNK / seconds, "achieved " + achieved + " > " + rate);
        assertTrue(achieved >= rate - 1.0 * CHUNK / seconds, "achieved " + achieved + " < " + rate);
        assertTrue(bucket.throttledCount() > 0);
    }

    @Test
    void shouldLetAFrameLargerThanTheBurstPassAndMakeTheNextWait()
    {
        final TokenBucket bucket = new TokenBucket(1 << 20, 10 * MS); // 1 MiB/s, burst 10 KiB.
        final long start = 5_000 * MS;
        assertTrue(bucket.tryAcquire(CHUNK, start), "a 1 MiB frame must not starve behind a 10 KiB burst");
        assertFalse(bucket.tryAcquire(4096, start + 500 * MS), "half a second later the debt is not paid");
        assertTrue(bucket.tryAcquire(4096, start + 995 * MS), "within the burst of the debt's end");
    }

    @Test
    void shouldNotBankCreditWhileIdle()
    {
        final TokenBucket bucket = new TokenBucket(1 << 20, 10 * MS);
        final long start = 60_000 * MS; // A minute idle must not allow a minute's worth at once.
        assertTrue(bucket.tryAcquire(CHUNK, start));
        assertFalse(bucket.tryAcquire(CHUNK, start));
    }

    @Test
    void shouldApplyANewRateAtOnce()
    {
        final TokenBucket bucket = new TokenBucket(1 << 20, 10 * MS);
        final long start = 1_000 * MS;
        assertTrue(bucket.tryAcquire(8L * CHUNK, start)); // Eight seconds of debt at 1 MiB/s.
        assertFalse(bucket.isAvailable(start + MS));
        bucket.bytesPerSecond(0, start + MS);
        assertTrue(bucket.tryAcquire(8L * CHUNK, start + MS), "unlimited now");
        bucket.bytesPerSecond(100L << 20, start + 2 * MS);
        assertTrue(bucket.tryAcquire(2L * CHUNK, start + 2 * MS), "the old debt is forgiven");
        assertFalse(bucket.isAvailable(start + 3 * MS), "20 ms of debt at 100 MiB/s, 1 ms later");
        assertTrue(bucket.isAvailable(start + 13 * MS), "within the burst of the debt's end");
    }
}
