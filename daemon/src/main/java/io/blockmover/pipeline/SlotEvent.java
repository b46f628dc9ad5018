package io.blockmover.pipeline;

/**
 * A pre-allocated Disruptor event that hands a slot from one stage to the next. The slot itself is implied by
 * the sequence ({@code slotBase + (sequence & mask)}), so the ring's own back-pressure recycles slots: a
 * producer cannot claim sequence s + ringSize before the consumer has released s.
 */
public final class SlotEvent
{
    /** Nothing: a claimed slot whose producer failed; consumers skip it. */
    public static final int NONE = 0;
    /** Source: a chunk read into the slot, to send. */
    public static final int CHUNK = 1;
    /** Source: the checksum of a local region (the slot was scratch space). */
    public static final int DIGEST = 2;
    /** Destination: a chunk received intact into the slot, to write. */
    public static final int WRITE = 3;
    /** Destination: a chunk received damaged; answer NACK. */
    public static final int SKIP = 4;
    /** Destination: checksums of regions wanted (index = first, count). */
    public static final int DIGEST_REQUEST = 5;
    /** Destination: the source has finished; force and answer CLOSE. */
    public static final int CLOSE = 6;
    /** Source: a chunk read into the slot that holds only zeros, to send as such (no payload). */
    public static final int ZERO_CHUNK = 7;
    /** Destination: a chunk of zeros received (nothing in the slot), to write or deallocate. */
    public static final int WRITE_ZEROES = 8;

    public int type;
    public int epoch;
    public long index;
    public int length;
    public int crc;
    public int count;

    /**
     * Sets every field at once, so no stale value of an earlier use survives.
     *
     * @param type   of event.
     * @param epoch  phase epoch of the producer.
     * @param index  chunk or region index.
     * @param length payload bytes in the slot.
     * @param crc    CRC32C of the payload or region.
     * @param count  region count of a digest request.
     */
    public void set(final int type, final int epoch, final long index, final int length, final int crc,
        final int count)
    {
        this.type = type;
        this.epoch = epoch;
        this.index = index;
        this.length = length;
        this.crc = crc;
        this.count = count;
    }
}
