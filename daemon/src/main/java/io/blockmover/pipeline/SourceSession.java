package io.blockmover.pipeline;

import com.lmax.disruptor.RingBuffer;
import com.lmax.disruptor.Sequence;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.io.Volume;
import io.blockmover.ratelimit.TokenBucket;
import io.blockmover.replication.ConcurrentBitSet;
import io.blockmover.replication.DirtyBitmap;
import io.blockmover.transport.FrameConnection;

/**
 * The state a copy session shares between its {@link Reader} and its {@link Sender} on the source host, built by
 * the conductor once the peer has opened the destination, and torn down by it when {@link #status()} ends.
 * <p>
 * The session moves through phases: an optional checksum pass (seeded copy: clear the bits of regions that
 * already match), the copy of every dirty chunk, and an optional verify pass (a mismatch sets its bit again and
 * goes back to copying). The {@link Sender} decides the phase; the {@link Reader} follows it.
 */
public final class SourceSession
{
    public static final int PHASE_SEED = 1;
    public static final int PHASE_COPY = 2;
    public static final int PHASE_VERIFY = 3;
    public static final int PHASE_FINISH = 4;

    private static final TokenBucket UNLIMITED = new TokenBucket(0);

    final int sessionId;
    final Volume volume;
    final ConcurrentBitSet dirty;
    final ConcurrentBitSet inflight;
    final long chunkCount;
    final int chunkLength;
    final Slab slab;
    final int slotBase;
    final int slotMask;
    final RingBuffer<SlotEvent> ring;
    final Sequence senderSequence = new Sequence();
    final FrameConnection connection;
    final int initialCredits;
    final boolean verify;
    final int verifyRounds;
    final int digestBatch;
    final long heartbeatIntervalNs;
    final long peerTimeoutNs;
    final CncFile cnc;
    final AtomicCounter bytesRemaining;
    final AtomicCounter bytesCopied;
    final SessionStatus status = new SessionStatus();
    final int[] localDigests;
    final int[] remoteDigests;
    /** Chunks acknowledged as written and not yet durable: cleared from the bitmap on DURABLE. */
    final long[] writtenNotDurable;

    /** The peer's bandwidth limit, consulted before each chunk; set before the agents start. */
    TokenBucket rateLimit = UNLIMITED;
    /** Whether the destination takes chunks of zeros without their zeros (it offered it); set before agents start. */
    boolean zeroChunks;

    private volatile int phase;
    private volatile int phaseEpoch;
    private volatile long regionsDifferent;
    private volatile long verifyMismatches;
    private volatile boolean verified;
    private volatile long regionsChecked;
    /** Bytes of chunks of zeros sent as a header alone ({@link #zeroChunks}); written by the sender only. */
    private volatile long zeroBytesSent;

