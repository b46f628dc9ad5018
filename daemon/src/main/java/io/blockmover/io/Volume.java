package io.blockmover.io;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import com.sun.jna.LastErrorException;
import com.sun.nio.file.ExtendedOpenOption;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;

/**
 * A block device or a regular file, opened O_DIRECT by the daemon alone.
 * <p>
 * The JDK checks O_DIRECT alignment against 4096 bytes whatever the device's sector size, so the body of every
 * transfer goes through an O_DIRECT channel and a tail that is not a multiple of 4096 (only ever at the very end
 * of a volume whose size is a multiple of 512 but not of 4096) goes through a second, buffered channel; a
 * {@link #force()} makes both durable, as fdatasync covers the whole inode. Block devices are claimed with
 * O_EXCL for as long as they are open, so a mount or another exclusive opener fails instead of racing us.
 * Regular files are locked against other processes (shared for reading, exclusive for writing) and opened at
 * most once in this JVM.
 * <p>
 * Reads and writes may come from any one thread at a time per direction; open and close are for the conductor.
 */
public final class Volume implements AutoCloseable
{
    private static final int S_IFMT = 0170000;
    private static final int S_IFBLK = 0060000;
    private static final int S_IFREG = 0100000;

    /**
     * Regular files open in this JVM, by inode. POSIX record locks belong to the process: a second channel on the
     * same file, opened and closed again to refuse a second job, would drop the first job's lock for every other
     * process. So a second open in this JVM is refused before any channel is opened.
     */
    private static final Set<Object> OPEN_FILES = ConcurrentHashMap.newKeySet();
    /** Bytes read back at a time after a discard. */
    private static final int CHECK_LENGTH = 1 << 20;

    private final Path path;
    private final boolean writable;
    private final boolean blockDevice;
    private final long size;
    private final int logicalBlockSize;
    private final FileChannel direct;
    private final FileChannel buffered;
    private final FileLock lock;
    /**
     * A descriptor of its own besides the channels: for a block device the O_EXCL claim (its ioctls use it too),
     * for a writable file a plain read-only one; page-cache advice goes through it. -1 for a read-only file.
     */
    private final int fd;
    /**
     * An O_DIRECT descriptor for Linux AIO ({@link LinuxAio}), which takes a descriptor, not a channel; the JDK
     * does not reveal its channels' own.
     */
    private final int directFd;
    private final Object fileKey;
    /** Set by {@link #writeBuffered}, cleared by the {@link #force()} that makes those writes durable. */
    private volatile boolean bufferedSinceForce;
    /**
     * Whether {@link #deallocate} is tried: on a block device, and on a file that has a hole at open (one the operator
     * made sparse). Not on a file with every block allocated: fallocated or written whole, it keeps its space
     * reserved, and later writes there stay overwrites (a write into a hole allocates, and each force then commits
     * that to the file system's journal). Cleared once a deallocation failed: it is not tried again.
     */
    private volatile boolean canDeallocate;
    /** Set once the device refused a WRITE ZEROES: {@link #deallocate} discards and reads back instead. */
    private volatile boolean discardsInstead;
    /** Whether {@link #discard} asks a block device: until it answered that it takes no discards. */
    private volatile boolean discards = true;
    /**
     * A block device's discard granularity (its queue's, in sysfs): a thin target unmaps only whole chunks of its
     * pool, so a discard of a range not made of them cannot read back as zeros, and is not tried.
     */
    private long discardGranularity = Slab.ALIGNMENT;
    private ByteBuffer checkBuffer;
    private ZeroCheck zeroCheck;
    /** Whether {@link #isHole} asks the file system (lseek SEEK_DATA): a file, until that failed once. */
    private volatile boolean seeksHoles;

    private Volume(
        final Path path,
        final boolean writable,
        final boolean blockDevice,
        final long size,
        final int logicalBlockSize,
        final FileChannel direct,
        final FileChannel buffered,
        final FileLock lock,
        final int fd,
        final int directFd,
        final Object fileKey)
    {
        this.path = path;
        this.writable = writable;
        this.blockDevice = blockDevice;
        this.size = size;
        this.logicalBlockSize = logicalBlockSize;
        this.direct = direct;
        this.buffered = buffered;
        this.lock = lock;
        this.fd = fd;
        this.directFd = directFd;
        this.fileKey = fileKey;
    }

