package io.blockmover.replication;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DirtyBitmapTest
{
    private static final long REGIONS = 200;
    private static final int REGION_LENGTH = 1 << 20;

    @TempDir
    Path dir;

    @Test
    void shouldCreateFileWithEveryRegionDirty() throws IOException
    {
        final Path path = dir.resolve("jobs/1.bitmap");
        try (DirtyBitmap bitmap = DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH))
        {
            assertEquals(path, bitmap.path());
            assertEquals(REGION_LENGTH, bitmap.regionLength());
            assertEquals(REGIONS, bitmap.bits().bitCount());
            assertEquals(REGIONS, bitmap.bits().cardinality());
            assertTrue(bitmap.bits().get(0));
            assertTrue(bitmap.bits().get(REGIONS - 1));
        }
        assertEquals(DirtyBitmap.HEADER_LENGTH + ConcurrentBitSet.wordsLength(REGIONS), Files.size(path));
        assertFalse(Files.exists(path.resolveSibling("1.bitmap.tmp")), "no temporary file left behind");
    }

    @Test
    void shouldKeepClearedBitsClearAfterReopen()
    {
        final Path path = dir.resolve("2.bitmap");
        try (DirtyBitmap bitmap = DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH))
        {
            bitmap.bits().clear(0);
            bitmap.bits().clear(63);
            bitmap.bits().clear(64);
            bitmap.bits().clear(REGIONS - 1);
            bitmap.force();
        }

        try (DirtyBitmap reopened = DirtyBitmap.open(path, REGIONS, REGION_LENGTH))
        {
            final ConcurrentBitSet bits = reopened.bits();
            assertEquals(REGIONS - 4, bits.cardinality(), "cardinality is recounted from the file");
            assertFalse(bits.get(0));
            assertFalse(bits.get(63));
            assertFalse(bits.get(64));
            assertFalse(bits.get(REGIONS - 1));
            assertTrue(bits.get(1));
            assertTrue(bits.get(65));
            assertEquals(1, bits.nextSetBit(0));
            bits.set(0);
        }

        try (DirtyBitmap third = DirtyBitmap.open(path, REGIONS, REGION_LENGTH))
        {
            assertTrue(third.bits().get(0), "a bit set again is persisted too");
            assertEquals(REGIONS - 3, third.bits().cardinality());
        }
    }

    @Test
    void shouldReplaceExistingFileOnCreate()
    {
        final Path path = dir.resolve("3.bitmap");
        try (DirtyBitmap bitmap = DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH))
        {
            bitmap.bits().clearAll();
        }
        try (DirtyBitmap fresh = DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH))
        {
            assertEquals(REGIONS, fresh.bits().cardinality());
        }
    }

    @Test
    void shouldRejectGeometryMismatch()
    {
        final Path path = dir.resolve("4.bitmap");
        DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH).close();

        final BlockmoverException length = assertThrows(BlockmoverException.class,
            () -> DirtyBitmap.open(path, REGIONS, REGION_LENGTH * 2));
        final BlockmoverException count = assertThrows(BlockmoverException.class,
            () -> DirtyBitmap.open(path, REGIONS - 1, REGION_LENGTH));

        assertEquals(ErrorCode.IO_ERROR, length.code());
        assertTrue(length.getMessage().contains("geometry"), length.getMessage());
        assertEquals(ErrorCode.IO_ERROR, count.code());
    }

    @Test
    void shouldRejectBadMagic() throws IOException
    {
        final Path path = dir.resolve("5.bitmap");
        DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH).close();
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.WRITE))
        {
            channel.write(ByteBuffer.wrap(new byte[] {'X'}), 0);
        }

        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> DirtyBitmap.open(path, REGIONS, REGION_LENGTH));

        assertEquals(ErrorCode.IO_ERROR, ex.code());
    }

    @Test
    void shouldRejectTruncatedFile() throws IOException
    {
        final Path path = dir.resolve("6.bitmap");
        DirtyBitmap.createAllDirty(path, REGIONS, REGION_LENGTH).close();
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.WRITE))
        {
            channel.truncate(DirtyBitmap.HEADER_LENGTH + 8);
        }

        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> DirtyBitmap.open(path, REGIONS, REGION_LENGTH));

        assertEquals(ErrorCode.IO_ERROR, ex.code());
        assertTrue(ex.getMessage().contains("damaged"), ex.getMessage());
    }

    @Test
    void shouldReportMissingFile()
    {
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> DirtyBitmap.open(dir.resolve("missing.bitmap"), REGIONS, REGION_LENGTH));

        assertEquals(ErrorCode.IO_ERROR, ex.code());
    }
}
