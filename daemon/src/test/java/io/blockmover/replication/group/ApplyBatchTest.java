package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The destination's batched O_DIRECT apply: which records may share a batch, and what a batch writes.
 */
class ApplyBatchTest
{
    @TempDir
    Path dir;

    private ApplyBatch batch;

    @BeforeEach
    void open()
    {
        batch = ApplyBatch.openOrNull();
        assertNotNull(batch, "Linux AIO on this host");
    }

    @AfterEach
    void close()
    {
        batch.close();
    }

    private static ByteBuffer block(final int length, final int stamp)
    {
        final byte[] bytes = new byte[length];
        Arrays.fill(bytes, (byte)stamp);
        return ByteBuffer.wrap(bytes);
    }

    @Test
    void shouldBatchOnlyWhatODirectCanWrite()
    {
        assertTrue(ApplyBatch.batchable(5, 4096, 4096));
        assertTrue(ApplyBatch.batchable(5, 0, 128 * 1024));
        assertFalse(ApplyBatch.batchable(-1, 4096, 4096), "no O_DIRECT descriptor");
        assertFalse(ApplyBatch.batchable(5, 512, 4096), "offset not aligned");
        assertFalse(ApplyBatch.batchable(5, 4096, 1024), "length not aligned");
        assertFalse(ApplyBatch.batchable(5, 0, 256 * 1024), "long: written on its own");
    }

    /**
     * Two records that write any byte in common never share a batch (both would be in flight at once, and the later
     * could land first); records of another volume, or next to each other, do.
     */
    @Test
    void shouldDrainBeforeARecordOverlappingOneInTheBatchOrWhenFull() throws IOException
    {
        final Path file = dir.resolve("v");
        Files.write(file, new byte[4 << 20]);
        try (Volume volume = Volume.open(file, true))
        {
            final int fd = volume.directFd();
            assertFalse(batch.mustDrainBefore(0, 0, 4096), "empty");
            batch.add(0, fd, 8192, block(8192, 1), 0, 1, false, 0);
            assertFalse(batch.mustDrainBefore(0, 4096, 4096), "ends where the batched one begins");
            assertFalse(batch.mustDrainBefore(0, 16384, 4096), "begins where it ends");
            assertFalse(batch.mustDrainBefore(1, 8192, 8192), "another volume");
            assertTrue(batch.mustDrainBefore(0, 8192, 4096), "its first block");
            assertTrue(batch.mustDrainBefore(0, 12288, 4096), "its last block");
            assertTrue(batch.mustDrainBefore(0, 4096, 16384), "around it");
            for (int i = 1; i < ApplyBatch.MAX_RECORDS; i++)
            {
                assertFalse(batch.mustDrainBefore(0, (i + 4) * 4096L, 4096), "record " + i);
                batch.add(0, fd, (i + 4) * 4096L, block(4096, i), i, i + 1, false, 0);
            }
            assertTrue(batch.mustDrainBefore(0, 1 << 20, 4096), "full: " + ApplyBatch.MAX_RECORDS + " records");
            batch.clear();
            for (int i = 0; i < 4; i++)
            {
                batch.add(0, fd, i * 256 * 1024L, block(ApplyBatch.MAX_RECORD_LENGTH + 1 - 4096, i), i, i + 1,
                    false, 0);
            }
            assertTrue(batch.mustDrainBefore(0, 2L << 20, 64 * 1024), "its staging bytes are used up");
            batch.clear();
        }
    }

    @Test
    void shouldWriteEveryRecordOfABatchAndKeepThemUntilCleared() throws IOException
    {
        final Path file = dir.resolve("v");
        Files.write(file, new byte[1 << 20]);
        final byte[] expected = new byte[1 << 20];
        try (Volume volume = Volume.open(file, true))
        {
            for (int i = 0; i < ApplyBatch.MAX_RECORDS; i++)
            {
                final long offset = (i * 7L % 64) * 16384;
                final int length = 4096 * (1 + i % 3);
                batch.add(0, volume.directFd(), offset, block(length, i + 1), 100L * i, 10 + i, i == 3, 5L * i);
                Arrays.fill(expected, (int)offset, (int)offset + length, (byte)(i + 1));
            }
            batch.writeAll();
            assertEquals(ApplyBatch.MAX_RECORDS, batch.count());
            assertEquals(13, batch.lsn(3));
            assertEquals(300, batch.position(3));
            assertTrue(batch.resync(3));
            assertEquals(15, batch.stagedAtNs(3));
            assertEquals(8192, batch.length(1));
            batch.clear();
            assertEquals(0, batch.count());
        }
        assertArrayEquals(expected, Files.readAllBytes(file));
    }

    /**
     * A write the kernel refuses (here a descriptor not open for writing) fails the batch, named by its place in
     * it, and the batch is usable again once cleared.
     */
    @Test
    void shouldNameTheRecordWhoseWriteFailed() throws IOException
    {
        final Path file = dir.resolve("v");
        Files.write(file, new byte[1 << 20]);
        final Path other = dir.resolve("read-only");
        Files.write(other, new byte[1 << 20]);
        try (Volume writable = Volume.open(file, true); Volume readOnly = Volume.open(other, false))
        {
            batch.add(0, writable.directFd(), 0, block(4096, 1), 0, 1, false, 0);
            batch.add(0, readOnly.directFd(), 4096, block(4096, 2), 100, 2, false, 0);
            batch.add(0, writable.directFd(), 8192, block(4096, 3), 200, 3, false, 0);
            final IOException ex = assertThrows(IOException.class, batch::writeAll);
            assertEquals(1, batch.failedIndex());
            assertTrue(ex.getMessage().contains("errno 9"), ex.getMessage());
            batch.clear();
            batch.add(0, writable.directFd(), 4096, block(4096, 4), 0, 4, false, 0);
            batch.writeAll();
            assertEquals(-1, batch.failedIndex());
        }
        final byte[] bytes = Files.readAllBytes(file);
        assertEquals(1, bytes[0]);
        assertEquals(4, bytes[4096]);
        assertEquals(3, bytes[8192]);
    }
}
