package io.blockmover.pipeline;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.CachedNanoClock;
import org.agrona.concurrent.status.AtomicCounter;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.io.Volume;
import io.blockmover.replication.DirtyBitmap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The data path allocates nothing per chunk: a source and a destination pipeline, joined by two linked transport
 * doubles that record into preallocated storage, are turned by hand on this thread, and the thread's allocation
 * counter is read around every duty cycle so that a regression names the agent that allocates.
 */
class PipelineAllocationTest
{
    private static final int CHUNK = 16 * 1024;
    private static final int CHUNKS = 1024;
    private static final int SIZE = CHUNKS * CHUNK;
    private static final int SLOTS = 8;
    private static final int FLUSH_CHUNKS = 16;
    private static final int WARM_UP_CHUNKS = 256;
    private static final int MEASURED_CHUNKS = 640;
    /**
     * Room for the measuring itself and the odd lazily initialised JDK structure (about 2 KiB in all), yet less
     * than the smallest object (16 bytes) per chunk: any allocation per chunk fails the test.
     */
    private static final long ALLOCATION_BOUND = MEASURED_CHUNKS * 12L;
    private static final String[] AGENTS = {"reader", "sender", "receiver", "writer"};

    @TempDir
    Path dir;

    private Volume sourceVolume;
    private Volume targetVolume;
    private DirtyBitmap bitmap;
    private CncFile cnc;

    @AfterEach
    void close()
    {
        if (sourceVolume != null)
        {
            sourceVolume.close();
        }
        if (targetVolume != null)
        {
            targetVolume.close();
        }
        if (bitmap != null)
        {
            bitmap.close();
        }
        if (cnc != null)
        {
            cnc.close();
        }
    }

    @Test
    void shouldNotAllocateOnDataPathAfterWarmUp() throws IOException
    {
        final byte[] content = new byte[SIZE];
        new Random(33).nextBytes(content);
        final Path source = dir.resolve("source.img");
        final Path target = dir.resolve("target.img");
        Files.write(source, content);
        Files.write(target, new byte[SIZE]);
        sourceVolume = Volume.open(source, false);
        targetVolume = Volume.open(target, true);
        bitmap = DirtyBitmap.createAllDirty(dir.resolve("job.bitmap"), CHUNKS, CHUNK);
        cnc = CncFile.create(dir.resolve("counters.dat"), "test", 1, 64);
        final AtomicCounter bytesRemaining = cnc.newCounter("bytes remaining", 2);
        final AtomicCounter bytesCopied = cnc.newCounter("bytes copied", 2);
        final Slab slab = new Slab(2 * SLOTS, CHUNK);
        final CachedNanoClock clock = new CachedNanoClock();
        final CapturingFrameConnection sourceSide = new CapturingFrameConnection(4 << 20, 1024, 0);
        final CapturingFrameConnection targetSide = new CapturingFrameConnection(4 << 20, 1024, 0);
        CapturingFrameConnection.link(sourceSide, targetSide);
        final long heartbeatNs = TimeUnit.MILLISECONDS.toNanos(100);
        final long peerTimeoutNs = TimeUnit.SECONDS.toNanos(10);

        final SourceSession sourceSession = new SourceSession(7, sourceVolume, bitmap.bits(), CHUNK, slab,
            slab.lease(SLOTS), SLOTS, sourceSide, SLOTS, FLUSH_CHUNKS, false, false, 1, 256, heartbeatNs,
            peerTimeoutNs, cnc, bytesRemaining, bytesCopied);
        final DestinationSession targetSession = new DestinationSession(7, targetVolume, SIZE, CHUNK, slab,
            slab.lease(SLOTS), SLOTS, targetSide, heartbeatNs, peerTimeoutNs, FLUSH_CHUNKS,
            TimeUnit.MILLISECONDS.toNanos(1), cnc);
        final Agent[] agents = {new Reader(sourceSession), new Sender(sourceSession, clock),
            new Receiver(targetSession, clock), new Writer(targetSession, clock)};
        for (final Agent agent : agents)
        {
            agent.onStart();
        }
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        final long threadId = Thread.currentThread().getId();
        final long[] allocated = new long[agents.length];
        final long probe = threads.getThreadAllocatedBytes(threadId);
        final byte[] sink = new byte[4096];
        assertTrue(threads.getThreadAllocatedBytes(threadId) - probe >= sink.length,
            "the thread allocation counter must see a 4 KiB array, or this test could never fail");

        crank(agents, clock, bytesCopied, (long)WARM_UP_CHUNKS * CHUNK, threads, threadId, allocated);
        final long chunksBefore = cnc.counter(SystemCounter.CHUNKS_WRITTEN).get();
        for (int i = 0; i < allocated.length; i++)
        {
            allocated[i] = 0;
        }
        final long before = threads.getThreadAllocatedBytes(threadId);
        crank(agents, clock, bytesCopied, (long)(WARM_UP_CHUNKS + MEASURED_CHUNKS) * CHUNK, threads, threadId,
            allocated);
        final long total = threads.getThreadAllocatedBytes(threadId) - before;
        final long chunksMeasured = cnc.counter(SystemCounter.CHUNKS_WRITTEN).get() - chunksBefore;

        final StringBuilder report = new StringBuilder();
        for (int i = 0; i < agents.length; i++)
        {
            report.append(AGENTS[i]).append('=').append(allocated[i]).append(" B ");
        }
        assertTrue(chunksMeasured >= MEASURED_CHUNKS, "chunks measured " + chunksMeasured);
        assertTrue(total < ALLOCATION_BOUND, total + " bytes allocated for " + chunksMeasured + " chunks (" +
            total / chunksMeasured + " B/chunk): " + report);

        finish(agents, clock, sourceSession, targetSession);
        assertEquals(SessionStatus.COMPLETED, sourceSession.status().state());
        assertEquals(0, bitmap.bits().cardinality());
        assertArrayEquals(content, Files.readAllBytes(target), "the pipeline copied the volume exactly");
    }

