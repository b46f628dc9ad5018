package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.NanoClock;

import io.blockmover.buffer.Slab;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.ratelimit.TokenBucket;
import io.blockmover.replication.ConcurrentBitSet;

/**
 * Turns the dirty regions of a source group's bitmaps into records while the partner is linked: the initial sync,
 * the catch-up after the log overflowed, and the full resend after continuity was lost are all this one loop.
 * It stops when the log is more than half full, so client writes always find room first.
 */
public final class Resyncer implements Agent
{
    private final SourceGroup group;
    private final ByteBuffer buffer;
    private int volume;
    private long region;
    private volatile String failure;
    private volatile long failures;
    private final RetryBackoff retry = new RetryBackoff();
    private volatile TokenBucket rateLimit;
    private NanoClock clock;

    /**
     * @param group the group whose dirty regions it resends.
     * @param clock for retries after a read error and for the rate limit.
     */
    public Resyncer(final SourceGroup group, final NanoClock clock)
    {
        this.group = group;
        this.clock = clock;
        this.buffer = BufferUtil.allocateDirectAligned(group.config().regionLength, Slab.ALIGNMENT);
    }

    @Override
    public String roleName()
    {
        return "resync-" + group.config().name;
    }

    /**
     * Limits the resync to the peer's bandwidth limit (sync groups, whose writes the shipper must not hold back).
     * Conductor thread, before the resyncer starts or while it runs (a change of the group's mode).
     *
     * @param bucket the peer's bucket, or null for none (async: the shipper holds the whole stream to it).
     * @param clock  clock of the bucket.
     */
    public void rateLimit(final TokenBucket bucket, final NanoClock clock)
    {
        this.rateLimit = bucket;
        this.clock = clock;
    }

    /**
     * @return the read or log-write error that holds resync until its retry, or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return regions that failed to be read or logged so far (each is retried).
     */
    public long failures()
    {
        return failures;
    }

    @Override
    public int doWork()
    {
        if (!group.isLinked() || group.isSuspended())
        {
            return 0;
        }
        if (failure != null)
        {
            if (retry.untilDueNs(clock.nanoTime()) > 0)
            {
                return 0;
            }
            failure = null;
        }
        for (int scanned = 0; scanned <= group.volumeCount(); scanned++)
        {
            final ConcurrentBitSet bits = group.dirty(volume);
            final long next = bits.nextSetBit(region);
            if (next < 0)
            {
                volume = (volume + 1) % group.volumeCount();
                region = 0;
                continue;
            }
            final TokenBucket limit = rateLimit;
            if (limit != null && !limit.isAvailable(clock.nanoTime()))
            {
                region = next;
                return 0;
            }
            try
            {
                if (!group.resyncRegion(volume, next, buffer))
                {
                    region = next;
                    return 0;
                }
            }
            catch (final IOException | RuntimeException ex)
            {
                // A read error may pass (a multipath path failing over), and so may a failing write or force of the
                // log or the activity file (unchecked there, as on the client writes' path): the region stays dirty
                // and is tried again after a back-off. Thrown on, it reached the runner's error handler on every
                // duty cycle: a busy loop that logged each time. A bug takes the same back-off, named as one.
                final String source = group.config().volumes.get(volume).source;
                final boolean bug = SessionStatus.isBug(ex);
                final String what = bug ? "cannot resync region " + next + " of " + source + " (a bug)" :
                    ex instanceof IOException ? "cannot read " + source + " at region " + next :
                    "cannot log region " + next + " of " + source;
                failure = what + ": " + (bug ? ex.toString() : ex.getMessage()) + "; tried again in " +
                    retry.failed(clock.nanoTime()) + " s";
                failures++;
                region = next;
                return 0;
            }
            retry.succeeded();
            if (limit != null)
            {
                limit.consume(Math.min(group.config().regionLength,
                    group.config().volumes.get(volume).size - next * group.config().regionLength), clock.nanoTime());
            }
            region = next + 1;
            return 1;
        }
        // Nothing dirty: a running verify may fence and digest its next region on this same thread.
        final SourceGroup.Verifier verifier = group.verifier();
        return verifier == null ? 0 : verifier.doWork();
    }
}
