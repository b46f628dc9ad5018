package io.blockmover.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class VolumeTest
{
    private static final int BLOCK = Slab.ALIGNMENT;
    /** Three 4 KiB blocks and a 512-byte tail: the tail must go through the buffered channel. */
    private static final int ODD_SIZE = 3 * BLOCK + 512;

    @TempDir
    Path dir;

    private static byte[] random(final int length, final long seed)
    {
        final byte[] bytes = new byte[length];
        new Random(seed).nextBytes(bytes);
        return bytes;
    }

    private static ByteBuffer aligned(final int capacity)
    {
        return BufferUtil.allocateDirectAligned(capacity, BLOCK);
    }

    private static byte[] bytesOf(final ByteBuffer buffer)
    {
        final byte[] bytes = new byte[buffer.remaining()];
        buffer.duplicate().get(bytes);
        return bytes;
    }

    private Path file(final String name, final byte[] content) throws IOException
    {
        final Path path = dir.resolve(name);
        Files.write(path, content);
        return path;
    }

    @Test
    void shouldReadAlignedRangesOfRegularFile() throws IOException
    {
        final byte[] content = random(8 * BLOCK, 1);
        final Path path = file("source.img", content);
        try (Volume volume = Volume.open(path, false))
        {
            assertEquals(8 * BLOCK, volume.size());
            assertFalse(volume.isBlockDevice());
            assertFalse(volume.isWritable());
            assertEquals(512, volume.logicalBlockSize());
            final ByteBuffer dst = aligned(4 * BLOCK);

            volume.read(2L * BLOCK, dst, 3 * BLOCK);

            assertEquals(0, dst.position());
            assertEquals(3 * BLOCK, dst.limit());
            assertArrayEquals(Arrays.copyOfRange(content, 2 * BLOCK, 5 * BLOCK), bytesOf(dst));
        }
    }

    @Test
    void shouldWriteAlignedRangeThenReadItBack() throws IOException
    {
        final Path path = file("target.img", new byte[8 * BLOCK]);
        final byte[] data = random(2 * BLOCK, 2);
        try (Volume volume = Volume.open(path, true))
        {
            assertTrue(volume.isWritable());
            final ByteBuffer src = aligned(2 * BLOCK);
            src.put(data).clear();

            volume.write(4L * BLOCK, src, 2 * BLOCK);
            volume.force();

            final ByteBuffer dst = aligned(2 * BLOCK);
            volume.read(4L * BLOCK, dst, 2 * BLOCK);
            assertArrayEquals(data, bytesOf(dst));
        }
        final byte[] onDisk = Files.readAllBytes(path);
        assertEquals(8 * BLOCK, onDisk.length);
        assertArrayEquals(new byte[4 * BLOCK], Arrays.copyOfRange(onDisk, 0, 4 * BLOCK));
        assertArrayEquals(data, Arrays.copyOfRange(onDisk, 4 * BLOCK, 6 * BLOCK));
        assertArrayEquals(new byte[2 * BLOCK], Arrays.copyOfRange(onDisk, 6 * BLOCK, 8 * BLOCK));
    }

    @Test
    void shouldShowBufferedWritesToDirectReadsBeforeAnyForce() throws IOException
    {
        // The destination's applier writes through the page cache; verify and test-failover views read O_DIRECT.
        final Path path = file("applied.img", random(8 * BLOCK, 3));
        final byte[] data = random(3 * BLOCK, 4);
        try (Volume volume = Volume.open(path, true))
        {
            final ByteBuffer src = aligned(3 * BLOCK);
            src.put(data).clear();
            volume.writeBuffered(BLOCK, src);

            final ByteBuffer dst = aligned(4 * BLOCK);
            volume.read(0, dst, 4 * BLOCK);
            assertArrayEquals(data, Arrays.copyOfRange(bytesOf(dst), BLOCK, 4 * BLOCK));
            volume.force();
        }
        assertArrayEquals(data, Arrays.copyOfRange(Files.readAllBytes(path), BLOCK, 4 * BLOCK));
    }

    @Test
    void shouldDropBufferedWritesFromThePageCacheOnceForced() throws IOException
    {
        // The applier's writes must not stay cached: large cached folios make every later small write costly.
        final Path path = file("cached.img", random(64 * BLOCK, 5));
        final byte[] data = random(16 * BLOCK, 6);
        try (Volume volume = Volume.open(path, true);
            FileChannel channel = FileChannel.open(path, StandardOpenOption.READ))
        {
            // Never touched, only asked: isLoaded() is mincore(2) on the file's pages, which reports the page
            // cache without faulting anything in (a page mapped here could not be dropped).
            final MappedByteBuffer residency = channel.map(FileChannel.MapMode.READ_ONLY, 8L * BLOCK, 16 * BLOCK);
            final ByteBuffer src = aligned(16 * BLOCK);
            src.put(data).clear();
            volume.writeBuffered(8L * BLOCK, src);
            assertTrue(residency.isLoaded(), "just written through the page cache, so cached");

            volume.force();
            assertFalse(residency.isLoaded(), "still cached after the force");

            final ByteBuffer dst = aligned(16 * BLOCK);
            volume.read(8L * BLOCK, dst, 16 * BLOCK);
            assertArrayEquals(data, bytesOf(dst), "what was dropped was on disk");
        }
    }

    @Test
    void shouldReadChunkEndingInSubBlockTail() throws IOException
    {
        final byte[] content = random(ODD_SIZE, 3);
        final Path path = file("odd.img", content);
        try (Volume volume = Volume.open(path, false))
        {
            assertEquals(ODD_SIZE, volume.size());
            final ByteBuffer dst = aligned(2 * BLOCK);

            volume.read(2L * BLOCK, dst, BLOCK + 512);

            assertEquals(BLOCK + 512, dst.remaining());
            assertArrayEquals(Arrays.copyOfRange(content, 2 * BLOCK, ODD_SIZE), bytesOf(dst));

            final ByteBuffer whole = aligned(4 * BLOCK);
            volume.read(0, whole, ODD_SIZE);
            assertArrayEquals(content, bytesOf(whole));
        }
    }

    @Test
    void shouldWriteChunkEndingInSubBlockTailWithoutExtendingFile() throws IOException
    {
        final Path path = file("odd-target.img", new byte[ODD_SIZE]);
        final byte[] data = random(BLOCK + 512, 4);
        try (Volume volume = Volume.open(path, true))
        {
            final ByteBuffer src = aligned(2 * BLOCK);
            src.put(data).clear();

            volume.write(2L * BLOCK, src, BLOCK + 512);
            volume.force();

            final ByteBuffer dst = aligned(2 * BLOCK);
            volume.read(2L * BLOCK, dst, BLOCK + 512);
            assertArrayEquals(data, bytesOf(dst));
        }
        assertEquals(ODD_SIZE, Files.size(path), "a tail write must not extend the file");
        final byte[] onDisk = Files.readAllBytes(path);
        assertArrayEquals(new byte[2 * BLOCK], Arrays.copyOfRange(onDisk, 0, 2 * BLOCK));
        assertArrayEquals(data, Arrays.copyOfRange(onDisk, 2 * BLOCK, ODD_SIZE));
    }

    @Test
    void shouldReportMissingVolumeAsNotFound()
    {
        final Path missing = dir.resolve("nope.img");

        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Volume.open(missing, true));

        assertEquals(ErrorCode.NOT_FOUND, ex.code());
        assertTrue(ex.getMessage().contains(missing.toString()), ex.getMessage());
        assertTrue(ex.getMessage().contains("truncate -s"), "names the fix: " + ex.getMessage());
        assertEquals(ErrorCode.NOT_FOUND,
            assertThrows(BlockmoverException.class, () -> Volume.open(missing, false)).code());
    }

    @Test
    void shouldRejectEmptyVolume() throws IOException
    {
        final Path empty = file("empty.img", new byte[0]);

        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Volume.open(empty, false));

        assertEquals(ErrorCode.MISALIGNED_SIZE, ex.code());
        assertTrue(ex.getMessage().contains("empty"), ex.getMessage());
    }

    @Test
    void shouldRejectSizeNotMultipleOf512() throws IOException
    {
        final Path odd = file("odd-size.img", new byte[BLOCK + 100]);

        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Volume.open(odd, true));

        assertEquals(ErrorCode.MISALIGNED_SIZE, ex.code());
        assertTrue(ex.getMessage().contains(String.valueOf(BLOCK + 100)), ex.getMessage());
        assertEquals(BLOCK + 100, Files.size(odd), "a refused open changes nothing");
    }

    @Test
    void shouldRejectDirectoryAsNotAVolume()
    {
        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Volume.open(dir, false));

        assertEquals(ErrorCode.NOT_A_VOLUME, ex.code());
    }

    @Test
    void shouldRefuseSecondWritableOpenOfSameFile() throws IOException
    {
        final Path path = file("busy.img", new byte[2 * BLOCK]);
        try (Volume first = Volume.open(path, true))
        {
            final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Volume.open(path, true));

            assertEquals(ErrorCode.VOLUME_IN_USE, ex.code());
            assertEquals(ErrorCode.VOLUME_IN_USE,
                assertThrows(BlockmoverException.class, () -> Volume.open(path, false)).code(),
                "a writer excludes readers too");
            assertTrue(first.isWritable());
        }
        try (Volume afterClose = Volume.open(path, true))
        {
            assertEquals(2 * BLOCK, afterClose.size(), "close releases the lock");
        }
    }

    /**
     * A refused second open must not cost the first one its lock. POSIX record locks belong to the process and
     * are all dropped when any descriptor of the file is closed, so closing the refused open's channel would let
     * another process take the file while the first volume still writes it.
     */
    @Test
    void shouldKeepLockAgainstOtherProcessesAfterRefusingSecondOpen() throws Exception
    {
        final Path path = file("shared.img", new byte[2 * BLOCK]);
        final Path probe = file("LockProbe.java", (
            "import java.nio.channels.FileChannel;\n" +
            "import java.nio.file.Path;\n" +
            "import java.nio.file.StandardOpenOption;\n" +
            "public class LockProbe {\n" +
            "    public static void main(String[] args) throws Exception {\n" +
            "        try (FileChannel c = FileChannel.open(Path.of(args[0]), StandardOpenOption.READ,\n" +
            "            StandardOpenOption.WRITE)) {\n" +
            "            System.exit(c.tryLock() == null ? 3 : 0);\n" +
            "        }\n" +
            "    }\n" +
            "}\n").getBytes(StandardCharsets.UTF_8));
        try (Volume first = Volume.open(path, true))
        {
            assertEquals(3, lockProbe(probe, path), "another process must not get the lock of an open volume");

            assertThrows(BlockmoverException.class, () -> Volume.open(path, true));

            assertEquals(3, lockProbe(probe, path),
                "after a refused second open, another process could lock (and write) a volume still in use");
            assertTrue(first.isWritable());
        }
    }

    private static int lockProbe(final Path probe, final Path target) throws Exception
    {
        final String java = ProcessHandle.current().info().command().orElse("java");
        final Process process = new ProcessBuilder(java, probe.toString(), target.toString())
            .redirectErrorStream(true).start();
        assertTrue(process.waitFor(60, TimeUnit.SECONDS), "lock probe did not finish");
        final String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        final int status = process.exitValue();
        assertTrue(status == 0 || status == 3, "lock probe failed: " + output);
        return status;
    }

    @Test
    void shouldForceWritesOfWritableVolumeAndCloseReadOnlyOneWithoutForce() throws IOException
    {
        final Path path = file("force.img", new byte[BLOCK]);
        final byte[] data = random(BLOCK, 5);
        final Volume volume = Volume.open(path, true);
        final ByteBuffer src = aligned(BLOCK);
        src.put(data).clear();
        volume.write(0, src, BLOCK);

        volume.force();
        volume.force();
        volume.close();

        assertArrayEquals(data, Files.readAllBytes(path));
        final Volume reader = Volume.open(path, false);
        reader.close();
    }

    /**
     * A source's empty regions are not read where its file has holes there: isHole asks the file system (lseek
     * SEEK_DATA), and a range with any data in it, written directly or through the page cache, is no hole.
     */
    @Test
    void shouldTellAHoleOfAFileFromARangeHoldingData() throws IOException
    {
        final int mib = 1 << 20;
        final Path path = dir.resolve("sparse.img");
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE))
        {
            channel.write(ByteBuffer.wrap(random(BLOCK, 9)), 2L * mib);
            channel.truncate(8L * mib);
            channel.write(ByteBuffer.allocate(1), 8L * mib - 1); // Set the size; one byte of data at the end.
        }
        try (Volume volume = Volume.open(path, true))
        {
            assertTrue(volume.isHole(0, mib));
            assertTrue(volume.isHole(mib, mib));
            assertFalse(volume.isHole(2L * mib, mib), "4 KiB of data at its start");
            assertFalse(volume.isHole(mib, 2L * mib), "reaches the data");
            assertTrue(volume.isHole(3L * mib, mib));
            assertFalse(volume.isHole(7L * mib, mib), "the last byte");

            volume.writeBuffered(5L * mib, ByteBuffer.wrap(random(512, 10)));
            assertFalse(volume.isHole(5L * mib, mib), "data still in the page cache");

            // Truncated under the volume: past the file's end is no hole (a read there fails, as it must).
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.WRITE))
            {
                channel.truncate(6L * mib + BLOCK);
            }
            assertTrue(volume.isHole(6L * mib, BLOCK));
            assertFalse(volume.isHole(6L * mib, mib), "ends past the file's end");
            assertFalse(volume.isHole(7L * mib, mib), "past the file's end");
        }
        try (Volume whole = Volume.open(file("whole.img", random(4 * BLOCK, 11)), false))
        {
            assertFalse(whole.isHole(0, 4 * BLOCK));
        }
    }

    /**
     * What BLOCK_STATUS tells NBD clients: the run of holes or data an offset starts, holes negated, up to an end;
     * data in the page cache is data, and past a file's end (truncated under the volume) is data too, so that a
     * client reads there and gets the error.
     */
    @Test
    void shouldTellWhereARunOfHolesOrDataEnds() throws IOException
    {
        final int mib = 1 << 20;
        final Path path = dir.resolve("runs.img");
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE))
        {
            channel.write(ByteBuffer.wrap(random(2 * BLOCK, 12)), 2L * mib);
            channel.truncate(8L * mib);
            channel.write(ByteBuffer.allocate(1), 8L * mib - 1);
        }
        try (Volume volume = Volume.open(path, true))
        {
            assertEquals(-2L * mib, volume.allocationRun(0, 8L * mib), "a hole up to the data");
            assertEquals(-mib, volume.allocationRun(0, mib), "no further than asked");
            assertEquals(2L * mib + 2 * BLOCK, volume.allocationRun(2L * mib, 8L * mib), "the data");
            assertEquals(-(8L * mib - BLOCK), volume.allocationRun(2L * mib + 2 * BLOCK, 8L * mib));
            assertEquals(8L * mib, volume.allocationRun(8L * mib - BLOCK, 8L * mib), "the last byte's block");

            volume.writeBuffered(5L * mib, ByteBuffer.wrap(random(512, 13)));
            assertEquals(5L * mib + BLOCK, volume.allocationRun(5L * mib, 8L * mib), "data in the page cache");

            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.WRITE))
            {
                channel.truncate(6L * mib);
            }
            assertEquals(-6L * mib, volume.allocationRun(5L * mib + BLOCK, 6L * mib));
            assertEquals(8L * mib, volume.allocationRun(6L * mib, 8L * mib), "past the file's end: data");
        }
    }

    @Test
    void shouldOpenLoopDeviceAsExclusiveBlockDevice() throws Exception
    {
        assumeTrue(Libc.getuid() == 0, "needs root to attach a loop device (run the unit tests as root to cover " +
            "the block-device path: BLKGETSIZE64, BLKSSZGET and the O_EXCL claim)");
        final Path losetup = Path.of("/usr/sbin/losetup");
        final Path losetupAlt = Path.of("/sbin/losetup");
        final Path tool = Files.isExecutable(losetup) ? losetup : losetupAlt;
        assumeTrue(Files.isExecutable(tool), "losetup (util-linux) is not installed");
        final int size = 256 * BLOCK;
        final Path backing = file("loop-backing.img", random(size, 6));

        final ProcessResult attach = run(tool.toString(), "--find", "--show", "--sector-size", "4096",
            backing.toString());
        assumeTrue(attach.status == 0, "cannot attach a loop device here (container without loop devices?): " +
            attach.output);
        final Path device = Path.of(attach.output.trim());
        try
        {
            try (Volume volume = Volume.open(device, true))
            {
                assertTrue(volume.isBlockDevice());
                assertEquals(size, volume.size(), "BLKGETSIZE64");
                assertEquals(4096, volume.logicalBlockSize(), "BLKSSZGET");

                final BlockmoverException ex =
                    assertThrows(BlockmoverException.class, () -> Volume.open(device, false));
                assertEquals(ErrorCode.VOLUME_IN_USE, ex.code(), ex.getMessage());
                assertTrue(ex.getMessage().contains("fuser"), "names how to find the holder: " + ex.getMessage());

                final byte[] data = random(2 * BLOCK, 7);
                final ByteBuffer src = aligned(2 * BLOCK);
                src.put(data).clear();
                volume.write(8L * BLOCK, src, 2 * BLOCK);
                volume.force();
                final ByteBuffer dst = aligned(2 * BLOCK);
                volume.read(8L * BLOCK, dst, 2 * BLOCK);
                assertArrayEquals(data, bytesOf(dst));
            }
            try (Volume again = Volume.open(device, false))
            {
                assertEquals(size, again.size(), "the O_EXCL claim ends with close");
            }
        }
        finally
        {
            run(tool.toString(), "--detach", device.toString());
        }
    }

    private record ProcessResult(int status, String output)
    {
    }

    private static ProcessResult run(final String... command) throws Exception
    {
        final Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
        if (!process.waitFor(30, TimeUnit.SECONDS))
        {
            process.destroyForcibly();
            return new ProcessResult(-1, String.join(" ", command) + " timed out");
        }
        return new ProcessResult(process.exitValue(),
            new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
    }
}
