package io.blockmover.ratelimit;

import java.util.concurrent.atomic.AtomicLong;

/**
 * A token bucket of bytes per second, shared by every agent that sends payload to one peer, written as the
 * equivalent "generic cell rate" form: one atomic long, the theoretical time at which the bucket would be full
 * again ({@code debtUntilNs}). Sending {@code n} bytes pushes that time {@code n / rate} seconds further; a send is
 * allowed while it lies less than {@code burstNs} ahead of now. So a long-run rate never exceeds {@code rate}, a
 * burst of at most {@code rate x burstNs} passes at once, and a frame larger than the burst still passes (it runs
 * the bucket into debt, which later frames pay back): a 1 MiB chunk is never starved by a 20 MB/s limit.
 * <p>
 * Threading: any thread; lock-free; allocates nothing. A sender that finds no tokens simply does not send in this
 * duty cycle and lets its idle strategy wait: nothing sleeps or blocks here. The rate may be changed at any time
 * from the conductor; 0 means unlimited.
 */
public final class TokenBucket
{
    /** How far ahead of now the bucket may be spent: a burst of 50 ms at the configured rate. */
    public static final long DEFAULT_BURST_NS = 50_000_000L;

    private static final long NS_PER_S = 1_000_000_000L;

    private final AtomicLong debtUntilNs = new AtomicLong(Long.MIN_VALUE / 2);
    private final long burstNs;
    private volatile long bytesPerSecond;
    private volatile long throttledCount;

    /**
     * @param bytesPerSecond the limit; 0 = unlimited.
     * @param burstNs        how much may be sent ahead of the rate at once.
     */
    public TokenBucket(final long bytesPerSecond, final long burstNs)
    {
        if (bytesPerSecond < 0 || burstNs <= 0)
        {
            throw new IllegalArgumentException("rate " + bytesPerSecond + " and burst " + burstNs + " ns");
        }
        this.bytesPerSecond = bytesPerSecond;
        this.burstNs = burstNs;
    }

    /**
     * @param bytesPerSecond the limit; 0 = unlimited.
     */
    public TokenBucket(final long bytesPerSecond)
    {
        this(bytesPerSecond, DEFAULT_BURST_NS);
    }

    /**
     * @return the limit in bytes per second; 0 = unlimited.
     */
    public long bytesPerSecond()
    {
        return bytesPerSecond;
    }

    /**
     * Changes the limit; takes effect at the next frame. A debt run up at the old rate is forgiven, so lowering
     * then raising a limit never leaves a sender waiting out a long-gone rate.
     *
     * @param bytesPerSecond the new limit; 0 = unlimited.
     * @param nowNs          the caller's clock.
     */
    public void bytesPerSecond(final long bytesPerSecond, final long nowNs)
    {
        if (bytesPerSecond < 0)
        {
            throw new IllegalArgumentException("rate " + bytesPerSecond);
        }
        this.bytesPerSecond = bytesPerSecond;
        debtUntilNs.set(nowNs);
    }

    /**
     * @return how often a sender found the bucket empty (for status).
     */
    public long throttledCount()
    {
        return throttledCount;
    }

    /**
     * Whether a frame may be sent now; a caller that learns the frame's length only after deciding to send it
     * (the shipper reads it from the log) asks this first, then {@link #consume(long, long)}s the length.
     *
     * @param nowNs the caller's clock.
     * @return true when unlimited or the bucket is not in debt beyond the burst.
     */
    public boolean isAvailable(final long nowNs)
    {
        if (bytesPerSecond == 0)
        {
            return true;
        }
        if (debtUntilNs.get() - nowNs < burstNs)
        {
            return true;
        }
        throttledCount++; // Racy on purpose: a statistic, read by the conductor.
        return false;
    }

    /**
     * Charges bytes that were (or are about to be) sent.
     *
     * @param bytes sent.
     * @param nowNs the caller's clock.
     */
    public void consume(final long bytes, final long nowNs)
    {
        final long rate = bytesPerSecond;
        if (rate == 0)
        {
            return;
        }
        final long costNs = costNs(bytes, rate);
        long current;
        long next;
        do
        {
            current = debtUntilNs.get();
            // A bucket idle for long is full, never more than full: time spent idle does not bank extra credit.
            next = Math.max(current, nowNs) + costNs;
        }
        while (!debtUntilNs.compareAndSet(current, next));
    }

    /**
     * Takes tokens for a frame whose length is known: {@link #isAvailable(long)} then {@link #consume(long, long)}.
     *
     * @param bytes to send.
     * @param nowNs the caller's clock.
     * @return true when the frame may be sent now (and was charged), false when the caller must wait.
     */
    public boolean tryAcquire(final long bytes, final long nowNs)
    {
        if (!isAvailable(nowNs))
        {
            return false;
        }
        consume(bytes, nowNs);
        return true;
    }

    private static long costNs(final long bytes, final long rate)
    {
        // bytes * 1e9 / rate without overflow for any frame size (bytes < 2^32 keeps the product below 2^63).
        if (bytes < (1L << 32))
        {
            return bytes * NS_PER_S / rate;
        }
        return (long)((double)bytes * NS_PER_S / rate);
    }
}
