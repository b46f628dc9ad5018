package io.blockmover.io;

import java.util.Arrays;

import com.sun.jna.LastErrorException;
import com.sun.jna.Native;

/**
 * The few libc calls the JDK does not offer: an O_EXCL claim on a block device and its size and sector size,
 * read-ahead advice for mapped files, page-cache advice for volumes, and write-behind and discards for logs.
 * Direct-mapped through JNA (cheap calls, no interface proxies). Any thread.
 */
public final class Libc
{
    public static final int O_RDONLY = 0;
    public static final int O_RDWR = 2;
    public static final int O_EXCL = 0x80;
    public static final int O_CLOEXEC = 0x80000;
    /** O_DIRECT differs between architectures: 040000 on x86-64, 0200000 on arm64. */
    public static final int O_DIRECT = "aarch64".equals(System.getProperty("os.arch")) ? 0x10000 : 0x4000;

    public static final int EBUSY = 16;
    public static final int ENOENT = 2;
    public static final int EACCES = 13;
    /** errno of lseek SEEK_DATA: no data at or after the offset. */
    public static final int ENXIO = 6;
    public static final int EOPNOTSUPP = 95;
    /** lseek whence: the first offset at or after the given one that holds data (a hole's bytes do not). */
    public static final int SEEK_DATA = 3;
    /** lseek whence: the first offset at or after the given one in a hole (the end of the file counts as one). */
    public static final int SEEK_HOLE = 4;

    /** ioctl BLKGETSIZE64: device size in bytes. */
    private static final long BLKGETSIZE64 = 0x80081272L;
    /** ioctl BLKDISCARD: discard a byte range {start, length} of a block device. */
    private static final long BLKDISCARD = 0x1277L;
    /** ioctl BLKSSZGET: logical block size. */
    private static final long BLKSSZGET = 0x1268L;

    static
    {
        Native.register(Libc.class, "c");
    }

    private Libc()
    {
    }

    public static native int open(String path, int flags) throws LastErrorException;

    public static native int close(int fd) throws LastErrorException;

    public static native long lseek(int fd, long offset, int whence) throws LastErrorException;

    public static native int ioctl(int fd, long request, long[] out) throws LastErrorException;

    public static native int ioctl(int fd, long request, int[] out) throws LastErrorException;

    public static native int getuid();

    /** madvise: the range will be accessed soon; for a file mapping, read it into the page cache ahead. */
    public static final int MADV_WILLNEED = 3;

    /**
     * @param address page-aligned start of a mapping.
     * @param length  bytes.
     * @param advice  e.g. {@link #MADV_WILLNEED}.
     * @return 0, or -1 (advice only: callers may ignore a failure).
     */
    public static native int madvise(long address, long length, int advice);

    public static native int getpid();

    /** posix_fadvise: drop the range's clean pages from the page cache (dirty ones are only queued for write). */
    public static final int POSIX_FADV_DONTNEED = 4;

    /**
     * @param fd     any descriptor of the file: the advice applies to its page cache, shared by all of them.
     * @param offset start of the range.
     * @param length bytes, 0 for "to the end".
     * @param advice e.g. {@link #POSIX_FADV_DONTNEED}.
     * @return 0 or an errno (it does not set errno; advice only: callers may ignore a failure).
     */
    public static native int posix_fadvise(int fd, long offset, long length, int advice);

    /** sync_file_range: first wait for the range's pages already under write-out. */
    public static final int SYNC_FILE_RANGE_WAIT_BEFORE = 1;
    /** sync_file_range: start writing the range's dirty pages that are not under write-out yet; do not wait. */
    public static final int SYNC_FILE_RANGE_WRITE = 2;
    /** sync_file_range: then wait for every page of the range under write-out. */
    public static final int SYNC_FILE_RANGE_WAIT_AFTER = 4;

    /**
     * Starts write-out of a file range without waiting for it and without flushing the device's cache: it makes
     * nothing durable, it only spreads the writing of data a later fdatasync would otherwise write in one burst.
     *
     * @param fd     any descriptor of the file (read-only will do): the page cache is the file's.
     * @param offset start of the range.
     * @param length bytes, 0 for "to the end".
     * @param flags  e.g. {@link #SYNC_FILE_RANGE_WRITE}.
     * @return 0, or -1 (advice only: callers may ignore a failure).
     */
    public static native int sync_file_range(int fd, long offset, long length, int flags);

    /** ioctl FS_IOC_FIEMAP: the file's extents, as the file system maps them. */
    private static final long FS_IOC_FIEMAP = 0xC020660BL;
    /** fiemap: write the file's dirty pages out first. */
    private static final int FIEMAP_FLAG_SYNC = 1;
    /** fiemap_extent: the file's last extent. */
    private static final long FIEMAP_EXTENT_LAST = 0x1;
    /** fiemap_extent: flags that say the extent's blocks are not known written (UNKNOWN, DELALLOC, UNWRITTEN). */
    private static final long FIEMAP_EXTENT_NOT_WRITTEN = 0x2 | 0x4 | 0x800;
    private static final int FIEMAP_HEADER_LONGS = 4;
    private static final int FIEMAP_EXTENT_LONGS = 7;
    private static final int FIEMAP_BATCH = 64;

    /** Told each range of a file whose blocks are not written: holes, and unwritten or unknown extents. */
    @FunctionalInterface
    public interface UnwrittenRange
    {
        /**
         * @param start first byte of the range in the file.
         * @param end   byte after it.
         */
        void found(long start, long end);
    }

    /** Told each extent of a file by {@link #walkExtents}, in order. */
    @FunctionalInterface
    private interface ExtentVisitor
    {
        /**
         * @param seen    where the extents before this one end: a hole from there if less than logical.
         * @param logical the extent's first byte in the file.
         * @param length  its bytes.
         * @param flags   its fe_flags.
         * @return whether to go on to the next extent.
         */
        boolean extent(long seen, long logical, long length, long flags);
    }

