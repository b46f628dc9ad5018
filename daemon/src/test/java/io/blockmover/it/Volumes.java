package io.blockmover.it;

import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * Volume files for tests: random content, in-place patches, byte-exact comparison.
 */
final class Volumes
{
    static final int MIB = 1024 * 1024;

    private Volumes()
    {
    }

    /**
     * Writes {@code size} bytes of seeded random data (incompressible, every region different).
     */
    static Path random(final Path path, final long size, final long seed) throws IOException
    {
        final SplittableRandom random = new SplittableRandom(seed);
        final byte[] block = new byte[MIB];
        try (RandomAccessFile file = new RandomAccessFile(path.toFile(), "rw"))
        {
            file.setLength(0);
            long written = 0;
            while (written < size)
            {
                for (int i = 0; i < block.length; i += 8)
                {
                    final long v = random.nextLong();
                    for (int b = 0; b < 8; b++)
                    {
                        block[i + b] = (byte)(v >>> (b * 8));
                    }
                }
                final int n = (int)Math.min(block.length, size - written);
                file.write(block, 0, n);
                written += n;
            }
        }
        return path;
    }

    /**
     * Creates a file of {@code size} zero bytes (sparse).
     */
    static Path zeros(final Path path, final long size) throws IOException
    {
        try (RandomAccessFile file = new RandomAccessFile(path.toFile(), "rw"))
        {
            file.setLength(0);
            file.setLength(size);
        }
        return path;
    }

    /**
     * Overwrites {@code length} bytes at {@code offset} with a pattern.
     */
    static void patch(final Path path, final long offset, final int length, final byte value) throws IOException
    {
        try (RandomAccessFile file = new RandomAccessFile(path.toFile(), "rw"))
        {
            final byte[] bytes = new byte[length];
            Arrays.fill(bytes, value);
            file.seek(offset);
            file.write(bytes);
        }
    }

    /**
     * @return null when the first {@code length} bytes of both files are equal, else where they first differ.
     */
    static String firstDifference(final Path a, final Path b, final long length) throws IOException
    {
        try (InputStream in1 = Files.newInputStream(a); InputStream in2 = Files.newInputStream(b))
        {
            final byte[] x = new byte[MIB];
            final byte[] y = new byte[MIB];
            long offset = 0;
            while (offset < length)
            {
                final int want = (int)Math.min(MIB, length - offset);
                final int n1 = in1.readNBytes(x, 0, want);
                final int n2 = in2.readNBytes(y, 0, want);
                if (n1 != want || n2 != want)
                {
                    return "short file at " + offset;
                }
                final int mismatch = Arrays.mismatch(x, 0, want, y, 0, want);
                if (mismatch >= 0)
                {
                    return "byte " + (offset + mismatch);
                }
                offset += want;
            }
            return null;
        }
    }
}