    /**
     * Opens a volume, checking everything before any byte moves.
     *
     * @param path     of a block device or regular file.
     * @param writable whether it will be written (a destination).
     * @return the open volume.
     * @throws BlockmoverException NOT_FOUND, NOT_A_VOLUME, VOLUME_IN_USE, MISALIGNED_SIZE, PERMISSION_DENIED or
     *                             IO_ERROR with a message naming the fix.
     */
    public static Volume open(final Path path, final boolean writable)
    {
        final int mode;
        try
        {
            mode = (Integer)Files.getAttribute(path, "unix:mode");
        }
        catch (final NoSuchFileException ex)
        {
            throw new BlockmoverException(ErrorCode.NOT_FOUND, "volume " + path + " does not exist" +
                (writable ? " (create the destination first, e.g. truncate -s SIZE FILE, or name a block device)" :
                ""));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot stat volume " + path + ": " + ex, ex);
        }

        final boolean blockDevice = (mode & S_IFMT) == S_IFBLK;
        if (!blockDevice && (mode & S_IFMT) != S_IFREG)
        {
            throw new BlockmoverException(
                ErrorCode.NOT_A_VOLUME, path + " is neither a block device nor a regular file");
        }

        int fd = -1;
        int directFd = -1;
        Object fileKey = null;
        FileChannel direct = null;
        FileChannel buffered = null;
        FileLock lock = null;
        try
        {
            final long size;
            int logicalBlockSize = 512;
            if (blockDevice)
            {
                fd = claim(path, writable);
                size = Libc.blockDeviceSize(fd);
                logicalBlockSize = Libc.logicalBlockSize(fd);
            }
            else
            {
                final Object key = Files.readAttributes(path, BasicFileAttributes.class).fileKey();
                if (!OPEN_FILES.add(key))
                {
                    throw new BlockmoverException(ErrorCode.VOLUME_IN_USE, "volume " + path +
                        " is already open in this daemon (a group, a copy job or an NBD export holds it): " +
                        "'blockmover status' shows which");
                }
                fileKey = key;
                size = Files.size(path);
            }
            if (size == 0)
            {
                throw new BlockmoverException(ErrorCode.MISALIGNED_SIZE, "volume " + path + " is empty (0 bytes)");
            }
            if (size % logicalBlockSize != 0)
            {
                throw new BlockmoverException(ErrorCode.MISALIGNED_SIZE, "volume " + path + " is " + size +
                    " bytes, not a multiple of its " + logicalBlockSize + "-byte logical block");
            }

            final OpenOption[] bufferedOptions = writable ?
                new OpenOption[] {StandardOpenOption.READ, StandardOpenOption.WRITE} :
                new OpenOption[] {StandardOpenOption.READ};
            buffered = FileChannel.open(path, bufferedOptions);
            if (!blockDevice)
            {
                lock = lockFile(path, buffered, writable);
            }
            final OpenOption[] directOptions = writable ?
                new OpenOption[] {StandardOpenOption.READ, StandardOpenOption.WRITE, ExtendedOpenOption.DIRECT} :
                new OpenOption[] {StandardOpenOption.READ, ExtendedOpenOption.DIRECT};
            direct = FileChannel.open(path, directOptions);
            if (!blockDevice && writable)
            {
                fd = openDescriptor(path, Libc.O_RDONLY | Libc.O_CLOEXEC);
            }
            // Without O_EXCL: a block device's claim is fd's, and a second exclusive open would be refused.
            directFd = openDescriptor(path, (writable ? Libc.O_RDWR : Libc.O_RDONLY) | Libc.O_DIRECT | Libc.O_CLOEXEC);

            final Volume volume = new Volume(path, writable, blockDevice, size, logicalBlockSize, direct, buffered,
                lock, fd, directFd, fileKey);
            volume.canDeallocate = writable && directFd >= 0 && (blockDevice || isSparse(directFd, size));
            volume.seeksHoles = !blockDevice && directFd >= 0;
            if (blockDevice)
            {
                volume.discardGranularity = discardGranularity(path);
            }
            return volume;
        }
        catch (final AccessDeniedException ex)
        {
            closeQuietly(direct, buffered, lock, fd, directFd, fileKey);
            throw new BlockmoverException(ErrorCode.PERMISSION_DENIED, "permission denied opening " + path +
                (writable ? " for writing" : "") + ": run blockmoverd as a user that may, or fix the owner/mode");
        }
        catch (final IOException ex)
        {
            closeQuietly(direct, buffered, lock, fd, directFd, fileKey);
            if (ex.getMessage() != null && ex.getMessage().contains("Invalid argument"))
            {
                throw new BlockmoverException(ErrorCode.NOT_A_VOLUME,
                    path + " does not support O_DIRECT (tmpfs or a FUSE file system?): use a block device or a " +
                    "file on ext4/xfs", ex);
            }
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open volume " + path + ": " + ex, ex);
        }
        catch (final RuntimeException ex)
        {
            closeQuietly(direct, buffered, lock, fd, directFd, fileKey);
            throw ex;
        }
    }

