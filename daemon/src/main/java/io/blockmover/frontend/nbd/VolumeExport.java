package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.BitUtil;
import org.agrona.BufferUtil;

import io.blockmover.buffer.Slab;
import io.blockmover.io.Volume;

/**
 * An export over one {@link Volume}. Flush is the volume's fdatasync, which covers writes from every connection,
 * so the server may advertise multi-conn; FUA is a write followed by that flush. Trim is advisory in NBD: whole
 * blocks are given back where the volume can, the rest keeps its bytes. The volume stays owned by whoever opened
 * it: closing the export does not close it.
 * <p>
 * Thread-safe: the volume's positional I/O is, and the zero buffer is only ever read through duplicates.
 */
public final class VolumeExport implements NbdExport
{
    /** Zeroes written per system call for WRITE_ZEROES. */
    static final int ZERO_LENGTH = 1024 * 1024;

    private final String name;
    private final Volume volume;
    private final boolean readOnly;
    private final ByteBuffer zeroes;

    /**
     * @param name     export name.
     * @param volume   open volume; must be writable unless {@code readOnly}.
     * @param readOnly refuse writes with EPERM.
     */
    public VolumeExport(final String name, final Volume volume, final boolean readOnly)
    {
        if (!readOnly && !volume.isWritable())
        {
            throw new IllegalArgumentException("volume " + volume + " is open read-only: export it read-only");
        }
        this.name = name;
        this.volume = volume;
        this.readOnly = readOnly;
        this.zeroes = readOnly ? null : BufferUtil.allocateDirectAligned(ZERO_LENGTH, Slab.ALIGNMENT)
            .asReadOnlyBuffer();
    }

    @Override
    public String name()
    {
        return name;
    }

    @Override
    public long size()
    {
        return volume.size();
    }

    @Override
    public boolean isReadOnly()
    {
        return readOnly;
    }

    @Override
    public void read(final long offset, final ByteBuffer dst, final int length) throws IOException
    {
        volume.read(offset, dst, length);
    }

    @Override
    public void write(final long offset, final ByteBuffer src, final int length, final boolean fua)
        throws IOException
    {
        volume.write(offset, src, length);
        if (fua)
        {
            volume.force();
        }
    }

    @Override
    public int directFd()
    {
        // The volume outlives every connection: a plain export's volume closes with the daemon, after the server.
        return volume.directFd();
    }

    @Override
    public void flush() throws IOException
    {
        volume.force();
    }

    @Override
    public long allocationRun(final long offset, final long end)
    {
        return volume.allocationRun(offset, end);
    }

    @Override
    public void trim(final long offset, final long length)
    {
        // Advisory: the content of a trimmed range is unspecified. Its whole blocks are given back where the volume
        // can (a sparse file's hole, a block device's discard); elsewhere, and at ragged ends, the old bytes stay.
        final long start = BitUtil.align(offset, Slab.ALIGNMENT);
        final long end = alignDown(offset + length);
        if (end > start)
        {
            volume.discard(start, end - start);
        }
    }

    private static long alignDown(final long position)
    {
        return position & -Slab.ALIGNMENT;
    }

    @Override
    public void writeZeroes(final long offset, final long length, final boolean fua) throws IOException
    {
        writeZeroes(offset, length, fua, false);
    }

    /**
     * Where the client allows a hole (no NO_HOLE flag) and the volume deallocates, the range's whole blocks are
     * deallocated (they read as zeros: see {@link Volume#deallocate}) and only its ragged ends written.
     */
    @Override
    public void writeZeroes(final long offset, final long length, final boolean fua, final boolean mayDeallocate)
        throws IOException
    {
        final long start = BitUtil.align(offset, Slab.ALIGNMENT);
        final long end = alignDown(offset + length);
        if (mayDeallocate && end > start && volume.deallocate(start, end - start))
        {
            writeZeroRange(offset, start);
            writeZeroRange(end, offset + length);
        }
        else
        {
            writeZeroRange(offset, offset + length);
        }
        if (fua)
        {
            volume.force();
        }
    }

    private void writeZeroRange(final long from, final long to) throws IOException
    {
        // A duplicate per call (WRITE_ZEROES is rare) so concurrent callers do not share position and limit.
        final ByteBuffer source = zeroes.duplicate();
        for (long at = from; at < to; at += ZERO_LENGTH)
        {
            volume.write(at, source, (int)Math.min(ZERO_LENGTH, to - at));
        }
    }

    @Override
    public String toString()
    {
        return "export '" + name + "' on " + volume + (readOnly ? " read-only" : "");
    }
}
