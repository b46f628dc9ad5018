package io.blockmover.replication.verify;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import org.agrona.concurrent.UnsafeBuffer;

/**
 * Layout of a VERIFY record's payload, of a VERIFY_RESULT frame's payload, and the digest arithmetic both sides
 * share. All integers little endian.
 * <pre>
 * VERIFY record payload (in the log and in a RECORD frame whose aux carries {@link #RECORD_VERIFY}):
 *   0                   8                  12                 16                 20                 24
 *   +-------------------+------------------+------------------+------------------+------------------+----
 *   | job id (u64)      | covered (u32)    | sub-block (u32)  | count (u32)      | reserved, 0      | count x
 *   +-------------------+------------------+------------------+------------------+------------------+ CRC32C (u32)
 *   covered = bytes of the region checked (shorter than the region at the end of a volume); the record's offset
 *   is the region's first byte; digest i covers [offset + i * sub-block, min(+ sub-block, offset + covered)).
 *
 * VERIFY_RESULT frame: sequence = LSN of the VERIFY record, volume id and offset as in the record,
 *   aux = bit i set when digest i differs, payload:
 *   0                   8                  12                 16
 *   +-------------------+------------------+------------------+
 *   | job id (u64)      | status (u32)     | reserved, 0      |
 *   +-------------------+------------------+------------------+
 * </pre>
 * Sub-blocks are 64 KiB, or larger when a region holds more than 64 of them, so a result's mask fits one long.
 * Not thread safe: one instance per thread (it keeps a CRC32C and a buffer view, so it allocates nothing).
 */
public final class VerifyRecord
{
    /** Record flag on the wire and in the log: a VERIFY record (digests, no data); never written to a volume. */
    public static final int RECORD_VERIFY = io.blockmover.replication.log.RecordFlags.VERIFY;
    /** Result status: the destination digested its copy. */
    public static final int STATUS_COMPARED = 0;
    /** Result status: the destination could not read its copy (counted as every sub-block differing). */
    public static final int STATUS_READ_ERROR = 1;
    /** Result status: the record did not describe the region it came with. */
    public static final int STATUS_MALFORMED = 2;

    public static final int JOB_ID_OFFSET = 0;
    public static final int COVERED_OFFSET = 8;
    public static final int SUB_BLOCK_OFFSET = 12;
    public static final int COUNT_OFFSET = 16;
    public static final int DIGESTS_OFFSET = 24;
    public static final int MAX_DIGESTS = 64;
    public static final int MAX_LENGTH = DIGESTS_OFFSET + MAX_DIGESTS * 4;
    public static final int RESULT_LENGTH = 16;
    public static final int RESULT_STATUS_OFFSET = 8;
    static final int MIN_SUB_BLOCK = 64 * 1024;

    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;

    private final CRC32C crc = new CRC32C();
    private final UnsafeBuffer view = new UnsafeBuffer(0, 0);

    /**
     * @param regionLength the group's region length.
     * @return the sub-block length: 64 KiB, doubled until at most {@link #MAX_DIGESTS} fit a region.
     */
    public static int subBlockLength(final int regionLength)
    {
        int sub = MIN_SUB_BLOCK;
        while ((regionLength + (long)sub - 1) / sub > MAX_DIGESTS)
        {
            sub <<= 1;
        }
        return Math.min(sub, regionLength);
    }

