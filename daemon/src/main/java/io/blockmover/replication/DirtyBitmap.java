package io.blockmover.replication;

import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;

import org.agrona.IoUtil;
import org.agrona.concurrent.UnsafeBuffer;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.io.DurableFiles;

/**
 * The persistent bitmap of regions the destination may not have yet: one bit per region, memory-mapped so that
 * a bit cleared survives a kill -9 of the daemon the instant it is cleared. A copy clears a bit only once the
 * destination has acknowledged the region as durable, so a lost update can only make us send more, never less. A
 * group's resync clears it once the region's record is in the source's log, which a crash of the host loses: the
 * region is in the group's activity log first, and such a crash resends what that holds.
 * <p>
 * Initial copy = every bit set; seeded copy = bits cleared where region checksums match; resume = send what is
 * still set. The same mechanism serves outage catch-up and crash recovery in continuous replication.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                  magic "BMBITMAP" (8 bytes)                   |  0
 *  +---------------------------------------------------------------+
 *  |                          version                              |  8
 *  +---------------------------------------------------------------+
 *  |                       region length                           |  12
 *  +---------------------------------------------------------------+
 *  |                 region count (u64)                            |  16
 *  +---------------------------------------------------------------+
 *  |                  reserved up to byte 64                       |  24
 *  +---------------------------------------------------------------+
 *  |                  bits: u64 words, bit i = region i            |  64
 *  +---------------------------------------------------------------+
 * </pre>
 * Bits may be set and cleared from any thread; open, force and close are for the conductor.
 */
public final class DirtyBitmap implements AutoCloseable
{
    public static final long MAGIC = 0x50414D5449424D42L; // "BMBITMAP" little endian
    public static final int VERSION = 1;
    public static final int HEADER_LENGTH = 64;

    private final Path path;
    private final MappedByteBuffer mapped;
    private final ConcurrentBitSet bits;
    private final int regionLength;

    private DirtyBitmap(final Path path, final MappedByteBuffer mapped, final long regionCount,
        final int regionLength)
    {
        this.path = path;
        this.mapped = mapped;
        this.regionLength = regionLength;
        this.bits = new ConcurrentBitSet(new UnsafeBuffer(mapped), HEADER_LENGTH, regionCount);
    }

    /**
     * Creates a bitmap file with every bit set, written to a temporary name and renamed, so a crash never leaves
     * a half-made file behind.
     *
     * @param path         of the file.
     * @param regionCount  number of regions.
     * @param regionLength bytes in a region.
     * @return the open bitmap.
     */
    public static DirtyBitmap createAllDirty(final Path path, final long regionCount, final int regionLength)
    {
        return create(path, regionCount, regionLength, true);
    }

    /**
     * Creates a bitmap file with every bit set or every bit clear, written to a temporary name and renamed, so a
     * crash never leaves a half-made file behind.
     *
     * @param path         of the file.
     * @param regionCount  number of regions.
     * @param regionLength bytes in a region.
     * @param dirty        whether every bit is set.
     * @return the open bitmap.
     */
    public static DirtyBitmap create(final Path path, final long regionCount, final int regionLength,
        final boolean dirty)
    {
        final Path tmp = path.resolveSibling(path.getFileName() + ".tmp");
        try
        {
            final int length = HEADER_LENGTH + ConcurrentBitSet.wordsLength(regionCount);
            Files.createDirectories(path.toAbsolutePath().getParent());
            Files.deleteIfExists(tmp);
            try (FileChannel channel = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE))
            {
                final MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_WRITE, 0, length);
                final UnsafeBuffer header = new UnsafeBuffer(mapped);
                header.putLong(0, MAGIC);
                header.putInt(8, VERSION);
                header.putInt(12, regionLength);
                header.putLong(16, regionCount);
                if (dirty)
                {
                    new ConcurrentBitSet(header, HEADER_LENGTH, regionCount).setAll();
                }
                mapped.force();
                IoUtil.unmap(mapped);
            }
            Files.move(tmp, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            DurableFiles.forceDirectory(path.toAbsolutePath().getParent());
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot create bitmap " + path + ": " + ex, ex);
        }
        return open(path, regionCount, regionLength);
    }

    /**
     * Opens an existing bitmap and checks it describes the same volume geometry.
     *
     * @param path         of the file.
     * @param regionCount  expected number of regions.
     * @param regionLength expected bytes per region.
     * @return the open bitmap.
     */
    public static DirtyBitmap open(final Path path, final long regionCount, final int regionLength)
    {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE))
        {
            final long expected = HEADER_LENGTH + ConcurrentBitSet.wordsLength(regionCount);
            if (channel.size() != expected)
            {
                throw new BlockmoverException(ErrorCode.IO_ERROR, "bitmap " + path + " is " + channel.size() +
                    " bytes, expected " + expected + ": the file is damaged; cancel the job and start it again");
            }
            final MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_WRITE, 0, expected);
            final UnsafeBuffer header = new UnsafeBuffer(mapped);
            if (header.getLong(0) != MAGIC || header.getInt(8) != VERSION || header.getInt(12) != regionLength ||
                header.getLong(16) != regionCount)
            {
                IoUtil.unmap(mapped);
                throw new BlockmoverException(ErrorCode.IO_ERROR, "bitmap " + path +
                    " does not match the volume geometry: cancel the job and start it again");
            }
            return new DirtyBitmap(path, mapped, regionCount, regionLength);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open bitmap " + path + ": " + ex, ex);
        }
    }

    public Path path()
    {
        return path;
    }

    /**
     * Bytes still to send: a region per set bit, the last region as short as the volume makes it.
     *
     * @param bits         one per region.
     * @param regionLength bytes in a region.
     * @param volumeSize   bytes in the volume.
     * @return bytes of the regions whose bits are set.
     */
    public static long dirtyBytes(final ConcurrentBitSet bits, final int regionLength, final long volumeSize)
    {
        final long last = bits.bitCount() - 1;
        long bytes = bits.cardinality() * regionLength;
        if (bits.get(last))
        {
            bytes -= regionLength - (volumeSize - last * regionLength);
        }
        return bytes;
    }

    public int regionLength()
    {
        return regionLength;
    }

    /**
     * @return the bits, shared by the stages of a session.
     */
    public ConcurrentBitSet bits()
    {
        return bits;
    }

    /**
     * Writes the mapped pages to disk, so the bitmap also survives a crash of the host.
     */
    public void force()
    {
        mapped.force();
    }

    @Override
    public void close()
    {
        mapped.force();
        IoUtil.unmap(mapped);
    }
}
