package io.blockmover.replication.log;

/**
 * Layout of a {@link RecordLog} file: a 4096-byte file header, then {@code capacity} bytes of body holding
 * records. All fields are little endian (native order on the hosts we support).
 * <p>
 * File header. The geometry is written once and covered by its own CRC; the head (oldest unreleased record)
 * changes, so it lives in two slots written alternately, each with a generation and a CRC: a torn write of one
 * slot (host crash in the middle of a page write-back) leaves the other, older and still valid.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                  magic "BMRECLOG" (8 bytes)                   |  0
 *  +---------------------------------------------------------------+
 *  |                          version                              |  8
 *  +---------------------------------------------------------------+
 *  |                     max record length                         |  12
 *  +---------------------------------------------------------------+
 *  |                     capacity (u64, bytes of body)             |  16
 *  +---------------------------------------------------------------+
 *  |                     segment length (u64)                      |  24
 *  +---------------------------------------------------------------+
 *  |                CRC32C of header bytes 0..31                   |  32
 *  +---------------------------------------------------------------+
 *  |                     reserved up to 64                         |  36
 *  +---------------------------------------------------------------+
 *  |  slot A (64): generation u64, head position u64, head LSN u64,|  64
 *  |               epoch, CRC32C of slot bytes 0..27               |
 *  +---------------------------------------------------------------+
 *  |  slot B (128): same layout                                    |  128
 *  +---------------------------------------------------------------+
 *  |                     reserved up to 4096                       |
 *  +---------------------------------------------------------------+
 * </pre>
 * Record: a 64-byte header, then the payload padded to a multiple of 64. A record never crosses a segment end:
 * the rest of the segment is then filled by a PADDING record whose length runs to the segment end.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                     magic 0x43524D42 "BMRC"                   |  0
 *  +---------------------------------------------------------------+
 *  |                     type (1 DATA, 2 PADDING)                  |  4
 *  +---------------------------------------------------------------+
 *  |                     payload length                            |  8
 *  +---------------------------------------------------------------+
 *  |                     volume                                    |  12
 *  +---------------------------------------------------------------+
 *  |                     LSN (u64)                                 |  16
 *  +---------------------------------------------------------------+
 *  |                     offset in the volume (u64)                |  24
 *  +---------------------------------------------------------------+
 *  |                     epoch                                     |  32
 *  +---------------------------------------------------------------+
 *  |                     CRC32C of the payload                     |  36
 *  +---------------------------------------------------------------+
 *  |                     reserved (zero) up to 56                  |  40
 *  +---------------------------------------------------------------+
 *  |                     flags (NOT covered by the header CRC)     |  56
 *  +---------------------------------------------------------------+
 *  |                CRC32C of record header bytes 0..55            |  60
 *  +---------------------------------------------------------------+
 * </pre>
 * The epoch is bumped at every open and every reset and stamped in each record. Recovery only accepts a chain
 * of records whose epochs never decrease, so a stale record from an earlier session that happens to line up
 * behind a newer, shorter record (possible after a host crash wrote pages out of order) is never taken for a
 * record of the current history.
 */
public final class RecordLogDescriptor
{
    /** "BMRECLOG" read as a little-endian long. */
    public static final long FILE_MAGIC = 0x474F4C4345524D42L;
    public static final int FILE_VERSION = 1;
    public static final int FILE_HEADER_LENGTH = 4096;

    public static final int FILE_MAGIC_OFFSET = 0;
    public static final int FILE_VERSION_OFFSET = 8;
    public static final int MAX_RECORD_LENGTH_OFFSET = 12;
    public static final int CAPACITY_OFFSET = 16;
    public static final int SEGMENT_LENGTH_OFFSET = 24;
    public static final int GEOMETRY_CRC_OFFSET = 32;
    public static final int GEOMETRY_LENGTH = 32;

    public static final int SLOT_A_OFFSET = 64;
    public static final int SLOT_B_OFFSET = 128;
    public static final int SLOT_GENERATION_OFFSET = 0;
    public static final int SLOT_HEAD_POSITION_OFFSET = 8;
    public static final int SLOT_HEAD_LSN_OFFSET = 16;
    public static final int SLOT_EPOCH_OFFSET = 24;
    public static final int SLOT_CRC_OFFSET = 28;
    public static final int SLOT_CRC_COVERED_LENGTH = 28;

    /** "BMRC" read as a little-endian int. */
    public static final int RECORD_MAGIC = 0x43524D42;
    public static final int TYPE_DATA = 1;
    public static final int TYPE_PADDING = 2;

    public static final int RECORD_MAGIC_OFFSET = 0;
    public static final int RECORD_TYPE_OFFSET = 4;
    public static final int RECORD_LENGTH_OFFSET = 8;
    public static final int RECORD_VOLUME_OFFSET = 12;
    public static final int RECORD_LSN_OFFSET = 16;
    public static final int RECORD_OFFSET_OFFSET = 24;
    public static final int RECORD_EPOCH_OFFSET = 32;
    public static final int RECORD_PAYLOAD_CRC_OFFSET = 36;
    public static final int RECORD_RESERVED_OFFSET = 40;
    public static final int RECORD_FLAGS_OFFSET = 56;
    public static final int RECORD_HEADER_CRC_OFFSET = 60;
    public static final int RECORD_HEADER_CRC_COVERED_LENGTH = 56;

    public static final int RECORD_HEADER_LENGTH = 64;
    public static final int RECORD_ALIGNMENT = 64;

    /** Largest segment mapped at once: a MappedByteBuffer is int-indexed. */
    public static final int MAX_SEGMENT_LENGTH = 1 << 30;

    private RecordLogDescriptor()
    {
    }

    /**
     * @param payloadLength bytes of payload.
     * @return bytes the record takes in the log: header plus payload rounded up to the alignment.
     */
    public static int recordLength(final int payloadLength)
    {
        return RECORD_HEADER_LENGTH + ((payloadLength + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT);
    }
}
