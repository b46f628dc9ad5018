package io.blockmover.replication.log;

/**
 * Every bit of a record's flags word, in one place: the same word travels in a RECORD frame's aux field and is
 * kept in the record's log header, so two features that pick a bit each without seeing the other's collide
 * silently (UNCLEAN once shared 4 with VERIFY, and resync records were skipped as VERIFY records).
 * The features' own constants name these values.
 */
public final class RecordFlags
{
    /** Wire and log: a whole region sent by resync, not a client write. */
    public static final int RESYNC = 1;
    /** Wire only: the source lost continuity and starts a new LSN sequence with this record. */
    public static final int RESTART = 2;
    /** Wire and log: a VERIFY record (digests of a region, no data); never written to a volume. */
    public static final int VERIFY = 4;
    /** Wire only: the source had regions left to resync when it sent this record. */
    public static final int UNCLEAN = 8;
    /**
     * Wire only: the source's clients asked for a FLUSH (or wrote with FUA) shortly before this record was sent. A
     * sync partner that is told of it forces its log after every batch, so that the next FLUSH finds the record
     * durable; otherwise it forces when asked, or as an async partner does.
     */
    public static final int FLUSHING = 16;
    /**
     * Wire only: the source had nothing to resync (or to compare, seeded) and this was its last record when it sent
     * it: the partner's volumes are a consistent prefix from here on until a resync record. A heartbeat says the
     * same of an idle source; this says it of a busy one, which sends no heartbeat.
     */
    public static final int CLEAN = 32;
    /**
     * Wire and log: a range of zeros, not data: the payload is its length ({@link ZeroRecord}). Sent only to a
     * partner that offered to take it; to any other the shipper sends the zeros themselves.
     */
    public static final int ZEROES = 64;
    /** Wire-only bits, masked off before a received record is logged. */
    public static final int WIRE_ONLY = RESTART | UNCLEAN | FLUSHING | CLEAN;
    /** Log only (source): the record's bytes reached the local volume. */
    public static final int WRITTEN = 1 << 16;

    private RecordFlags()
    {
    }
}
