package io.blockmover.io;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Which block device a path lives on, and which disk a device flush reaches, read from sysfs.
 */
public final class BlockDevices
{
    private static final int S_IFMT = 0170000;
    private static final int S_IFBLK = 0060000;
    private static final Path SYS = Path.of("/sys");

    private BlockDevices()
    {
    }

    /**
     * @param path a block device, or a file on a file system.
     * @return "MAJOR:MINOR" of the device itself, or of the device its file system is on (major 0 for one on no
     *     block device: tmpfs, btrfs, NFS).
     * @throws IOException when the path cannot be read.
     */
    public static String majorMinor(final Path path) throws IOException
    {
        final long dev = ((Number)Files.getAttribute(path, isBlockDevice(path) ? "unix:rdev" : "unix:dev"))
            .longValue();
        return major(dev) + ":" + minor(dev);
    }

    /**
     * @param path any path.
     * @return whether it is a block device.
     * @throws IOException when the path cannot be read.
     */
    public static boolean isBlockDevice(final Path path) throws IOException
    {
        return (((Number)Files.getAttribute(path, "unix:mode")).intValue() & S_IFMT) == S_IFBLK;
    }

    /**
     * Whether a device flush that a force of {@code flushed} sends (an fdatasync of that block device, or of that
     * file, whose file system flushes the device it is on) also makes durable every write that has completed to
     * {@code written}'s file system: when both are on one plain disk, whole or a partition of it, since a flush
     * empties that disk's whole cache. Not across disks, and not for stacked devices (device mapper, md, loop):
     * a device mapper table can change while the daemon runs (pvmove, lvextend onto another disk), and the answer
     * with it. False whenever sysfs does not say.
     *
     * @param flushed a block device or a file.
     * @param written a file.
     * @return whether a flush through the one reaches every disk the other's writes go to.
     */
    public static boolean flushCovers(final Path flushed, final Path written)
    {
        return flushCovers(flushed, written, SYS);
    }

    static boolean flushCovers(final Path flushed, final Path written, final Path sys)
    {
        try
        {
            final Path disk = plainDisk(majorMinor(flushed), sys);
            return disk != null && disk.equals(plainDisk(majorMinor(written), sys));
        }
        catch (final IOException | RuntimeException ex)
        {
            return false;
        }
    }

    /**
     * @param majorMinor a block device's "MAJOR:MINOR".
     * @param sys        where sysfs is mounted.
     * @return the sysfs directory of the disk the device is, or is a partition of; null when it is no block
     *     device, or a stacked one (it has slaves), or a loop device.
     */
    static Path plainDisk(final String majorMinor, final Path sys) throws IOException
    {
        final Path link = sys.resolve("dev/block").resolve(majorMinor);
        if (!Files.exists(link))
        {
            return null;
        }
        Path device = link.toRealPath();
        if (Files.exists(device.resolve("partition")))
        {
            device = device.getParent();
        }
        if (device.getFileName().toString().startsWith("loop") || hasSlaves(device))
        {
            return null;
        }
        return device;
    }

    private static boolean hasSlaves(final Path disk) throws IOException
    {
        final Path slaves = disk.resolve("slaves");
        if (!Files.isDirectory(slaves))
        {
            return false;
        }
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(slaves))
        {
            return entries.iterator().hasNext();
        }
    }

    /**
     * @param dev a dev_t as glibc encodes it.
     * @return its major number.
     */
    public static long major(final long dev)
    {
        return ((dev >>> 8) & 0xfff) | ((dev >>> 32) & ~0xfffL);
    }

    /**
     * @param dev a dev_t as glibc encodes it.
     * @return its minor number.
     */
    public static long minor(final long dev)
    {
        return (dev & 0xff) | ((dev >>> 12) & ~0xffL);
    }
}