    private static int claim(final Path path, final boolean writable)
    {
        try
        {
            return Libc.open(path.toString(), (writable ? Libc.O_RDWR : Libc.O_RDONLY) | Libc.O_EXCL | Libc.O_CLOEXEC);
        }
        catch (final LastErrorException ex)
        {
            if (ex.getErrorCode() == Libc.EBUSY)
            {
                throw new BlockmoverException(ErrorCode.VOLUME_IN_USE, "volume " + path +
                    " is in use (mounted, part of a RAID/LVM, or held by another program): unmount it or stop " +
                    "its holder (see lsblk and fuser -vm " + path + ")");
            }
            if (ex.getErrorCode() == Libc.EACCES)
            {
                throw new BlockmoverException(ErrorCode.PERMISSION_DENIED, "permission denied opening " + path +
                    ": run blockmoverd as root or as a member of the disk group");
            }
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open " + path + ": errno " + ex.getErrorCode());
        }
    }

    private static int openDescriptor(final Path path, final int flags)
    {
        try
        {
            return Libc.open(path.toString(), flags);
        }
        catch (final LastErrorException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open " + path + ": errno " + ex.getErrorCode());
        }
    }

    private static FileLock lockFile(final Path path, final FileChannel channel, final boolean writable)
        throws IOException
    {
        FileLock lock = null;
        try
        {
            lock = channel.tryLock(0, Long.MAX_VALUE, !writable);
        }
        catch (final OverlappingFileLockException ex)
        {
            lock = null;
        }
        if (lock == null)
        {
            throw new BlockmoverException(ErrorCode.VOLUME_IN_USE, "volume " + path +
                " is locked by another process (a VM's qemu, which locks its images? another blockmoverd?): stop " +
                "it first; 'lslocks' names it");
        }
        return lock;
    }

    private static void closeQuietly(
        final FileChannel direct, final FileChannel buffered, final FileLock lock, final int fd, final int directFd,
        final Object fileKey)
    {
        try
        {
            if (lock != null && lock.isValid())
            {
                lock.release();
            }
            if (direct != null)
            {
                direct.close();
            }
            if (buffered != null)
            {
                buffered.close();
            }
        }
        catch (final IOException ignore)
        {
            // Best effort on an error path that already reports the first failure.
        }
        if (fd >= 0)
        {
            Libc.close(fd);
        }
        if (directFd >= 0)
        {
            Libc.close(directFd);
        }
        if (fileKey != null)
        {
            OPEN_FILES.remove(fileKey);
        }
    }

    public Path path()
    {
        return path;
    }

    public long size()
    {
        return size;
    }

    public int logicalBlockSize()
    {
        return logicalBlockSize;
    }

    public boolean isBlockDevice()
    {
        return blockDevice;
    }

    public boolean isWritable()
    {
        return writable;
    }

    /**
     * @return an O_DIRECT descriptor of the volume for {@link LinuxAio}, open read-write when the volume is
     *     writable. Valid until {@link #close()}: the caller must have nothing in flight on it by then, as the
     *     number may be reused for another file afterwards.
     */
    public int directFd()
    {
        return directFd;
    }

