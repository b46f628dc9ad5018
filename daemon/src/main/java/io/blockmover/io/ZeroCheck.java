package io.blockmover.io;

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
