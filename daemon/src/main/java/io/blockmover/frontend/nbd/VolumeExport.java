package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.BufferUtil;

import io.blockmover.buffer.Slab;
import io.blockmover.io.Volume;

/**
 * An export over one {@link Volume}. Flush is the volume's fdatasync, which covers writes from every connection,
 * so the server may advertise multi-conn; FUA is a write followed by that flush. Trim is advisory in NBD and a
 * no-op here. The volume stays owned by whoever opened it: closing the export does not close it.
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
    public void trim(final long offset, final long length)
    {
        // Advisory: the content of a trimmed range is unspecified, so keeping the old bytes is correct.
    }

    @Override
    public void writeZeroes(final long offset, final long length, final boolean fua) throws IOException
    {
        // A duplicate per call (WRITE_ZEROES is rare) so concurrent callers do not share position and limit.
        final ByteBuffer source = zeroes.duplicate();
        long done = 0;
        while (done < length)
        {
            final int chunk = (int)Math.min(ZERO_LENGTH, length - done);
            volume.write(offset + done, source, chunk);
            done += chunk;
        }
        if (fua)
        {
            volume.force();
        }
    }

    @Override
    public String toString()
    {
        return "export '" + name + "' on " + volume + (readOnly ? " read-only" : "");
    }
}