    /**
     * Why this volume cannot take a source of {@code needed} bytes, for a VOLUME_TOO_SMALL refusal: both sizes
     * readable and exact (a volume must be grown to the byte), and how to grow this kind of volume.
     *
     * @param what   how the message names it, e.g. "destination /srv/d.img on site-b".
     * @param needed the source's size in bytes, more than {@link #size()}.
     * @return the message.
     */
    public String tooSmallFor(final String what, final long needed)
    {
        return what + " is " + io.blockmover.cli.Format.bytes(size) + " (" + size + " bytes), the source is " +
            io.blockmover.cli.Format.bytes(needed) + " (" + needed + " bytes): " + (blockDevice ?
            "grow the device to at least that (lvextend -L " + needed + "b " + path + " for an LV)" :
            "grow the file with 'truncate -s " + needed + " " + path + "'") + ", or choose a larger one";
    }

    /**
     * Reads {@code length} bytes at {@code position} into {@code dst} from its position 0. The buffer must be
     * aligned to {@link Slab#ALIGNMENT}; position must be too; length may have a sub-4096 tail only when it ends
     * the volume. Allocates nothing.
     *
     * @param position byte offset in the volume.
     * @param dst      aligned direct buffer with room for length bytes.
     * @param length   bytes to read.
     * @throws IOException on an I/O error or a short read.
     */
    public void read(final long position, final ByteBuffer dst, final int length) throws IOException
    {
        final int body = length & ~(Slab.ALIGNMENT - 1);
        dst.clear();
        if (body > 0)
        {
            dst.limit(body);
            transfer(direct, dst, position, false);
        }
        if (body < length)
        {
            dst.limit(length).position(body);
            transfer(buffered, dst, position + body, false);
        }
        dst.flip();
    }

    /**
     * Writes {@code length} bytes from {@code src} (from its position 0) at {@code position}; the same alignment
     * rules as {@link #read(long, ByteBuffer, int)}. Not durable until {@link #force()}. Allocates nothing.
     *
     * @param position byte offset in the volume.
     * @param src      aligned direct buffer holding the bytes from position 0.
     * @param length   bytes to write.
     * @throws IOException on an I/O error.
     */
    public void write(final long position, final ByteBuffer src, final int length) throws IOException
    {
        final int body = length & ~(Slab.ALIGNMENT - 1);
        if (body > 0)
        {
            src.limit(body).position(0);
            transfer(direct, src, position, true);
        }
        if (body < length)
        {
            src.limit(length).position(body);
            transfer(buffered, src, position + body, true);
        }
    }

    /**
     * Makes a range read as zeros by deallocating it, where the volume can: a hole in a sparse file, a WRITE ZEROES
     * that a block device serves without writing them (NVMe, SCSI with UNMAP, a loop device), or on a block device
     * that takes discards only (device-mapper's thin target, LVM thin's) a discard read back as zeros. For a
     * destination whose
     * source holds zeros there (an empty region's initial sync, a client's WRITE_ZEROES): written as data, they
     * filled a thin or sparse destination to its whole size. Never on a file with every block allocated (see
     * {@link #canDeallocate}). Durable, like a write, only after {@link #force()}. Where the
     * volume cannot (EOPNOTSUPP, an unaligned range on a block device, any other refusal), it is not tried again
     * and the caller writes the zeros, which surfaces a real I/O error as such.
     *
     * @param position byte offset, a multiple of {@link Slab#ALIGNMENT}.
     * @param length   bytes, a multiple of {@link Slab#ALIGNMENT}.
     * @return whether the range reads as zeros now; false: write them.
     */
    public boolean deallocate(final long position, final long length)
    {
        if (!canDeallocate())
        {
            return false;
        }
        if (!discardsInstead)
        {
            try
            {
                Libc.fallocate(directFd, Libc.FALLOC_FL_PUNCH_HOLE | Libc.FALLOC_FL_KEEP_SIZE, position, length);
                return true;
            }
            catch (final LastErrorException ex)
            {
                if (!blockDevice || ex.getErrorCode() != Libc.EOPNOTSUPP)
                {
                    canDeallocate = false;
                    return false;
                }
                // No WRITE ZEROES on this device. Device-mapper's thin target (LVM thin) is one: it takes discards
                // only, and the zeros written instead filled the pool wherever the source held nothing.
                discardsInstead = true;
            }
        }
        return discardReadsAsZeros(position, length);
    }

