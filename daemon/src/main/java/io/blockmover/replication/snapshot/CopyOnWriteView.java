package io.blockmover.replication.snapshot;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.atomic.AtomicIntegerArray;

import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

import io.blockmover.buffer.Slab;
import io.blockmover.frontend.nbd.NbdErrorException;
import io.blockmover.frontend.nbd.NbdExport;
import io.blockmover.frontend.nbd.NbdProtocol;
import io.blockmover.io.Volume;
import io.blockmover.replication.ConcurrentBitSet;

/**
 * A writable point-in-time view of a live volume that keeps changing underneath: copy-before-write for the
 * writer of the live volume, and an overlay for the view's own writes. The volume is cut into grains; per grain:
 * <pre>
 *   view read:   overlay file     if the view wrote the grain
 *                preserved file   else if the live volume changed it since the view was taken
 *                live volume      else (it still holds the view's bytes)
 *   view write:  overlay file (a partial grain is first filled from where a read would take it)
 *   live write:  {@link #preserve} first copies the grain to the preserved file unless it is there or in the overlay
 * </pre>
 * Both files are sparse, the size of the volume, and thrown away with the view; bitmaps are in memory. Grains
 * only ever become preserved or written while the view lives, so a set bit is final and may be tested without
 * a lock; every decision and copy on a clear bit happens under the grain's stripe lock, so a view read that races
 * the copy-before-write of its grain either reads the live grain before the copy starts, or the preserved copy
 * after it: never the live volume's new data.
 * <p>
 * Any I/O error of the view's own files (disk full) fails the view, never the writer of the live volume:
 * {@link #preserve} records it in {@link #failure()} and returns, and every view request fails with EIO from then.
 * <p>
 * Threading: {@link #preserve} from the one thread that writes the live volume (the applier); the NBD methods from
 * any number of connection workers. Nothing allocates per call except WRITE_ZEROES (rare).
 */
public final class CopyOnWriteView implements NbdExport, AutoCloseable
{
    /** Default grain: 64 KiB, a copy small enough not to stall the applier, large enough for few bits. */
    public static final int DEFAULT_GRAIN_LENGTH = 64 * 1024;

    private static final int STRIPES = 16;
    // Lock words 64 bytes apart, so stripes do not share a cache line.
    private static final int LOCK_STRIDE = 16;

    private final String name;
    private final Volume live;
    private final long size;
    private final int grainShift;
    private final int grainLength;
    private final Path preservedPath;
    private final Path overlayPath;
    private final FileChannel preserved;
    private final FileChannel overlay;
    private final ConcurrentBitSet preservedGrains;
    private final ConcurrentBitSet overlayGrains;
    private final AtomicIntegerArray locks = new AtomicIntegerArray(STRIPES * LOCK_STRIDE);
    private final ByteBuffer[] stripeBuffers = new ByteBuffer[STRIPES];
    private final ByteBuffer zeroes;
    private volatile String failure;
    private volatile boolean closed;

    /**
     * Creates the view's two files (they must not exist).
     *
     * @param name          NBD export name.
     * @param live          the live volume, open; stays owned by the caller.
     * @param size          bytes of the view (a multiple of 4096, at most the volume's size).
     * @param dir           directory for the files.
     * @param fileStem      file names: STEM.preserved and STEM.overlay.
     * @param grainLength   power of two, at least 4096.
     * @throws IOException when the files cannot be created.
     */
    public CopyOnWriteView(final String name, final Volume live, final long size, final Path dir,
        final String fileStem, final int grainLength) throws IOException
    {
        if (Integer.bitCount(grainLength) != 1 || grainLength < Slab.ALIGNMENT)
        {
            throw new IllegalArgumentException("grain length " + grainLength + " is not a power of two >= 4096");
        }
        if (size % Slab.ALIGNMENT != 0 || size > live.size())
        {
            throw new IllegalArgumentException("view size " + size + " is not a multiple of 4096 within " + live);
        }
        this.name = name;
        this.live = live;
        this.size = size;
        this.grainLength = grainLength;
        this.grainShift = Integer.numberOfTrailingZeros(grainLength);
        final long grains = (size + grainLength - 1) >>> grainShift;
        this.preservedGrains = new ConcurrentBitSet(new UnsafeBuffer(new byte[ConcurrentBitSet.wordsLength(grains)]),
            0, grains);
        this.overlayGrains = new ConcurrentBitSet(new UnsafeBuffer(new byte[ConcurrentBitSet.wordsLength(grains)]),
            0, grains);
        this.preservedPath = dir.resolve(fileStem + ".preserved");
        this.overlayPath = dir.resolve(fileStem + ".overlay");
        FileChannel p = null;
        try
        {
            p = FileChannel.open(preservedPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE);
            this.preserved = p;
            this.overlay = FileChannel.open(overlayPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE);
        }
        catch (final IOException ex)
        {
            if (p != null)
            {
                p.close();
            }
            Files.deleteIfExists(preservedPath);
            throw ex;
        }
        for (int i = 0; i < STRIPES; i++)
        {
            stripeBuffers[i] = BufferUtil.allocateDirectAligned(grainLength, Slab.ALIGNMENT);
        }
        this.zeroes = BufferUtil.allocateDirectAligned(grainLength, Slab.ALIGNMENT).asReadOnlyBuffer();
    }

