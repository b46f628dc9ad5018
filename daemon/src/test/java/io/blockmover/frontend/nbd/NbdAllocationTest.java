package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.group.TestSourceGroups;

import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLUSH;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_READ;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The request path allocates nothing: after a warm-up, the reader, worker, replier and reaper threads of a
 * connection serving thousands of pipelined reads, writes and flushes are measured with the JVM's per-thread
 * allocation counter: a plain volume's READs and WRITEs through Linux AIO, writes the export defers (a sync
 * group's) through the workers, and a replicated volume's writes logged on the reader and finished on the reaper.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class NbdAllocationTest
{
    private static final int BLOCK = 4096;
    private static final int SIZE = 4 * 1024 * 1024;
    private static final int DEPTH = 8;
    private static final int WARM_UP_ROUNDS = 400;
    private static final int MEASURED_ROUNDS = 800;
    /** Less than one small object per 16 requests: an allocation per request fails the test. */
    private static final long ALLOCATION_BOUND = MEASURED_ROUNDS * DEPTH * 2L;

    @TempDir
    Path dir;

    private static void round(final RawNbdClient client, final byte[] data, final int round) throws IOException
    {
        for (int i = 0; i < DEPTH; i++)
        {
            final long offset = (long)((round * DEPTH + i) % (SIZE / BLOCK)) * BLOCK;
            client.sendRequest(CMD_WRITE, 0, i, offset, BLOCK, data);
        }
        for (int i = 0; i < DEPTH; i++)
        {
            assertEquals(0, client.readReply(0).error());
        }
        for (int i = 0; i < DEPTH; i++)
        {
            final long offset = (long)((round * DEPTH + i) % (SIZE / BLOCK)) * BLOCK;
            client.sendRequest(CMD_READ, 0, i, offset, BLOCK, null);
        }
        for (int i = 0; i < DEPTH; i++)
        {
            assertEquals(0, client.readReply(BLOCK).error());
        }
        if (round % DEPTH == 0)
        {
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));
        }
    }

    private static long[] connectionThreadIds()
    {
        final List<Long> ids = new ArrayList<>();
        for (final Thread thread : Thread.getAllStackTraces().keySet())
        {
            if (thread.getName().startsWith("nbd-conn-"))
            {
                ids.add(thread.getId());
            }
        }
        final long[] result = new long[ids.size()];
        for (int i = 0; i < result.length; i++)
        {
            result[i] = ids.get(i);
        }
        return result;
    }

    private static long allocated(final com.sun.management.ThreadMXBean threads, final long[] ids)
    {
        long total = 0;
        for (final long bytes : threads.getThreadAllocatedBytes(ids))
        {
            total += bytes;
        }
        return total;
    }

    /**
     * Defers every write a worker runs and completes it at once, from the worker, as a partner's ACK that came
     * first would: the reply goes through the replier.
     */
    private static final class DeferringExport extends ForwardingExport
    {
        DeferringExport(final NbdExport delegate)
        {
            super(delegate);
        }

        @Override
        public boolean writeDeferrable(final long offset, final ByteBuffer src, final int length, final boolean fua,
            final WriteCompletion completion) throws IOException
        {
            delegate.write(offset, src, length, fua);
            completion.complete(0);
            completion.dispatch();
            return false;
        }
    }

    @Test
    void shouldNotAllocateOnTheRequestPath() throws IOException
    {
        final Path file = dir.resolve("disk.img");
        Files.write(file, new byte[SIZE]);
        try (Volume volume = Volume.open(file, true))
        {
            // A plain volume's READs and WRITEs go through Linux AIO, reaped by a thread of their own.
            assertNoAllocation(new VolumeExport("disk", volume, false), "one reader, four workers, the replier and " +
                "the AIO reaper", 7);
        }
    }

    @Test
    void shouldNotAllocateWhenWritesAreDeferred() throws IOException
    {
        final Path file = dir.resolve("disk.img");
        Files.write(file, new byte[SIZE]);
        try (Volume volume = Volume.open(file, true))
        {
            // No direct descriptor: its writes go through the workers.
            assertNoAllocation(new DeferringExport(new VolumeExport("disk", volume, false)), "one reader, four " +
                "workers and the replier", 6);
        }
    }

    @Test
    void shouldNotAllocateWhenAReplicatedVolumesWritesGoThroughAio() throws IOException
    {
        try (SourceGroup group = TestSourceGroups.openAsync(dir, dir.resolve("replicated.img"), SIZE, 64L << 20,
            64 * 1024))
        {
            // Its WRITEs are logged by the reader and finished by the reaper; its READs go through AIO as well.
            assertNoAllocation(group.export(0), "one reader, four workers, the replier " +
                "and the AIO reaper", 7);
        }
    }

    private void assertNoAllocation(final NbdExport export, final String threadsExpected, final int threadCount)
        throws IOException
    {
        final boolean deferring = export instanceof DeferringExport;
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        final ExportRegistry exports = new ExportRegistry();
        final Path socket = dir.resolve("nbd.sock");
        try (NbdServer server = new NbdServer(exports, socket, null, 4, 1024 * 1024, System.getLogger("nbd-alloc")))
        {
            exports.add(export);
            server.start();
            try (RawNbdClient client = new RawNbdClient(socket).connect(export.name()))
            {
                final byte[] data = NbdServerTest.random(BLOCK, 3);
                for (int r = 0; r < WARM_UP_ROUNDS; r++)
                {
                    round(client, data, r);
                }
                final long[] ids = connectionThreadIds();
                assertEquals(threadCount, ids.length, threadsExpected);
                final long before = allocated(threads, ids);
                for (int r = 0; r < MEASURED_ROUNDS; r++)
                {
                    round(client, data, r);
                }
                final long allocated = allocated(threads, ids) - before;

                final long requests = MEASURED_ROUNDS * DEPTH * 2L;
                System.out.println("NBD request path (" + export.name() + (deferring ? ", deferred writes): " : "): ") +
                    allocated + " bytes allocated over " + requests + " requests");
                assertTrue(allocated < ALLOCATION_BOUND, allocated + " bytes allocated over " + requests +
                    " requests");
            }
        }
    }
}