    /**
     * Writes a VERIFY payload for the bytes of a region.
     *
     * @param jobId    the verify job.
     * @param data     the region's bytes from position 0 (not changed: a view is used).
     * @param covered  bytes of the region held in data.
     * @param subBlock sub-block length.
     * @param payload  heap or direct buffer of at least {@link #MAX_LENGTH} bytes; written from index 0.
     * @return the payload length.
     */
    public int encode(final long jobId, final ByteBuffer data, final int covered, final int subBlock,
        final ByteBuffer payload)
    {
        final int count = (covered + subBlock - 1) / subBlock;
        view.wrap(payload, 0, MAX_LENGTH);
        view.putLong(JOB_ID_OFFSET, jobId, LE);
        view.putInt(COVERED_OFFSET, covered, LE);
        view.putInt(SUB_BLOCK_OFFSET, subBlock, LE);
        view.putInt(COUNT_OFFSET, count, LE);
        view.putInt(COUNT_OFFSET + 4, 0, LE);
        for (int i = 0; i < count; i++)
        {
            view.putInt(DIGESTS_OFFSET + 4 * i, digest(data, i * subBlock, Math.min(subBlock, covered - i * subBlock)),
                LE);
        }
        return DIGESTS_OFFSET + 4 * count;
    }

    /**
     * @return CRC32C of data[from, from + length), leaving data's position and limit as they were.
     */
    int digest(final ByteBuffer data, final int from, final int length)
    {
        final int position = data.position();
        final int limit = data.limit();
        data.limit(from + length).position(from);
        crc.reset();
        crc.update(data);
        data.limit(limit).position(position);
        return (int)crc.getValue();
    }

    /**
     * Checks a VERIFY payload against the destination's copy of the region.
     *
     * @param payload  the record's payload, position..limit.
     * @param data     the destination's bytes of the region from position 0, at least covered bytes.
     * @return bit i set when sub-block i differs.
     */
    public long compare(final ByteBuffer payload, final ByteBuffer data)
    {
        view.wrap(payload, payload.position(), payload.remaining());
        final int covered = view.getInt(COVERED_OFFSET, LE);
        final int subBlock = view.getInt(SUB_BLOCK_OFFSET, LE);
        final int count = view.getInt(COUNT_OFFSET, LE);
        long mask = 0;
        for (int i = 0; i < count; i++)
        {
            final int expected = view.getInt(DIGESTS_OFFSET + 4 * i, LE);
            if (digest(data, i * subBlock, Math.min(subBlock, covered - i * subBlock)) != expected)
            {
                mask |= 1L << i;
            }
        }
        return mask;
    }

    /**
     * @param payload      a received VERIFY payload, position..limit.
     * @param regionLength the group's region length.
     * @return null when it is well formed, else why not (built only then).
     */
    public String check(final ByteBuffer payload, final int regionLength)
    {
        final int length = payload.remaining();
        if (length < DIGESTS_OFFSET)
        {
            return "VERIFY payload of " + length + " bytes";
        }
        view.wrap(payload, payload.position(), length);
        final int covered = view.getInt(COVERED_OFFSET, LE);
        final int subBlock = view.getInt(SUB_BLOCK_OFFSET, LE);
        final int count = view.getInt(COUNT_OFFSET, LE);
        if (covered <= 0 || covered > regionLength || subBlock <= 0 || count <= 0 || count > MAX_DIGESTS ||
            (long)count * subBlock < covered || (long)(count - 1) * subBlock >= covered ||
            length != DIGESTS_OFFSET + 4 * count)
        {
            return "VERIFY payload covering " + covered + " bytes in " + count + " sub-blocks of " + subBlock;
        }
        return null;
    }

    /**
     * @param payload a VERIFY payload, position..limit.
     * @return its job id.
     */
    public long jobId(final ByteBuffer payload)
    {
        view.wrap(payload, payload.position(), payload.remaining());
        return view.getLong(JOB_ID_OFFSET, LE);
    }

    /**
     * @param payload a VERIFY payload, position..limit.
     * @return the bytes it covers.
     */
    public int covered(final ByteBuffer payload)
    {
        view.wrap(payload, payload.position(), payload.remaining());
        return view.getInt(COVERED_OFFSET, LE);
    }

    /**
     * @param payload a VERIFY payload, position..limit.
     * @return the digests it carries.
     */
    public int count(final ByteBuffer payload)
    {
        view.wrap(payload, payload.position(), payload.remaining());
        return view.getInt(COUNT_OFFSET, LE);
    }
}
