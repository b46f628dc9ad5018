package io.blockmover.replication.snapshot;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.SmallTmpfs;
import io.blockmover.buffer.Slab;
import io.blockmover.frontend.nbd.NbdErrorException;
import io.blockmover.frontend.nbd.NbdProtocol;
import io.blockmover.io.Volume;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class CopyOnWriteViewTest
{
    private static final int GRAIN = 64 * 1024;
    private static final int SIZE = 16 * GRAIN;

    @TempDir
    Path dir;

    private Volume live;
    private byte[] original;
    private final ByteBuffer io = BufferUtil.allocateDirectAligned(SIZE, Slab.ALIGNMENT);

    @BeforeEach
    void createVolume() throws IOException
    {
        original = new byte[SIZE];
        new Random(1).nextBytes(original);
        final Path path = dir.resolve("volume");
        Files.write(path, original);
        live = Volume.open(path, true);
    }

    @AfterEach
    void closeVolume()
    {
        live.close();
    }

    private CopyOnWriteView view(final Path where) throws IOException
    {
        return new CopyOnWriteView("g-test/volume", live, SIZE, where, "volume-0", GRAIN);
    }

    /** The applier's order: preserve, then overwrite the live volume. */
    private void applierWrite(final CopyOnWriteView view, final long offset, final byte[] data) throws IOException
    {
        view.preserve(offset, data.length);
        final ByteBuffer buffer = BufferUtil.allocateDirectAligned(data.length, Slab.ALIGNMENT);
        buffer.put(data).flip();
        live.write(offset, buffer, data.length);
    }

    private static byte[] read(final CopyOnWriteView view, final ByteBuffer buffer, final long offset,
        final int length) throws IOException
    {
        view.read(offset, buffer, length);
        final byte[] bytes = new byte[length];
        buffer.duplicate().get(bytes);
        return bytes;
    }

    private byte[] readLive(final long offset, final int length) throws IOException
    {
        live.read(offset, io, length);
        final byte[] bytes = new byte[length];
        io.duplicate().get(bytes);
        return bytes;
    }

    private static byte[] filled(final int length, final int value)
    {
        final byte[] bytes = new byte[length];
        Arrays.fill(bytes, (byte)value);
        return bytes;
    }

    @Test
    void shouldKeepTheFrozenContentWhileTheLiveVolumeChanges() throws IOException
    {
        try (CopyOnWriteView view = view(dir))
        {
            // Two records: one inside grain 1, one spanning grains 3 to 5 with unaligned grain edges.
            applierWrite(view, GRAIN + 8192, filled(4096, 0xB1));
            applierWrite(view, 3L * GRAIN + 61440, filled(2 * GRAIN, 0xB2));

            assertArrayEquals(original, read(view, io, 0, SIZE), "the view still reads the frozen image");
            assertEquals(4L * GRAIN, view.preservedBytes(), "grains 1, 3, 4 and 5 preserved");
            final byte[] now = readLive(0, SIZE);
            assertEquals((byte)0xB1, now[GRAIN + 8192], "the live volume did change");
            assertEquals((byte)0xB2, now[3 * GRAIN + 61440]);
            // A second write to a preserved grain keeps the first preserved (frozen) copy.
            applierWrite(view, GRAIN, filled(GRAIN, 0xB3));
            assertArrayEquals(original, read(view, io, 0, SIZE));
            assertEquals(4L * GRAIN, view.preservedBytes());
        }
        assertEquals(1, Files.list(dir).count(), "the view's files are gone after close, only the volume is left");
    }

    @Test
    void shouldReadItsOwnWritesAndNeverWriteTheLiveVolume() throws IOException
    {
        try (CopyOnWriteView view = view(dir))
        {
            final ByteBuffer src = BufferUtil.allocateDirectAligned(GRAIN, Slab.ALIGNMENT);
            // Partial grain (4 KiB inside grain 2), and a write spanning grains 6-7 after grain 7 was preserved.
            applierWrite(view, 7L * GRAIN, filled(GRAIN, 0xB7));
            src.put(filled(4096, 0xC1)).flip();
            view.write(2L * GRAIN + 4096, src, 4096, false);
            src.clear();
            src.put(filled(8192, 0xC2)).flip();
            view.write(7L * GRAIN - 4096, src, 8192, true);

            final byte[] expected = original.clone();
            Arrays.fill(expected, 2 * GRAIN + 4096, 2 * GRAIN + 8192, (byte)0xC1);
            Arrays.fill(expected, 7 * GRAIN - 4096, 7 * GRAIN + 4096, (byte)0xC2);
            assertArrayEquals(expected, read(view, io, 0, SIZE), "read-your-writes, frozen bytes around them");
            assertEquals(3L * GRAIN, view.overlayBytes());

            final byte[] liveExpected = original.clone();
            Arrays.fill(liveExpected, 7 * GRAIN, 8 * GRAIN, (byte)0xB7);
            assertArrayEquals(liveExpected, readLive(0, SIZE), "the live volume never sees the view's writes");

            // The applier overwrites a grain the view wrote: nothing to preserve, the view keeps its write.
            applierWrite(view, 2L * GRAIN, filled(GRAIN, 0xB2));
            assertArrayEquals(expected, read(view, io, 0, SIZE));
            view.writeZeroes(9L * GRAIN, 2 * GRAIN, false);
            assertArrayEquals(new byte[2 * GRAIN], read(view, io, 9L * GRAIN, 2 * GRAIN));
        }
    }

    @Test
    @Timeout(value = 30, unit = TimeUnit.SECONDS)
    void shouldNeverShowNewDataToAReaderRacingTheApplier() throws Exception
    {
        try (CopyOnWriteView view = view(dir))
        {
            final AtomicBoolean done = new AtomicBoolean();
            final AtomicReference<Throwable> problem = new AtomicReference<>();
            final int[] reads = new int[1];
            final Thread reader = new Thread(() ->
            {
                final ByteBuffer buffer = BufferUtil.allocateDirectAligned(2 * GRAIN, Slab.ALIGNMENT);
                final Random random = new Random(3);
                try
                {
                    while (!done.get())
                    {
                        // 8 KiB reads straddling grain edges, so a read takes two stripe locks in turn.
                        final long offset = (random.nextInt(SIZE / 4096 - 1)) * 4096L;
                        final byte[] got = read(view, buffer, offset, 8192);
                        for (int i = 0; i < got.length; i++)
                        {
                            if (got[i] != original[(int)offset + i])
                            {
                                throw new AssertionError("the view showed new data at " + (offset + i));
                            }
                        }
                        reads[0]++;
                    }
                }
                catch (final Throwable ex)
                {
                    problem.set(ex);
                }
            });
            reader.start();
            final Random random = new Random(2);
            final long endNs = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
            int writes = 0;
            while (System.nanoTime() < endNs && problem.get() == null)
            {
                final long offset = random.nextInt(SIZE / 4096 - 2) * 4096L;
                applierWrite(view, offset, filled(8192, 1 + (writes & 0x7f)));
                writes++;
            }
            done.set(true);
            reader.join();
            assertNull(problem.get(), () -> String.valueOf(problem.get()));
            assertTrue(reads[0] > 100, "the reader really raced the applier: " + reads[0] + " reads");
            assertTrue(writes > 100, "the applier really wrote: " + writes);
            assertFalse(Arrays.equals(original, readLive(0, SIZE)));
            assertArrayEquals(original, read(view, io, 0, SIZE));
        }
    }

    @Test
    void shouldFailTheViewNotTheWriterWhenTheStoreIsFull() throws Exception
    {
        // A 128 KiB tmpfs holds two grains: the third copy-before-write fails with ENOSPC.
        try (SmallTmpfs small = SmallTmpfs.mount(dir.resolve("small"), "128k"))
        {
            try (CopyOnWriteView view = view(small.dir()))
            {
                for (int g = 0; g < 4; g++)
                {
                    applierWrite(view, (long)g * GRAIN, filled(GRAIN, 0xD0 + g));
                }
                assertNotNull(view.failure());
                assertTrue(view.failure().contains("No space left"), view.failure());
                final NbdErrorException ex = assertThrows(NbdErrorException.class, () -> read(view, io, 0, 4096));
                assertEquals(NbdProtocol.NBD_EIO, ex.errorCode());
            }
            // The writer went on: every write reached the live volume.
            final byte[] now = readLive(0, 4 * GRAIN);
            for (int g = 0; g < 4; g++)
            {
                assertEquals((byte)(0xD0 + g), now[g * GRAIN + 100]);
            }
        }
    }
}
