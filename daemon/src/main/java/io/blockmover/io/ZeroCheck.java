package io.blockmover.io;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Whether a buffer holds only zeros, for a writer that deallocates such a range ({@link Volume#deallocate}) instead
 * of writing it: a vectorized compare ({@link ByteBuffer#mismatch}) with zeros a piece at a time, allocating
 * nothing, which random data fails at its first bytes. One per thread: the piece's limit moves.
 */
public final class ZeroCheck
{
    /** The shortest range worth a compare and a hole: a region; shorter ones are written. */
    public static final int MIN_LENGTH = 64 * 1024;

    private final ByteBuffer zeroPiece = ByteBuffer.allocateDirect(64 * 1024);

    /**
     * @param buffer the bytes between its position and limit; both are as before on return.
     * @return whether they are all zeros.
     */
    public boolean isAllZeros(final ByteBuffer buffer)
    {
        final int start = buffer.position();
        final int end = buffer.limit();
        try
        {
            for (int at = start; at < end; at += zeroPiece.capacity())
            {
                final int n = Math.min(zeroPiece.capacity(), end - at);
                buffer.limit(at + n).position(at);
                zeroPiece.clear().limit(n);
                if (buffer.mismatch(zeroPiece) != -1)
                {
                    return false;
                }
            }
            return true;
        }
        finally
        {
            buffer.limit(end).position(start);
        }
    }

    /**
     * @param volume   the volume the bytes are for.
     * @param position where they go in it.
     * @param bytes    the bytes between its position and limit; both are as before on return.
     * @return whether they hold a piece that the volume could deallocate ({@link Volume#deallocates}: a 4 KiB block
     *     of a file, a unit of a block device's discard granularity) and that holds only zeros. Random data fails
     *     each piece's compare at its first bytes.
     */
    public boolean hasZeroPiece(final Volume volume, final long position, final ByteBuffer bytes)
    {
        final int start = bytes.position();
        final int end = bytes.limit();
        final long unit = volume.deallocationUnit();
        try
        {
            for (long at = firstPiece(position, unit); at + unit <= position + (end - start); at += unit)
            {
                final int from = start + (int)(at - position);
                bytes.limit(from + (int)unit).position(from);
                if (isAllZeros(bytes))
                {
                    return true;
                }
            }
            return false;
        }
        finally
        {
            bytes.limit(end).position(start);
        }
    }

    /**
     * Writes a range of a volume whose zero pieces ({@link #hasZeroPiece}) the volume deallocates instead: a chunk
     * or region read off a sparse or thin source, data around holes, stays so on a sparse or thin destination. The
     * rest is written with O_DIRECT, a run at a time (all of it in one write where no piece is zeros); a piece the
     * volume refuses to deallocate is written too.
     * Durable, like a write, with the volume's next force. Allocates nothing.
     *
     * @param volume   to write.
     * @param position where the bytes go, a multiple of 4 KiB.
     * @param aligned  the bytes from 0, in a buffer aligned for O_DIRECT; its position and limit are left anywhere.
     * @param length   bytes, a multiple of 4 KiB.
     * @return bytes deallocated.
     * @throws IOException on a write error.
     */
    public long writeAroundZeroPieces(final Volume volume, final long position, final ByteBuffer aligned,
        final int length) throws IOException
    {
        final long unit = volume.deallocationUnit();
        long deallocated = 0;
        int dataFrom = 0;
        int at = (int)(firstPiece(position, unit) - position);
        while (at < length)
        {
            final int n = (int)Math.min(unit, length - at);
            aligned.limit(at + n).position(at);
            if (n == unit && isAllZeros(aligned) && volume.deallocate(position + at, n))
            {
                writeRun(volume, position, aligned, dataFrom, at);
                deallocated += n;
                dataFrom = at + n;
            }
            at += n;
        }
        writeRun(volume, position, aligned, dataFrom, length);
        return deallocated;
    }

    /**
     * @return the first multiple of {@code unit} at or after {@code position} (a unit need not be a power of two).
     */
    private static long firstPiece(final long position, final long unit)
    {
        return (position + unit - 1) / unit * unit;
    }

    private static void writeRun(final Volume volume, final long position, final ByteBuffer aligned, final int from,
        final int to) throws IOException
    {
        if (to > from)
        {
            aligned.limit(to).position(from);
            volume.writeRange(position + from, aligned);
        }
    }

    /**
     * @return whether a range of a volume may be deallocated rather than written, once its bytes are zeros: long
     *     enough, aligned for the volume, and a volume that deallocates ({@link Volume#canDeallocate}).
     */
    public static boolean worthChecking(final Volume volume, final long position, final int length)
    {
        return length >= MIN_LENGTH && mayDeallocate(volume, position, length);
    }

    /**
     * @return whether a range known to be zeros (a zero record: nothing to compare) may be deallocated rather than
     *     written: aligned for the volume, and a volume that deallocates ({@link Volume#canDeallocate}).
     */
    public static boolean mayDeallocate(final Volume volume, final long position, final int length)
    {
        return ((position | length) & (io.blockmover.buffer.Slab.ALIGNMENT - 1)) == 0 && volume.canDeallocate();
    }
}