    /**
     * Copy-before-write: call before overwriting {@code [offset, offset + length)} of the live volume. Grains not
     * yet preserved (and not overwritten by the view) are copied to the preserved file first. Never throws: an
     * error fails the view (see {@link #failure()}) and the caller goes on. Writer thread only.
     *
     * @param offset byte offset about to be written.
     * @param length bytes about to be written.
     */
    public void preserve(final long offset, final int length)
    {
        if (failure != null || closed || offset >= size)
        {
            return;
        }
        final long first = offset >>> grainShift;
        final long last = (Math.min(offset + length, size) - 1) >>> grainShift;
        for (long grain = first; grain <= last; grain++)
        {
            if (preservedGrains.get(grain) || overlayGrains.get(grain))
            {
                continue;
            }
            final int stripe = lock(grain);
            try
            {
                if (failure != null || closed)
                {
                    return;
                }
                if (!preservedGrains.get(grain) && !overlayGrains.get(grain))
                {
                    final ByteBuffer buffer = stripeBuffers[stripe];
                    final long at = grain << grainShift;
                    final int n = grainBytes(grain);
                    live.read(at, buffer, n);
                    buffer.limit(n).position(0);
                    writeFully(preserved, buffer, at);
                    preservedGrains.set(grain);
                }
            }
            catch (final IOException ex)
            {
                // Set under the lock: a reader of this grain that comes next sees it and fails instead of reading
                // the live volume, which the caller is about to overwrite.
                failure = "cannot preserve " + grainLength + " bytes at " + (grain << grainShift) + " of " + live +
                    " in " + preservedPath + ": " + ex.getMessage() + " (free space in the state directory, then " +
                    "mount again)";
                return;
            }
            finally
            {
                unlock(stripe);
            }
        }
    }

    /**
     * @return why the view failed (its own files' I/O error), or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return bytes of grains copied before the live volume overwrote them.
     */
    public long preservedBytes()
    {
        return preservedGrains.cardinality() << grainShift;
    }

    /**
     * @return bytes of grains the view's clients wrote.
     */
    public long overlayBytes()
    {
        return overlayGrains.cardinality() << grainShift;
    }

    public int grainLength()
    {
        return grainLength;
    }

    @Override
    public String name()
    {
        return name;
    }

    @Override
    public long size()
    {
        return size;
    }

    @Override
    public boolean isReadOnly()
    {
        return false;
    }

    @Override
    public void read(final long offset, final ByteBuffer dst, final int length) throws IOException
    {
        int done = 0;
        while (done < length)
        {
            final long at = offset + done;
            final long grain = at >>> grainShift;
            final int n = (int)Math.min(length - done, ((grain + 1) << grainShift) - at);
            final int stripe = lock(grain);
            try
            {
                check();
                dst.limit(done + n).position(done);
                if (overlayGrains.get(grain))
                {
                    readFully(overlay, dst, at);
                }
                else if (preservedGrains.get(grain))
                {
                    readFully(preserved, dst, at);
                }
                else
                {
                    live.readRange(at, dst);
                }
            }
            finally
            {
                unlock(stripe);
            }
            done += n;
        }
        dst.limit(length).position(0);
    }

