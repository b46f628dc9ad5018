package io.blockmover.replication.log;

import java.nio.ByteBuffer;

/**
 * A record of a range of zeros ({@link RecordFlags#ZEROES}): its payload is the range's length, 8 bytes little
 * endian, not the zeros. A client's WRITE_ZEROES and an empty region's resync took their whole length in both logs
 * and on the link before; a thin volume's initial sync sent every empty region as a region of data.
 * <p>
 * The length is at most the log's longest record, so that a partner that does not take these records can be sent
 * the zeros as one record of data under the same LSN. Anything that reads a record's place on a volume asks
 * {@link #volumeLength}, not the payload's length.
 */
public final class ZeroRecord
{
    /** Bytes of a zero record's payload. */
    public static final int PAYLOAD_LENGTH = 8;

    private ZeroRecord()
    {
    }

    /**
     * @param flags a record's flags.
     * @return whether it is a record of zeros.
     */
    public static boolean isZeroes(final int flags)
    {
        return (flags & RecordFlags.ZEROES) != 0;
    }

    /**
     * Writes a zero record's payload at index 0 of {@code dst}, whatever its byte order; position and limit
     * untouched.
     *
     * @param dst    at least {@link #PAYLOAD_LENGTH} bytes.
     * @param length bytes of zeros.
     * @return dst.
     */
    public static ByteBuffer encode(final ByteBuffer dst, final long length)
    {
        for (int i = 0; i < PAYLOAD_LENGTH; i++)
        {
            dst.put(i, (byte)(length >>> (8 * i)));
        }
        return dst;
    }

    /**
     * @param payload a zero record's payload between position and limit; untouched.
     * @return the length of zeros it stands for, or -1 when the payload is not {@link #PAYLOAD_LENGTH} bytes.
     */
    public static long decode(final ByteBuffer payload)
    {
        if (payload.remaining() != PAYLOAD_LENGTH)
        {
            return -1;
        }
        final int at = payload.position();
        long length = 0;
        for (int i = PAYLOAD_LENGTH - 1; i >= 0; i--)
        {
            length = (length << 8) | (payload.get(at + i) & 0xFF);
        }
        return length;
    }

    /**
     * @param volumeSize bytes of the record's volume.
     * @param offset     the record's offset in it.
     * @return the shortest range of zeros a partner takes there (one 4 KiB block, or what is left of the volume):
     *     what a damaged zero record stands for once its regions are marked for resync.
     */
    public static long shortestAt(final long volumeSize, final long offset)
    {
        return Math.min(io.blockmover.buffer.Slab.ALIGNMENT, volumeSize - offset);
    }

    /**
     * @param record a cursor on a record.
     * @return bytes of the volume the record covers: its payload's length, or for a zero record the length its
     *     payload gives; a zero record whose payload makes no sense (damaged) gives the log's longest record, every
     *     byte it may have covered.
     */
    public static int volumeLength(final RecordLog.Cursor record, final int maxRecordLength)
    {
        if (!isZeroes(record.flags()))
        {
            return record.length();
        }
        final long length = decode(record.payload());
        return length > 0 && length <= maxRecordLength ? (int)length : maxRecordLength;
    }
}