    /**
     * @return whether {@link #deallocate} can give this range back: a volume that deallocates, and a range of whole
     *     4 KiB blocks of a file, or of whole units of a block device's discard granularity (a thin volume's chunk).
     */
    public boolean deallocates(final long position, final long length)
    {
        final long unit = deallocationUnit();
        return canDeallocate() && length > 0 && position % unit == 0 && length % unit == 0;
    }

    /**
     * @return the least this volume gives back ({@link #deallocates}): a 4 KiB block of a file, a unit of a block
     *     device's discard granularity (a thin pool's chunk: 64 KiB or a multiple, not always a power of two),
     *     rounded up to a multiple of 4 KiB, so that the data around it can be written with O_DIRECT.
     */
    public long deallocationUnit()
    {
        return blockDevice ? (discardGranularity + Slab.ALIGNMENT - 1) / Slab.ALIGNMENT * Slab.ALIGNMENT :
            Slab.ALIGNMENT;
    }

    /**
     * Gives a range back for a client's TRIM, where the volume can: a hole in a file that deallocates
     * ({@link #canDeallocate}), a discard on a block device. What the range reads afterwards is not promised, as
     * TRIM promises nothing; a refusal is ignored, and a device that takes no discards is not asked again.
     *
     * @param position byte offset, a multiple of {@link Slab#ALIGNMENT}.
     * @param length   bytes, a multiple of {@link Slab#ALIGNMENT}.
     */
    public void discard(final long position, final long length)
    {
        if (!writable || !(blockDevice ? discards : canDeallocate))
        {
            return;
        }
        try
        {
            if (blockDevice)
            {
                Libc.discard(directFd, position, length);
            }
            else
            {
                Libc.fallocate(directFd, Libc.FALLOC_FL_PUNCH_HOLE | Libc.FALLOC_FL_KEEP_SIZE, position, length);
            }
        }
        catch (final LastErrorException ex)
        {
            if (ex.getErrorCode() == Libc.EOPNOTSUPP && blockDevice)
            {
                discards = false;
            }
        }
    }

    /**
     * Discards a range and reads it back: a discard promises nothing about what reads return, and a thin volume
     * unmaps only the blocks it covers whole (its chunk, 64 KiB and up), so the zeros are taken for written only
     * where they are read. A range that is not made of whole units of the device's discard granularity (a client's
     * WRITE_ZEROES or TRIM of a few KiB) is not discarded at all: it could not read back as zeros, and one failed
     * read-back ends every discard on this volume. It is only read: where it reads as zeros already (unmapped
     * chunks, trimmed again by the next fstrim) nothing is written, so that a trim never maps a thin volume's
     * chunks; otherwise the caller writes the zeros. Where an aligned discard does not read as zeros, the caller
     * writes them, and no discard is tried again: the device would fail every one the same way. Synchronized: NBD
     * workers share the buffer.
     */
    private synchronized boolean discardReadsAsZeros(final long position, final long length)
    {
        try
        {
            if (position % discardGranularity != 0 || length % discardGranularity != 0)
            {
                return readsAsZeros(position, length);
            }
            Libc.discard(directFd, position, length);
            if (!readsAsZeros(position, length))
            {
                canDeallocate = false;
                return false;
            }
            return true;
        }
        catch (final LastErrorException | IOException ex)
        {
            canDeallocate = false;
            return false;
        }
    }

    private boolean readsAsZeros(final long position, final long length) throws IOException
    {
        if (checkBuffer == null)
        {
            checkBuffer = org.agrona.BufferUtil.allocateDirectAligned(CHECK_LENGTH, Slab.ALIGNMENT);
            zeroCheck = new ZeroCheck();
        }
        for (long at = position; at < position + length; at += CHECK_LENGTH)
        {
            final int n = (int)Math.min(CHECK_LENGTH, position + length - at);
            read(at, checkBuffer, n);
            if (!zeroCheck.isAllZeros(checkBuffer))
            {
                return false;
            }
        }
        return true;
    }