    private static void crank(final Agent[] agents, final CachedNanoClock clock, final AtomicCounter bytesCopied,
        final long untilBytes, final com.sun.management.ThreadMXBean threads, final long threadId,
        final long[] allocated)
    {
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (bytesCopied.get() < untilBytes)
        {
            if (System.nanoTime() > deadline)
            {
                fail("copy stalled at " + bytesCopied.get() + " bytes");
            }
            turn(agents, 0, threads, threadId, allocated);
            turn(agents, 1, threads, threadId, allocated);
            turn(agents, 2, threads, threadId, allocated);
            turn(agents, 3, threads, threadId, allocated);
            turn(agents, 2, threads, threadId, allocated);
            turn(agents, 1, threads, threadId, allocated);
            clock.advance(50_000);
        }
    }

    private static void turn(final Agent[] agents, final int index, final com.sun.management.ThreadMXBean threads,
        final long threadId, final long[] allocated)
    {
        final long before = threads.getThreadAllocatedBytes(threadId);
        try
        {
            agents[index].doWork();
        }
        catch (final Exception ex)
        {
            throw new AssertionError(AGENTS[index] + " failed", ex);
        }
        allocated[index] += threads.getThreadAllocatedBytes(threadId) - before;
    }

    private static void finish(final Agent[] agents, final CachedNanoClock clock, final SourceSession source,
        final DestinationSession target)
    {
        final boolean[] ended = new boolean[agents.length];
        final long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (source.status().isRunning() || target.status().isRunning())
        {
            if (System.nanoTime() > deadline)
            {
                fail("session did not finish: source " + source.status().state() + ", target " +
                    target.status().state());
            }
            for (int i = 0; i < agents.length; i++)
            {
                if (!ended[i])
                {
                    try
                    {
                        agents[i].doWork();
                    }
                    catch (final AgentTerminationException ex)
                    {
                        ended[i] = true;
                    }
                    catch (final Exception ex)
                    {
                        throw new AssertionError(AGENTS[i] + " failed", ex);
                    }
                }
            }
            clock.advance(50_000);
        }
        assertEquals(SessionStatus.COMPLETED, target.status().state(), String.valueOf(target.status().message()));
    }
}
