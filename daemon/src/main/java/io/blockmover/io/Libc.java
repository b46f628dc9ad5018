package io.blockmover.io;

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

    public static final int EBUSY = 16;
    public static final int ENOENT = 2;
    public static final int EACCES = 13;

    /** ioctl BLKGETSIZE64: device size in bytes. */
    private static final long BLKGETSIZE64 = 0x80081272L;
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

    /** sync_file_range: start writing the range's dirty pages that are not under write-out yet; do not wait. */
    public static final int SYNC_FILE_RANGE_WRITE = 2;

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

    /** fallocate: keep the file's size. */
    public static final int FALLOC_FL_KEEP_SIZE = 0x01;
    /** fallocate: zero the range; its blocks stay allocated (on ext4, as unwritten extents). */
    public static final int FALLOC_FL_ZERO_RANGE = 0x10;

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