    /**
     * @param device a block device.
     * @return its discard granularity in bytes, from {@code /sys/dev/block/MAJOR:MINOR/queue}; the logical block's
     *     alignment where sysfs does not say.
     */
    static long discardGranularity(final Path device)
    {
        try
        {
            final long rdev = ((Number)Files.getAttribute(device, "unix:rdev")).longValue();
            // glibc's gnu_dev_major and gnu_dev_minor.
            final long major = (rdev >>> 8) & 0xfff | (rdev >>> 32) & ~0xfffL;
            final long minor = rdev & 0xff | (rdev >>> 12) & ~0xffL;
            final long granularity = Long.parseLong(Files.readString(Path.of("/sys/dev/block/" + major + ":" +
                minor + "/queue/discard_granularity")).trim());
            return granularity > 0 ? granularity : Slab.ALIGNMENT;
        }
        catch (final IOException | RuntimeException ex)
        {
            return Slab.ALIGNMENT;
        }
    }

    /**
     * Whether a range is a hole of a file: it reads as zeros without any read, so that a source's empty regions
     * (most of a thin volume image's) are not read at all. One lseek SEEK_DATA, which counts a range whose data is
     * still in the page cache as data. Always false on a block device (it has no holes to ask for), and once the
     * file system refused the question (it is not asked again).
     *
     * @param position byte offset.
     * @param length   bytes.
     * @return whether no byte of the range holds data.
     */
    public boolean isHole(final long position, final long length)
    {
        if (!seeksHoles)
        {
            return false;
        }
        try
        {
            return Libc.lseek(directFd, position, Libc.SEEK_DATA) >= position + length;
        }
        catch (final LastErrorException ex)
        {
            if (ex.getErrorCode() != Libc.ENXIO)
            {
                seeksHoles = false;
                return false;
            }
        }
        // No data from position to the end of the file: a hole, unless the file ends before the range does (it was
        // truncated under us), where a read fails, as it must.
        return position + length <= fileLength();
    }

    /**
     * Where the run of holes or of data that {@code position} starts ends, for a client that asks how a volume is
     * allocated (NBD_CMD_BLOCK_STATUS): as {@link #isHole}, one lseek (SEEK_DATA from a hole, SEEK_HOLE from data),
     * which counts data still in the page cache as data. A block device, a file system that cannot say, and a
     * range past the file's end are data.
     *
     * @param position byte offset within the volume.
     * @param end      where to stop looking.
     * @return the end of the run, at most {@code end}; negated for a run of holes (reads as zeros, nothing
     *     allocated), so -{@code end} where the rest of the range is one.
     */
    public long allocationRun(final long position, final long end)
    {
        if (!seeksHoles)
        {
            return end;
        }
        try
        {
            final long data = Libc.lseek(directFd, position, Libc.SEEK_DATA);
            if (data > position)
            {
                return -Math.min(data, end);
            }
            return Math.min(Libc.lseek(directFd, position, Libc.SEEK_HOLE), end);
        }
        catch (final LastErrorException ex)
        {
            // ENXIO: no data from here to the end of the file; past its end (truncated under us) it is data, so
            // that a read fails as it must.
            return ex.getErrorCode() == Libc.ENXIO && end <= fileLength() ? -end : end;
        }
    }

    /**
     * @return the file's current length; -1 where it cannot be told (so that no range counts as inside it).
     */
    private long fileLength()
    {
        try
        {
            return direct.size();
        }
        catch (final IOException ex)
        {
            return -1;
        }
    }

    /**
     * @return whether {@link #deallocate} is tried here: a block device, or a file sparse at open, until it failed.
     */
    public boolean canDeallocate()
    {
        return canDeallocate;
    }

    /**
     * @return whether a file has a hole; false where that cannot be told (no FIEMAP, as on tmpfs): as before,
     *     zeros are written there.
     */
    private static boolean isSparse(final int fd, final long size)
    {
        try
        {
            return Libc.hasHole(fd, size);
        }
        catch (final LastErrorException ex)
        {
            return false;
        }
    }

    /**
     * @param ex an error from a volume's I/O.
     * @return whether it says the volume's file system (or thin pool, or quota) is out of space: a condition the
     * operator can cure, unlike a failing disk.
     */
    public static boolean isOutOfSpace(final Throwable ex)
    {
        for (Throwable t = ex; t != null; t = t.getCause())
        {
            final String message = t.getMessage();
            if (message != null && (message.contains("No space left on device") ||
                message.contains("Disk quota exceeded")))
            {
                return true;
            }
        }
        return false;
    }