    /**
     * Walks a file's extents within [0, end) (FS_IOC_FIEMAP, which reads the file system's extents, not the page
     * cache as lseek's SEEK_HOLE does), a batch per call, until the last one or the visitor stops.
     *
     * @return where the extents seen end: a hole from there to {@code end} if less.
     * @throws LastErrorException with the errno (EOPNOTSUPP where the file system has no FIEMAP).
     */
    private static long walkExtents(final int fd, final long end, final int fiemapFlags, final ExtentVisitor visitor)
    {
        // struct fiemap (32 bytes) then struct fiemap_extent (56 bytes) each, little-endian words.
        final long[] map = new long[FIEMAP_HEADER_LONGS + FIEMAP_BATCH * FIEMAP_EXTENT_LONGS];
        long next = 0;
        boolean last = false;
        while (!last && next < end)
        {
            Arrays.fill(map, 0);
            map[0] = next;                         // fm_start
            map[1] = end - next;                   // fm_length
            map[2] = fiemapFlags;                  // fm_flags; fm_mapped_extents is the upper half
            map[3] = FIEMAP_BATCH;                 // fm_extent_count
            ioctl(fd, FS_IOC_FIEMAP, map);
            final int mapped = (int)(map[2] >>> 32);
            if (mapped == 0)
            {
                break;
            }
            for (int i = 0; i < mapped; i++)
            {
                final int at = FIEMAP_HEADER_LONGS + i * FIEMAP_EXTENT_LONGS;
                final long logical = map[at];
                final long length = map[at + 2];
                final long flags = map[at + 5] & 0xffffffffL;
                if (!visitor.extent(next, logical, length, flags))
                {
                    return next;
                }
                next = Math.max(next, logical + length);
                last = (flags & FIEMAP_EXTENT_LAST) != 0;
            }
        }
        return next;
    }

    /**
     * @param fd  a descriptor of the file.
     * @param end where to stop.
     * @return whether the file has a hole within [0, end): a range with no blocks allocated (an unwritten extent,
     *     as fallocate leaves, is allocated).
     * @throws LastErrorException with the errno (EOPNOTSUPP where the file system has no FIEMAP).
     */
    public static boolean hasHole(final int fd, final long end)
    {
        // Stopped at a hole before an extent, or the extents end short of end.
        return walkExtents(fd, end, 0, (seen, logical, length, flags) -> logical <= seen) < end;
    }

    /**
     * Finds the ranges of a file, within [0, end), whose blocks are not written, from its extents (see
     * {@link #walkExtents}), its dirty pages written out first.
     *
     * @param fd    a descriptor of the file.
     * @param end   where to stop.
     * @param found told each range.
     * @throws LastErrorException with the errno (EOPNOTSUPP where the file system has no FIEMAP).
     */
    public static void unwrittenRanges(final int fd, final long end, final UnwrittenRange found)
    {
        final long through = walkExtents(fd, end, FIEMAP_FLAG_SYNC, (seen, logical, length, flags) ->
        {
            if (logical > seen)
            {
                found.found(seen, Math.min(logical, end)); // A hole.
            }
            if ((flags & FIEMAP_EXTENT_NOT_WRITTEN) != 0)
            {
                found.found(Math.max(logical, seen), Math.min(logical + length, end));
            }
            return true;
        });
        if (through < end)
        {
            found.found(through, end); // A hole to the end.
        }
    }

    /** fallocate: keep the file's size. */
    public static final int FALLOC_FL_KEEP_SIZE = 0x01;
    /** fallocate: zero the range; its blocks stay allocated (on ext4, as unwritten extents). */
    public static final int FALLOC_FL_ZERO_RANGE = 0x10;
    /**
     * fallocate, with {@link #FALLOC_FL_KEEP_SIZE}: deallocate the range, which then reads as zeros (a hole in a
     * file; on a block device, a WRITE ZEROES the device must serve without writing them, or EOPNOTSUPP).
     */
    public static final int FALLOC_FL_PUNCH_HOLE = 0x02;

    /**
     * @param fd     a descriptor of the file open for writing.
     * @param mode   e.g. {@link #FALLOC_FL_ZERO_RANGE} | {@link #FALLOC_FL_KEEP_SIZE}.
     * @param offset start of the range.
     * @param length bytes.
     * @return 0.
     * @throws LastErrorException with the errno (EOPNOTSUPP where the file system cannot).
     */
    public static native int fallocate(int fd, int mode, long offset, long length) throws LastErrorException;

    /**
     * @param fd of an open block device.
     * @return its size in bytes.
     */
    public static long blockDeviceSize(final int fd)
    {
        final long[] out = new long[1];
        ioctl(fd, BLKGETSIZE64, out);
        return out[0];
    }

    /**
     * Discards a range of a block device (BLKDISCARD): the device may unmap it, and what reads return there
     * afterwards is the device's business (a thin volume's unmapped blocks read as zeros; a block it only partly
     * covers keeps its data).
     *
     * @param fd     of a block device open for writing.
     * @param start  byte offset, a multiple of the logical block size.
     * @param length bytes, a multiple of the logical block size.
     * @throws LastErrorException with the errno (EOPNOTSUPP where the device takes no discards).
     */
    public static void discard(final int fd, final long start, final long length)
    {
        ioctl(fd, BLKDISCARD, new long[] {start, length});
    }

    /**
     * @param fd of an open block device.
     * @return its logical block (sector) size in bytes.
     */
    public static int logicalBlockSize(final int fd)
    {
        final int[] out = new int[1];
        ioctl(fd, BLKSSZGET, out);
        return out[0];
    }
}