    /**
     * @param sessionId           carried in every frame.
     * @param volume              source volume, open for reading.
     * @param dirty               the job's dirty bitmap.
     * @param chunkLength         bytes per chunk (= region).
     * @param slab                shared slab.
     * @param slotBase            first leased slot.
     * @param slotCount           leased slots, a power of two; also the ring size.
     * @param connection          to the destination, handshake done.
     * @param initialCredits      chunks the destination accepts before its first ACK.
     * @param flushChunks         the most chunks the destination writes before it forces (from OPENED).
     * @param seed                start with a checksum pass that clears matching regions.
     * @param verify              end with a checksum pass that compares every region.
     * @param verifyRounds        verify passes allowed before failing.
     * @param digestBatch         regions per checksum request.
     * @param heartbeatIntervalNs heartbeat when idle this long.
     * @param peerTimeoutNs       peer considered gone when silent this long.
     * @param cnc                 counters.
     * @param bytesRemaining      job counter of bytes still dirty.
     * @param bytesCopied         job counter of bytes acknowledged.
     */
    public SourceSession(
        final int sessionId,
        final Volume volume,
        final ConcurrentBitSet dirty,
        final int chunkLength,
        final Slab slab,
        final int slotBase,
        final int slotCount,
        final FrameConnection connection,
        final int initialCredits,
        final int flushChunks,
        final boolean seed,
        final boolean verify,
        final int verifyRounds,
        final int digestBatch,
        final long heartbeatIntervalNs,
        final long peerTimeoutNs,
        final CncFile cnc,
        final AtomicCounter bytesRemaining,
        final AtomicCounter bytesCopied)
    {
        this.sessionId = sessionId;
        this.volume = volume;
        this.dirty = dirty;
        this.chunkLength = chunkLength;
        this.chunkCount = dirty.bitCount();
        this.slab = slab;
        this.slotBase = slotBase;
        this.slotMask = slotCount - 1;
        this.ring = RingBuffer.createSingleProducer(SlotEvent::new, slotCount);
        this.ring.addGatingSequences(senderSequence);
        this.connection = connection;
        this.initialCredits = initialCredits;
        this.verify = verify;
        this.verifyRounds = verifyRounds;
        this.digestBatch = digestBatch;
        this.heartbeatIntervalNs = heartbeatIntervalNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.cnc = cnc;
        this.bytesRemaining = bytesRemaining;
        this.bytesCopied = bytesCopied;
        this.inflight = new ConcurrentBitSet(new UnsafeBuffer(new byte[ConcurrentBitSet.wordsLength(chunkCount)]),
            0, chunkCount);
        final boolean needsDigests = seed || verify;
        this.localDigests = needsDigests ? new int[(int)chunkCount] : null;
        this.remoteDigests = needsDigests ? new int[(int)chunkCount] : null;
        this.writtenNotDurable = new long[flushChunks + 2 * slotCount + 64];
        bytesRemaining.setRelease(DirtyBitmap.dirtyBytes(dirty, chunkLength, volume.size()));
        this.phase = seed ? PHASE_SEED : PHASE_COPY;
    }

    /**
     * @param index of a chunk.
     * @return its length: chunkLength, except for a shorter last chunk.
     */
    public int lengthOf(final long index)
    {
        return (int)Math.min(chunkLength, volume.size() - index * chunkLength);
    }

    /**
     * Has chunks of zeros sent as such, without their zeros: to a destination that offered "zero_chunks". Before the
     * agents start.
     */
    public void sendZeroChunks()
    {
        zeroChunks = true;
    }

    /**
     * Conductor thread, before the session's agents start.
     *
     * @param bucket the peer's bandwidth limit.
     */
    public void rateLimit(final TokenBucket bucket)
    {
        rateLimit = bucket;
    }

    public SessionStatus status()
    {
        return status;
    }

    public int phase()
    {
        return phase;
    }

    int phaseEpoch()
    {
        return phaseEpoch;
    }

    /**
     * Sender thread only.
     *
     * @param newPhase to enter.
     */
    void phase(final int newPhase)
    {
        phase = newPhase;
        phaseEpoch = phaseEpoch + 1;
    }

    public long regionsDifferent()
    {
        return regionsDifferent;
    }

    void regionsDifferent(final long value)
    {
        regionsDifferent = value;
    }

    public long verifyMismatches()
    {
        return verifyMismatches;
    }

    void verifyMismatches(final long value)
    {
        verifyMismatches = value;
    }

    /**
     * @return whether a verify pass found both sides equal.
     */
    public boolean verified()
    {
        return verified;
    }

    void verified(final boolean value)
    {
        verified = value;
    }

    /**
     * @return bytes of chunks of zeros this session sent as a header alone, the destination writing or deallocating
     *     the zeros itself.
     */
    public long zeroBytesSent()
    {
        return zeroBytesSent;
    }

    /** The sender's, for each chunk of zeros it sends without them. */
    void zeroBytesSent(final int length)
    {
        zeroBytesSent = zeroBytesSent + length; // One writer.
    }

    /**
     * @return regions whose checksums both sides have compared in the current seeding or verify pass.
     */
    public long regionsChecked()
    {
        return regionsChecked;
    }

    void regionsChecked(final long value)
    {
        regionsChecked = value;
    }

    public long chunkCount()
    {
        return chunkCount;
    }

    public FrameConnection connection()
    {
        return connection;
    }

    public int slotBase()
    {
        return slotBase;
    }

    public int slotCount()
    {
        return slotMask + 1;
    }
}