    /**
     * Writes like {@link #write(long, ByteBuffer, int)} but through the page cache: returns once the bytes are
     * copied, and the kernel writes them back many at a time (or {@link #force()} does). For what O_DIRECT cannot
     * take: a destination's records not aligned to 4 KiB, and every record where Linux AIO is not to be had (the
     * aligned ones go in batches, ApplyBatch; one synchronous O_DIRECT write each kept the device at queue depth 1,
     * and the applier could not keep up with a source at queue depth 16). O_DIRECT reads and writes of the same
     * range stay coherent: the kernel writes dirty pages back first.
     *
     * No alignment is needed, so the bytes may come straight from wherever they are, a record in a mapped log.
     *
     * @param position byte offset in the volume.
     * @param src      buffer holding the bytes between its position and limit; its position moves to its limit.
     * @throws IOException on an I/O error.
     */
    public void writeBuffered(final long position, final ByteBuffer src) throws IOException
    {
        bufferedSinceForce = true;
        transfer(buffered, src, position, true);
    }

    /**
     * Reads {@code dst.remaining()} bytes at {@code position} into {@code dst} from its current position: for a
     * reader that fills one buffer from several sources without slicing it. Buffer address at its position,
     * {@code position} and the length must all be multiples of {@link Slab#ALIGNMENT}. Allocates nothing.
     *
     * @param position byte offset in the volume.
     * @param dst      direct buffer, position and limit set to the bytes wanted.
     * @throws IOException on an I/O error or a short read.
     */
    public void readRange(final long position, final ByteBuffer dst) throws IOException
    {
        transfer(direct, dst, position, false);
    }

    /**
     * Writes {@code src.remaining()} bytes from its current position at {@code position}, with O_DIRECT: for a
     * writer that writes one buffer in pieces without slicing it. The same alignment as {@link #readRange}.
     * Allocates nothing.
     *
     * @param position byte offset in the volume.
     * @param src      direct buffer, position and limit set to the bytes to write.
     * @throws IOException on an I/O error.
     */
    public void writeRange(final long position, final ByteBuffer src) throws IOException
    {
        transfer(direct, src, position, true);
    }

    private static void transfer(final FileChannel channel, final ByteBuffer buffer, final long position,
        final boolean write) throws IOException
    {
        long at = position;
        while (buffer.hasRemaining())
        {
            final int n = write ? channel.write(buffer, at) : channel.read(buffer, at);
            if (n < 0 || (n == 0 && !write))
            {
                throw new EOFException("unexpected end of volume at byte " + at);
            }
            at += n;
        }
    }

    /**
     * Makes every write so far durable (fdatasync), then drops from the page cache what {@link #writeBuffered}
     * left there. Kept, those pages only cost: nothing here reads through the cache, and a cached range that a
     * large write brought in as one large folio (ext4 on Linux 6.16 and later) makes every later small write to
     * it walk the whole folio, when written and again when written back. On the destination's applier that was
     * most of its CPU time at 4 KiB random writes. Only clean pages are dropped: nothing is lost.
     *
     * @throws IOException on an I/O error.
     */
    public void force() throws IOException
    {
        // Cleared before the force: a buffered write that lands meanwhile sets it again for the next one.
        final boolean dropPages = bufferedSinceForce;
        bufferedSinceForce = false;
        direct.force(false);
        if (dropPages && fd >= 0)
        {
            // Advice: a failure leaves the pages cached, which costs CPU later but nothing else.
            Libc.posix_fadvise(fd, 0, 0, Libc.POSIX_FADV_DONTNEED);
        }
    }

    @Override
    public void close()
    {
        try
        {
            if (writable)
            {
                force();
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "flush of " + path + " failed on close: " + ex, ex);
        }
        finally
        {
            closeQuietly(direct, buffered, lock, fd, directFd, fileKey);
        }
    }

    @Override
    public String toString()
    {
        return path + " (" + size + " bytes, " + (blockDevice ? "block device" : "file") + ")";
    }
}