    @Override
    public void write(final long offset, final ByteBuffer src, final int length, final boolean fua)
        throws IOException
    {
        int done = 0;
        while (done < length)
        {
            final long at = offset + done;
            final long grain = at >>> grainShift;
            final int n = (int)Math.min(length - done, ((grain + 1) << grainShift) - at);
            final int stripe = lock(grain);
            try
            {
                check();
                if (!overlayGrains.get(grain) && n < grainBytes(grain))
                {
                    fillOverlay(grain, stripeBuffers[stripe]);
                }
                src.limit(done + n).position(done);
                writeFully(overlay, src, at);
                overlayGrains.set(grain);
            }
            catch (final IOException ex)
            {
                fail("cannot write the test view's overlay " + overlayPath + " at " + at + ": " + ex.getMessage() +
                    " (free space in the state directory, then mount again)");
                throw new NbdErrorException(NbdProtocol.NBD_ENOSPC, failure, ex);
            }
            finally
            {
                unlock(stripe);
            }
            done += n;
        }
    }

    // A partial write to a grain the view has not written yet: the rest of the grain keeps the view's bytes.
    private void fillOverlay(final long grain, final ByteBuffer buffer) throws IOException
    {
        final long at = grain << grainShift;
        final int n = grainBytes(grain);
        buffer.clear().limit(n);
        if (preservedGrains.get(grain))
        {
            readFully(preserved, buffer, at);
        }
        else
        {
            live.readRange(at, buffer);
        }
        buffer.flip();
        writeFully(overlay, buffer, at);
    }

    @Override
    public void flush() throws IOException
    {
        // The view never outlives its mount (nor a restart of the daemon), so there is nothing to make durable.
        check();
    }

    @Override
    public void trim(final long offset, final long length) throws IOException
    {
        // Advisory: keeping the view's bytes is a valid outcome.
        check();
    }

    @Override
    public void writeZeroes(final long offset, final long length, final boolean fua) throws IOException
    {
        final ByteBuffer source = zeroes.duplicate();
        long done = 0;
        while (done < length)
        {
            final int chunk = (int)Math.min(grainLength, length - done);
            write(offset + done, source, chunk, false);
            done += chunk;
        }
    }

    private void check() throws IOException
    {
        if (closed)
        {
            throw new NbdErrorException(NbdProtocol.NBD_EIO, "the test view " + name + " was dismounted");
        }
        if (failure != null)
        {
            throw new NbdErrorException(NbdProtocol.NBD_EIO, failure);
        }
    }

    private void fail(final String message)
    {
        if (failure == null)
        {
            failure = message;
        }
    }

    private int grainBytes(final long grain)
    {
        return (int)Math.min(grainLength, size - (grain << grainShift));
    }

    private int lock(final long grain)
    {
        final int stripe = (int)(grain & (STRIPES - 1));
        final int index = stripe * LOCK_STRIDE;
        int spins = 0;
        while (!locks.compareAndSet(index, 0, 1))
        {
            // Held for one grain's copy at most (tens of microseconds): spin briefly, then give the CPU away.
            if (++spins < 100)
            {
                Thread.onSpinWait();
            }
            else
            {
                Thread.yield();
            }
        }
        return stripe;
    }

    private void unlock(final int stripe)
    {
        locks.set(stripe * LOCK_STRIDE, 0);
    }

    private static void readFully(final FileChannel channel, final ByteBuffer dst, final long position)
        throws IOException
    {
        long at = position;
        while (dst.hasRemaining())
        {
            final int n = channel.read(dst, at);
            if (n < 0)
            {
                // A grain is marked only after all of it was written, so the file always reaches past it.
                throw new IOException("unexpected end of " + channel + " at byte " + at);
            }
            at += n;
        }
    }

    private static void writeFully(final FileChannel channel, final ByteBuffer src, final long position)
        throws IOException
    {
        long at = position;
        while (src.hasRemaining())
        {
            at += channel.write(src, at);
        }
    }

    /**
     * Marks the view closed (every later request fails), closes and deletes its files. The caller must have
     * stopped calling {@link #preserve} and removed the export first.
     */
    @Override
    public void close()
    {
        closed = true;
        // Take every stripe so no request is halfway through a file when it closes.
        for (int i = 0; i < STRIPES; i++)
        {
            lock(i);
        }
        try
        {
            preserved.close();
            overlay.close();
            Files.deleteIfExists(preservedPath);
            Files.deleteIfExists(overlayPath);
        }
        catch (final IOException ex)
        {
            fail("cannot remove " + preservedPath + " or " + overlayPath + ": " + ex.getMessage());
        }
        finally
        {
            for (int i = 0; i < STRIPES; i++)
            {
                unlock(i);
            }
        }
    }

    @Override
    public String toString()
    {
        return "test view '" + name + "' of " + live;
    }
}
