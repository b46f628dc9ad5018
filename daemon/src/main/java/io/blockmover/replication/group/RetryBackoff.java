package io.blockmover.replication.group;

import java.util.concurrent.TimeUnit;

/**
 * When to try again after a disk error that may pass (a volume out of space until the operator adds some, a
 * path failing over): after 2 s, doubling up to a minute, back to 2 s after a success. One thread only.
 */
final class RetryBackoff
{
    static final long FIRST_NS = TimeUnit.SECONDS.toNanos(2);
    static final long MAX_NS = TimeUnit.SECONDS.toNanos(60);

    private long delayNs = FIRST_NS;
    private long dueNs;
    private boolean never;

    /**
     * Records a failure now.
     *
     * @param nowNs the clock's time.
     * @return the delay until the next try, in whole seconds, for the operator's message.
     */
    long failed(final long nowNs)
    {
        final long delay = delayNs;
        dueNs = nowNs + delay;
        delayNs = Math.min(MAX_NS, delayNs * 2);
        return TimeUnit.NANOSECONDS.toSeconds(delay);
    }

    /**
     * @param nowNs the clock's time.
     * @return nanoseconds until the next try is due (0 or less: due).
     */
    long untilDueNs(final long nowNs)
    {
        return never ? Long.MAX_VALUE : dueNs - nowNs;
    }

    /**
     * A failure that no retry can cure: the next try is never due.
     */
    void never()
    {
        never = true;
    }

    /**
     * The operation succeeded: the next failure waits the shortest delay again.
     */
    void succeeded()
    {
        delayNs = FIRST_NS;
    }
}
