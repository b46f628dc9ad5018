package io.blockmover.io;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class BlockDevicesTest
{
    @TempDir
    Path dir;

    @Test
    void shouldSplitDeviceNumbersAsTheKernelDoes()
    {
        final long dev = (259L << 8) | 3 | ((0x12345L & ~0xffL) << 12); // major 259, minor 0x12303
        assertEquals(259, BlockDevices.major(dev));
        assertEquals(0x12303, BlockDevices.minor(dev));
    }

    @Test
    void shouldTakeAPartitionForTheDiskItIsOn() throws Exception
    {
        final Path sys = sysfs();
        final Path vda = sys.resolve("devices/pci/virtio1/block/vda");
        assertEquals(vda.toRealPath(), BlockDevices.plainDisk("254:0", sys));
        assertEquals(vda.toRealPath(), BlockDevices.plainDisk("254:1", sys));
        assertEquals(sys.resolve("devices/pci/ata1/block/sda").toRealPath(), BlockDevices.plainDisk("8:0", sys));
    }

    @Test
    void shouldNotAnswerForStackedOrLoopDevicesOrNoDeviceAtAll() throws Exception
    {
        final Path sys = sysfs();
        assertNull(BlockDevices.plainDisk("253:0", sys), "device mapper: its table may change");
        assertNull(BlockDevices.plainDisk("7:0", sys), "a loop device writes to a file elsewhere");
        assertNull(BlockDevices.plainDisk("0:42", sys), "tmpfs, btrfs, NFS: no block device");
    }

    @Test
    void shouldSayAFlushCoversAFileOnlyOnThePlainDiskItIsOn() throws Exception
    {
        final Path volume = Files.createFile(dir.resolve("volume.img"));
        final Path log = Files.createFile(dir.resolve("log"));
        final String device = BlockDevices.majorMinor(volume);

        final Path sys = sysfs();
        relink(sys, device, sys.resolve("devices/pci/virtio1/block/vda"));
        assertTrue(BlockDevices.flushCovers(volume, log, sys));

        relink(sys, device, sys.resolve("devices/virtual/block/dm-0"));
        assertFalse(BlockDevices.flushCovers(volume, log, sys));

        Files.delete(sys.resolve("dev/block").resolve(device));
        assertFalse(BlockDevices.flushCovers(volume, log, sys), "sysfs does not say");
        assertFalse(BlockDevices.flushCovers(volume, dir.resolve("missing"), sys));
    }

    private static void relink(final Path sys, final String device, final Path target) throws Exception
    {
        final Path link = sys.resolve("dev/block").resolve(device);
        Files.deleteIfExists(link);
        Files.createSymbolicLink(link, target);
    }

    /**
     * A sysfs tree as the kernel lays it out: vda with partition vda1, sda, dm-0 over vda1, loop0.
     */
    private Path sysfs() throws Exception
    {
        final Path sys = dir.resolve("sys");
        final Path vda = Files.createDirectories(sys.resolve("devices/pci/virtio1/block/vda"));
        Files.createDirectories(vda.resolve("slaves"));
        final Path vda1 = Files.createDirectories(vda.resolve("vda1"));
        Files.writeString(vda1.resolve("partition"), "1\n");
        final Path sda = Files.createDirectories(sys.resolve("devices/pci/ata1/block/sda"));
        final Path dm = Files.createDirectories(sys.resolve("devices/virtual/block/dm-0/slaves"));
        Files.createSymbolicLink(dm.resolve("vda1"), vda1);
        final Path loop = Files.createDirectories(sys.resolve("devices/virtual/block/loop0/slaves"));
        final Path links = Files.createDirectories(sys.resolve("dev/block"));
        Files.createSymbolicLink(links.resolve("254:0"), vda);
        Files.createSymbolicLink(links.resolve("254:1"), vda1);
        Files.createSymbolicLink(links.resolve("8:0"), sda);
        Files.createSymbolicLink(links.resolve("253:0"), dm.getParent());
        Files.createSymbolicLink(links.resolve("7:0"), loop.getParent());
        return sys;
    }
}
