package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.io.Volume;

import static io.blockmover.frontend.nbd.NbdProtocol.CMD_DISC;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLAG_FUA;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLAG_NO_HOLE;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLUSH;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_READ;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_TRIM;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE_ZEROES;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_EINVAL;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_ENOSPC;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_EPERM;
import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server over a real O_DIRECT file, driven byte by byte through {@link RawNbdClient} on a real Unix socket.
 */
@Timeout(value = 30, unit = TimeUnit.SECONDS)
class NbdServerTest
{
    static final int BLOCK = 4096;
    static final int SIZE = 8 * 1024 * 1024;
    static final int MAX_PAYLOAD = 1024 * 1024;

    @TempDir
    Path dir;

    private final ExportRegistry exports = new ExportRegistry();
    private Volume volume;
    private Volume readOnlyVolume;
    private NbdServer server;
    private Path socket;
    private Path file;

    static byte[] random(final int length, final long seed)
    {
        final byte[] bytes = new byte[length];
        new Random(seed).nextBytes(bytes);
        return bytes;
    }

    private void start(final long ioTimeoutNs) throws IOException
    {
        start(ioTimeoutNs, SIZE);
    }

    /**
     * @param dataLength bytes of random data the disk starts with; the rest of it, to SIZE, a hole.
     */
    private void start(final long ioTimeoutNs, final int dataLength) throws IOException
    {
        file = dir.resolve("disk.img");
        Files.write(file, random(dataLength, 7));
        try (java.io.RandomAccessFile sparse = new java.io.RandomAccessFile(file.toFile(), "rw"))
        {
            sparse.setLength(SIZE);
        }
        volume = Volume.open(file, true);
        exports.add(new VolumeExport("disk", volume, false));
        socket = dir.resolve("nbd.sock");
        server = new NbdServer(exports, socket, null, 4, MAX_PAYLOAD, ioTimeoutNs, System.getLogger("nbd-test"));
        server.start();
    }

    private void start() throws IOException
    {
        start(NbdServer.DEFAULT_IO_TIMEOUT_NS);
    }

    private void addReadOnlyExport(final int size) throws IOException
    {
        final Path roFile = dir.resolve("ro.img");
        Files.write(roFile, random(size, 9));
        readOnlyVolume = Volume.open(roFile, false);
        exports.add(new VolumeExport("ro", readOnlyVolume, true));
    }

    private byte[] fileRange(final long offset, final int length) throws IOException
    {
        return Arrays.copyOfRange(Files.readAllBytes(file), (int)offset, (int)offset + length);
    }

    @AfterEach
    void stop()
    {
        if (server != null)
        {
            server.close();
        }
        if (volume != null)
        {
            volume.close();
        }
        if (readOnlyVolume != null)
        {
            readOnlyVolume.close();
        }
    }

    @Test
    void shouldGreetWithFixedNewstyleAndNoZeroes() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            assertEquals(NbdProtocol.FLAG_FIXED_NEWSTYLE | NbdProtocol.FLAG_NO_ZEROES, client.handshakeFlags);
        }
        assertEquals("rw-rw----", PosixFilePermissions.toString(
            Files.getPosixFilePermissions(socket)));
    }

    @Test
    void shouldListEveryExport() throws IOException
    {
        start();
        addReadOnlyExport(4 * BLOCK);
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            client.sendOption(NbdProtocol.OPT_LIST, new byte[0]);
            final List<RawNbdClient.OptionReply> replies = client.readOptionReplies();

            assertEquals(3, replies.size());
            assertEquals(NbdProtocol.REP_SERVER, replies.get(0).type());
            assertEquals("disk", new String(replies.get(0).data(), 4, 4, StandardCharsets.UTF_8));
            assertEquals("ro", new String(replies.get(1).data(), 4, 2, StandardCharsets.UTF_8));
            assertEquals(NbdProtocol.REP_ACK, replies.get(2).type());

            client.sendOption(NbdProtocol.OPT_LIST, new byte[] {1});
            assertEquals(NbdProtocol.REP_ERR_INVALID, client.readOptionReply().type());
        }
    }

    @Test
    void shouldAnswerInfoWithSizeFlagsBlockSizesNameAndDescription() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            client.sendOption(NbdProtocol.OPT_INFO, RawNbdClient.infoData("disk", NbdProtocol.INFO_NAME,
                NbdProtocol.INFO_DESCRIPTION, NbdProtocol.INFO_BLOCK_SIZE));
            final List<RawNbdClient.OptionReply> replies = client.readOptionReplies();

            final Map<Integer, ByteBuffer> infos = new HashMap<>();
            for (final RawNbdClient.OptionReply reply : replies)
            {
                assertEquals(NbdProtocol.OPT_INFO, reply.option());
                if (reply.type() == NbdProtocol.REP_INFO)
                {
                    infos.put((int)reply.buffer().getShort(0), reply.buffer());
                }
            }
            assertEquals(NbdProtocol.REP_ACK, replies.get(replies.size() - 1).type());
            assertEquals(SIZE, infos.get(NbdProtocol.INFO_EXPORT).getLong(2));
            assertEquals(NbdProtocol.FLAG_HAS_FLAGS | NbdProtocol.FLAG_SEND_FLUSH | NbdProtocol.FLAG_SEND_FUA |
                NbdProtocol.FLAG_SEND_TRIM | NbdProtocol.FLAG_SEND_WRITE_ZEROES | NbdProtocol.FLAG_CAN_MULTI_CONN,
                infos.get(NbdProtocol.INFO_EXPORT).getShort(10) & 0xFFFF);
            final ByteBuffer blockSize = infos.get(NbdProtocol.INFO_BLOCK_SIZE);
            assertEquals(BLOCK, blockSize.getInt(2));
            assertEquals(BLOCK, blockSize.getInt(6));
            assertEquals(MAX_PAYLOAD, blockSize.getInt(10));
            assertEquals("disk", new String(infos.get(NbdProtocol.INFO_NAME).array(), 2, 4, StandardCharsets.UTF_8));
            assertTrue(infos.containsKey(NbdProtocol.INFO_DESCRIPTION));

            // INFO leaves the client in option haggling: GO on the empty name (the only export) then works.
            assertEquals(NbdProtocol.REP_ACK, last(client.go("")).type());
            assertEquals(SIZE, client.size);
            assertArrayEquals(fileRange(0, BLOCK), client.read(0, BLOCK).data());
        }
    }

    private static RawNbdClient.OptionReply last(final List<RawNbdClient.OptionReply> replies)
    {
        return replies.get(replies.size() - 1);
    }

    @Test
    void shouldRefuseUnknownExportUnsupportedAndMalformedOptionsThenAbort() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            assertEquals(NbdProtocol.REP_ERR_UNKNOWN, last(client.go("nope")).type());

            client.sendOption(NbdProtocol.OPT_STARTTLS, new byte[0]);
            assertEquals(NbdProtocol.REP_ERR_UNSUP, client.readOptionReply().type());
            client.sendOption(4242, new byte[] {1, 2, 3});
            assertEquals(NbdProtocol.REP_ERR_UNSUP, client.readOptionReply().type());

            final byte[] truncated = Arrays.copyOf(RawNbdClient.infoData("disk", NbdProtocol.INFO_NAME), 9);
            client.sendOption(NbdProtocol.OPT_GO, truncated);
            assertEquals(NbdProtocol.REP_ERR_INVALID, client.readOptionReply().type());
            client.sendOption(NbdProtocol.OPT_GO, new byte[] {0, 0});
            assertEquals(NbdProtocol.REP_ERR_INVALID, client.readOptionReply().type());

            client.sendOption(NbdProtocol.OPT_ABORT, new byte[0]);
            final RawNbdClient.OptionReply ack = client.readOptionReply();
            assertEquals(NbdProtocol.OPT_ABORT, ack.option());
            assertEquals(NbdProtocol.REP_ACK, ack.type());
            assertTrue(client.isClosedByServer());
        }
        assertEquals(0, server.protocolErrors());
    }

    /**
     * Structured replies, and the base:allocation metadata context over them: a READ is answered by one OFFSET_DATA
     * chunk (or an ERROR chunk), BLOCK_STATUS by the extents of holes and data, other commands by simple replies.
     * Contexts need structured replies first; BLOCK_STATUS needs the context, selected for the export served.
     */
    @Test
    void shouldDescribeHolesWithBlockStatusOverStructuredReplies() throws IOException
    {
        start();
        final Path sparse = dir.resolve("sparse.img");
        try (java.io.RandomAccessFile file = new java.io.RandomAccessFile(sparse.toFile(), "rw"))
        {
            file.setLength(SIZE);
            file.seek(3 * 4096);
            file.write(random(2 * 4096, 31));
        }
        final Volume sparseVolume = Volume.open(sparse, true);
        exports.add(new VolumeExport("sparse", sparseVolume, false));
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            assertEquals(NbdProtocol.REP_ERR_INVALID, last(client.metaContext(NbdProtocol.OPT_SET_META_CONTEXT,
                "sparse", NbdProtocol.CONTEXT_ALLOCATION)).type(), "contexts before structured replies");
            client.sendOption(NbdProtocol.OPT_STRUCTURED_REPLY, new byte[] {1});
            assertEquals(NbdProtocol.REP_ERR_INVALID, client.readOptionReply().type());
            client.sendOption(NbdProtocol.OPT_STRUCTURED_REPLY, new byte[0]);
            assertEquals(NbdProtocol.REP_ACK, client.readOptionReply().type());

            final List<RawNbdClient.OptionReply> listed =
                client.metaContext(NbdProtocol.OPT_LIST_META_CONTEXT, "sparse");
            assertEquals(2, listed.size());
            assertEquals(NbdProtocol.REP_META_CONTEXT, listed.get(0).type());
            assertEquals(NbdProtocol.CONTEXT_ALLOCATION, new String(listed.get(0).data(), 4,
                listed.get(0).data().length - 4, StandardCharsets.UTF_8));
            assertEquals(List.of(NbdProtocol.REP_ACK), client.metaContext(NbdProtocol.OPT_SET_META_CONTEXT,
                "sparse", "qemu:dirty-bitmap:x").stream().map(RawNbdClient.OptionReply::type).toList());
            assertEquals(NbdProtocol.REP_ERR_UNKNOWN, last(client.metaContext(NbdProtocol.OPT_SET_META_CONTEXT,
                "nope", NbdProtocol.CONTEXT_ALLOCATION)).type());
            final List<RawNbdClient.OptionReply> set = client.metaContext(NbdProtocol.OPT_SET_META_CONTEXT,
                "sparse", NbdProtocol.CONTEXT_ALLOCATION);
            assertEquals(NbdProtocol.REP_META_CONTEXT, set.get(0).type());
            assertEquals(NbdProtocol.CONTEXT_ALLOCATION_ID, set.get(0).buffer().getInt(0));
            assertEquals(NbdProtocol.REP_ACK, last(client.go("sparse")).type());

            client.sendRequest(NbdProtocol.CMD_BLOCK_STATUS, 0, 7, 0, 8 * 4096, null);
            RawNbdClient.Chunk chunk = client.readChunk();
            assertEquals(NbdProtocol.REPLY_TYPE_BLOCK_STATUS, chunk.type());
            assertEquals(NbdProtocol.REPLY_FLAG_DONE, chunk.flags());
            assertEquals(7, chunk.cookie());
            final int hole = NbdProtocol.STATE_HOLE | NbdProtocol.STATE_ZERO;
            assertEquals(List.of(NbdProtocol.CONTEXT_ALLOCATION_ID, 3 * 4096, hole, 2 * 4096, 0, 3 * 4096, hole),
                ints(chunk.payload()));
            client.sendRequest(NbdProtocol.CMD_BLOCK_STATUS, NbdProtocol.CMD_FLAG_REQ_ONE, 8, 4 * 4096, SIZE - 4 * 4096,
                null);
            assertEquals(List.of(NbdProtocol.CONTEXT_ALLOCATION_ID, 4096, 0), ints(client.readChunk().payload()));

            client.sendRequest(NbdProtocol.CMD_READ, 0, 9, 3 * 4096, 4096, null);
            chunk = client.readChunk();
            assertEquals(NbdProtocol.REPLY_TYPE_OFFSET_DATA, chunk.type());
            assertEquals(NbdProtocol.REPLY_FLAG_DONE, chunk.flags());
            assertEquals(3 * 4096L, chunk.buffer().getLong(0));
            assertArrayEquals(Arrays.copyOf(random(2 * 4096, 31), 4096), Arrays.copyOfRange(chunk.payload(), 8,
                8 + 4096));
            client.sendRequest(NbdProtocol.CMD_READ, 0, 10, SIZE, 4096, null);
            chunk = client.readChunk();
            assertEquals(NbdProtocol.REPLY_TYPE_ERROR, chunk.type());
            assertEquals(NbdProtocol.NBD_EINVAL, chunk.buffer().getInt(0));
            assertEquals(0, client.command(NbdProtocol.CMD_FLUSH, 0, 0, 0), "a simple reply to the rest");
        }
        try (RawNbdClient client = new RawNbdClient(socket).connect("sparse"))
        {
            // No context selected: no BLOCK_STATUS, and simple replies.
            assertEquals(NbdProtocol.NBD_EINVAL, client.command(NbdProtocol.CMD_BLOCK_STATUS, 0, 0, 4096));
        }
        finally
        {
            sparseVolume.close();
        }
    }

    private static List<Integer> ints(final byte[] bytes)
    {
        final ByteBuffer buffer = ByteBuffer.wrap(bytes);
        final List<Integer> ints = new java.util.ArrayList<>();
        while (buffer.hasRemaining())
        {
            ints.add(buffer.getInt());
        }
        return ints;
    }

    @Test
    void shouldServeThroughExportNameWithAndWithoutZeroes() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            client.sendOption(NbdProtocol.OPT_EXPORT_NAME, "disk".getBytes(StandardCharsets.UTF_8));
            final ByteBuffer reply = client.readExactly(10);
            assertEquals(SIZE, reply.getLong(0));
            assertEquals(NbdProtocol.FLAG_HAS_FLAGS, reply.getShort(8) & NbdProtocol.FLAG_HAS_FLAGS);
            assertArrayEquals(fileRange(BLOCK, 2 * BLOCK), client.read(BLOCK, 2 * BLOCK).data());
        }
        try (RawNbdClient client = new RawNbdClient(socket).handshake(NbdProtocol.FLAG_C_FIXED_NEWSTYLE))
        {
            client.sendOption(NbdProtocol.OPT_EXPORT_NAME, "disk".getBytes(StandardCharsets.UTF_8));
            final ByteBuffer reply = client.readExactly(134);
            assertEquals(SIZE, reply.getLong(0));
            for (int i = 10; i < 134; i++)
            {
                assertEquals(0, reply.get(i));
            }
            assertArrayEquals(fileRange(0, BLOCK), client.read(0, BLOCK).data());
        }
        try (RawNbdClient client = new RawNbdClient(socket).handshake())
        {
            client.sendOption(NbdProtocol.OPT_EXPORT_NAME, "nope".getBytes(StandardCharsets.UTF_8));
            assertTrue(client.isClosedByServer());
        }
    }

    /**
     * An export that records which thread ran each write and how many ran at once, and can hold each write.
     */
    static final class ThreadRecordingExport extends ForwardingExport
    {
        final java.util.Set<String> threads = java.util.concurrent.ConcurrentHashMap.newKeySet();
        final java.util.concurrent.atomic.AtomicInteger running = new java.util.concurrent.atomic.AtomicInteger();
        final java.util.concurrent.atomic.AtomicInteger mostAtOnce = new java.util.concurrent.atomic.AtomicInteger();
        /** Writes done and left to complete later, with their offsets, while {@link #defer} is set. */
        final java.util.concurrent.BlockingDeque<Map.Entry<Long, WriteCompletion>> deferred =
            new java.util.concurrent.LinkedBlockingDeque<>();
        /** Writes answered at once: through write(), as the reader runs a lone request. */
        final java.util.concurrent.atomic.AtomicInteger direct = new java.util.concurrent.atomic.AtomicInteger();
        volatile boolean defer;
        /**
         * While set, each write counts down and waits (1 s at most) until the latch is open: the first writes are
         * held until that many run at once, which a server running a burst one by one never reaches.
         */
        volatile java.util.concurrent.CountDownLatch holdUntilStarted;

        ThreadRecordingExport(final NbdExport delegate)
        {
            super(delegate);
        }

        @Override
        public void write(final long offset, final ByteBuffer src, final int length, final boolean fua)
            throws IOException
        {
            threads.add(Thread.currentThread().getName());
            mostAtOnce.accumulateAndGet(running.incrementAndGet(), Math::max);
            try
            {
                final java.util.concurrent.CountDownLatch hold = holdUntilStarted;
                if (hold != null)
                {
                    hold.countDown();
                    hold.await(1, java.util.concurrent.TimeUnit.SECONDS);
                }
                delegate.write(offset, src, length, fua);
                direct.incrementAndGet();
            }
            catch (final InterruptedException ex)
            {
                Thread.currentThread().interrupt();
                throw new IOException(ex);
            }
            finally
            {
                running.decrementAndGet();
            }
        }

        @Override
        public boolean writeDeferrable(final long offset, final ByteBuffer src, final int length, final boolean fua,
            final WriteCompletion completion) throws IOException
        {
            if (!defer)
            {
                write(offset, src, length, fua);
                return true;
            }
            threads.add(Thread.currentThread().getName());
            delegate.write(offset, src, length, fua);
            deferred.add(Map.entry(offset, completion));
            return false;
        }

        @Override
        public void flush() throws IOException
        {
            threads.add(Thread.currentThread().getName());
            delegate.flush();
        }
    }

    @Test
    void shouldRunALoneRequestOnTheReaderAndSpreadABurstOverWorkers() throws IOException, InterruptedException
    {
        file = dir.resolve("disk.img");
        Files.write(file, random(SIZE, 7));
        volume = Volume.open(file, true);
        final ThreadRecordingExport export = new ThreadRecordingExport(new VolumeExport("disk", volume, false));
        exports.add(export);
        socket = dir.resolve("nbd.sock");
        server = new NbdServer(exports, socket, null, 4, MAX_PAYLOAD, NbdServer.DEFAULT_IO_TIMEOUT_NS,
            System.getLogger("nbd-test"));
        server.start();
        final byte[] block = random(BLOCK, 21);
        final byte[] large = random(4 * BLOCK, 22);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            // Queue depth 1: each write arrives alone, so the reader runs it without waking a worker.
            for (int i = 0; i < 20; i++)
            {
                client.sendRequest(CMD_WRITE, 0, i, (long)i * BLOCK, BLOCK, block);
                assertEquals(0, client.readReply(0).error());
            }
            assertEquals(1, export.threads.size(), "threads that ran lone writes: " + export.threads);
            assertTrue(export.threads.iterator().next().endsWith("-reader"), "ran on " + export.threads);

            // A burst must still run concurrently on the workers, not one by one on the reader.
            export.threads.clear();
            export.holdUntilStarted = new java.util.concurrent.CountDownLatch(2);
            for (int i = 0; i < 8; i++)
            {
                client.sendRequest(CMD_WRITE, 0, 100 + i, (long)i * BLOCK, BLOCK, block);
            }
            for (int i = 0; i < 8; i++)
            {
                assertEquals(0, client.readReply(0).error());
            }
            assertTrue(export.mostAtOnce.get() >= 2, "a burst of 8 writes ran " + export.mostAtOnce.get() +
                " at a time on " + export.threads);

            // Back at queue depth 1, as fio --fsync=1 runs: a 16 KiB write whose payload reaches the socket after
            // its header (libnbd sends them apart), then a FLUSH. Both must run on the reader: a payload that came
            // late must not make the reader hand its request over.
            export.threads.clear();
            export.holdUntilStarted = null;
            for (int i = 0; i < 10; i++)
            {
                client.sendRequest(CMD_WRITE, 0, 200 + i, (long)i * large.length, large.length, null);
                awaitReaderWaitingForThePayload();
                client.write(ByteBuffer.wrap(large));
                assertEquals(0, client.readReply(0).error());
                assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));
            }
            assertEquals(1, export.threads.size(), "threads that ran lone writes and flushes: " + export.threads);
            assertTrue(export.threads.iterator().next().endsWith("-reader"), "ran on " + export.threads);
        }
        assertArrayEquals(large, fileRange(9L * large.length, large.length));
    }

    /**
     * A sync group's write is left to the group until the partner's ACK (NbdExport.writeDeferrable): its reply must
     * go out when, and only when, the export completes it, with the outcome it was given, whatever the order; and
     * a client that disconnects meanwhile still gets its in-flight writes answered first.
     */
    @Test
    void shouldAnswerDeferredWritesWhenTheExportCompletesThem() throws Exception
    {
        file = dir.resolve("disk.img");
        Files.write(file, random(SIZE, 7));
        volume = Volume.open(file, true);
        final ThreadRecordingExport export = new ThreadRecordingExport(new VolumeExport("disk", volume, false));
        export.defer = true;
        exports.add(export);
        socket = dir.resolve("nbd.sock");
        server = new NbdServer(exports, socket, null, 4, MAX_PAYLOAD, NbdServer.DEFAULT_IO_TIMEOUT_NS,
            System.getLogger("nbd-test"));
        server.start();
        final byte[] data = random(6 * BLOCK, 23);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            for (int i = 0; i < 4; i++)
            {
                client.sendRequest(CMD_WRITE, 0, i, (long)i * BLOCK, BLOCK,
                    Arrays.copyOfRange(data, i * BLOCK, (i + 1) * BLOCK));
            }
            awaitTrue("every write was executed", () -> export.deferred.size() + export.direct.get() == 4);
            assertTrue(export.deferred.size() >= 3, "a burst goes to the workers, which may defer: " +
                export.deferred.size() + " deferred");
            for (int i = 0; i < export.direct.get(); i++)
            {
                assertEquals(0, client.readReply(0).error(), "a lone write the reader ran is answered at once");
            }
            // Completed newest first, one at a time: each reply is the one just completed, so none left early.
            boolean first = true;
            while (!export.deferred.isEmpty())
            {
                final Map.Entry<Long, WriteCompletion> write = export.deferred.pollLast();
                write.getValue().complete(first ? NbdProtocol.NBD_EIO : 0);
                write.getValue().dispatch();
                final RawNbdClient.Reply reply = client.readReply(0);
                assertEquals(write.getKey() / BLOCK, reply.cookie());
                assertEquals(first ? NbdProtocol.NBD_EIO : 0, reply.error());
                first = false;
            }
            assertEquals(1, server.errors());

            // A disconnect while writes are deferred: they are answered once completed, then the server closes.
            // Counted before sending: the reader may run write 4 itself before write 5 arrives.
            final int answered = export.direct.get();
            client.sendRequest(CMD_WRITE, 0, 4, 4L * BLOCK, BLOCK, Arrays.copyOfRange(data, 4 * BLOCK, 5 * BLOCK));
            client.sendRequest(CMD_WRITE, 0, 5, 5L * BLOCK, BLOCK, Arrays.copyOfRange(data, 5 * BLOCK, 6 * BLOCK));
            client.sendRequest(CMD_DISC, 0, 99, 0, 0, null);
            awaitTrue("both writes were executed", () -> export.deferred.size() + export.direct.get() - answered == 2);
            for (final Map.Entry<Long, WriteCompletion> write : export.deferred)
            {
                write.getValue().complete(0);
            }
            // Completed as one batch: nothing goes out until it is dispatched, then both replies together. Either
            // write may have been the reader's own (a lone request, run at once and answered directly): both were
            // once in a run of the whole suite, which left nothing deferred to dispatch.
            if (!export.deferred.isEmpty())
            {
                export.deferred.peekFirst().getValue().dispatch();
            }
            for (int i = 0; i < 2; i++)
            {
                assertEquals(0, client.readReply(0).error());
            }
            assertTrue(client.isClosedByServer());
        }
        assertArrayEquals(data, fileRange(0, data.length));
    }

    /**
     * Waits until the connection's reader has taken a request header and blocks for its payload, as it does when a
     * real client's header and payload arrive apart.
     */
    private static void awaitReaderWaitingForThePayload() throws InterruptedException
    {
        awaitTrue("the reader waits for a payload", () -> Thread.getAllStackTraces().entrySet().stream()
            .filter(thread -> thread.getKey().getName().endsWith("-reader"))
            .anyMatch(thread -> Arrays.stream(thread.getValue())
                .anyMatch(frame -> "readPayload".equals(frame.getMethodName()))));
    }

    @Test
    void shouldRoundTripPipelinedWritesAndReadsOutOfOrder() throws IOException
    {
        start();
        final int requests = 64;
        final int length = 64 * 1024;
        final byte[] data = random(requests * length, 11);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertEquals(SIZE, client.size);
            for (int i = 0; i < requests; i++)
            {
                client.sendRequest(CMD_WRITE, 0, 1000 + i, (long)i * length, length,
                    Arrays.copyOfRange(data, i * length, (i + 1) * length));
            }
            final boolean[] seen = new boolean[requests];
            for (int i = 0; i < requests; i++)
            {
                final RawNbdClient.Reply reply = client.readReply(0);
                assertEquals(0, reply.error());
                final int index = (int)(reply.cookie() - 1000);
                assertFalse(seen[index], "one reply per cookie");
                seen[index] = true;
            }
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));

            for (int i = 0; i < requests; i++)
            {
                client.sendRequest(CMD_READ, 0, i, (long)i * length, length, null);
            }
            final byte[] back = new byte[requests * length];
            for (int i = 0; i < requests; i++)
            {
                final RawNbdClient.Reply reply = client.readReply(length);
                assertEquals(0, reply.error());
                System.arraycopy(reply.data(), 0, back, (int)reply.cookie() * length, length);
            }
            assertArrayEquals(data, back);
            assertArrayEquals(data, fileRange(0, data.length));
        }
        assertEquals(2L * requests * length, server.bytesRead() + server.bytesWritten());
        assertEquals(0, server.errors());
    }

    /**
     * A plain volume's pipelined READs and WRITEs go to the kernel through Linux AIO, submitted together, and come
     * back with the right data; only a request that arrives alone, with nothing in flight, runs on the reader.
     */
    @Test
    void shouldSubmitPipelinedReadsAndWritesToTheKernelTogether() throws IOException
    {
        start();
        final int requests = 8;
        final byte[] data = random(requests * BLOCK, 31);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            // One socket write for the whole burst, so that the server reads it in few reads.
            final ByteBuffer burst = ByteBuffer.allocate(requests * (NbdProtocol.REQUEST_LENGTH + BLOCK));
            for (int i = 0; i < requests; i++)
            {
                burst.putInt(NbdProtocol.REQUEST_MAGIC).putShort((short)0).putShort((short)CMD_WRITE).putLong(i)
                    .putLong((long)i * BLOCK).putInt(BLOCK).put(data, i * BLOCK, BLOCK);
            }
            client.write(burst.flip());
            for (int i = 0; i < requests; i++)
            {
                assertEquals(0, client.readReply(0).error());
            }
            for (int i = 0; i < requests; i++)
            {
                client.sendRequest(CMD_READ, 0, i, (long)i * BLOCK, BLOCK, null);
            }
            final byte[] back = new byte[requests * BLOCK];
            for (int i = 0; i < requests; i++)
            {
                final RawNbdClient.Reply reply = client.readReply(BLOCK);
                assertEquals(0, reply.error());
                System.arraycopy(reply.data(), 0, back, (int)reply.cookie() * BLOCK, BLOCK);
            }
            assertArrayEquals(data, back);
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));
            assertArrayEquals(data, fileRange(0, data.length));
        }
        // At most the first of each burst may have found the reader idle and alone; the rest went to the kernel.
        assertTrue(server.directRequests() >= 2L * requests - 2, server.directRequests() + " of " + 2 * requests +
            " requests submitted through AIO");
        assertTrue(server.directSubmissions() < server.directRequests(), server.directRequests() +
            " requests in " + server.directSubmissions() + " submissions");
        assertEquals(0, server.errors());
    }

    /**
     * A write the kernel fails through AIO is answered with the error (ENOSPC as ENOSPC, so that qemu pauses the
     * guest rather than failing its disk), counted, and the connection goes on serving.
     */
    @Test
    void shouldAnswerPipelinedWritesThatRunOutOfSpaceWithEnospc() throws Exception
    {
        final io.blockmover.SmallTmpfs small = io.blockmover.SmallTmpfs.mount(dir.resolve("small"), "64k");
        try
        {
            file = small.dir().resolve("thin.img");
            try (java.io.RandomAccessFile thin = new java.io.RandomAccessFile(file.toFile(), "rw"))
            {
                thin.setLength(SIZE); // Sparse: every new block needs space the file system does not have.
            }
            volume = Volume.open(file, true);
            exports.add(new VolumeExport("thin", volume, false));
            socket = dir.resolve("nbd.sock");
            server = new NbdServer(exports, socket, null, 4, MAX_PAYLOAD, NbdServer.DEFAULT_IO_TIMEOUT_NS,
                System.getLogger("nbd-test"));
            server.start();
            final int requests = 32;
            final byte[] block = random(BLOCK, 32);
            int refused = 0;
            int written = -1;
            try (RawNbdClient client = new RawNbdClient(socket).connect("thin"))
            {
                for (int i = 0; i < requests; i++)
                {
                    client.sendRequest(CMD_WRITE, 0, i, (long)i * BLOCK, BLOCK, block);
                }
                for (int i = 0; i < requests; i++)
                {
                    final RawNbdClient.Reply reply = client.readReply(0);
                    if (reply.error() == NBD_ENOSPC)
                    {
                        refused++;
                    }
                    else
                    {
                        assertEquals(0, reply.error(), "write " + reply.cookie());
                        written = (int)reply.cookie();
                    }
                }
                assertTrue(refused > 0, "a 64 KiB file system took " + requests + " 4 KiB writes");
                assertTrue(written >= 0, "not one write fit in 64 KiB");
                final RawNbdClient.Reply back = client.read((long)written * BLOCK, BLOCK);
                assertEquals(0, back.error());
                assertArrayEquals(block, back.data());
            }
            assertEquals(refused, server.errors());
            assertTrue(server.directRequests() > 0, "no write went through AIO");
        }
        finally
        {
            if (server != null)
            {
                server.close();
                server = null;
            }
            if (volume != null)
            {
                volume.close();
                volume = null;
            }
            small.close();
        }
    }

    /**
     * Replies are written by whichever thread holds the reply lock, for every thread that queued one meanwhile:
     * a reply queued as the holder lets go must still be written (the holder looks again after it lets go). Four
     * connections keep eight requests each in flight, WRITEs then READs of their own blocks, so replies race for
     * the socket all the time; a lost reply hangs a client (the class time-out fails it), a doubled one breaks the
     * cookie count, a mixed-up one the data.
     */
    @Test
    void shouldAnswerEveryRequestOnceWhileRepliesRaceForTheSocket() throws Exception
    {
        start();
        final int clients = 4;
        final int block = 4096;
        final int blocks = SIZE / clients / block;
        final int rounds = 3;
        final int window = 8;
        final java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(clients);
        try
        {
            final List<java.util.concurrent.Future<Void>> done = new java.util.ArrayList<>();
            for (int c = 0; c < clients; c++)
            {
                final int client = c;
                done.add(pool.submit(() ->
                {
                    final long base = (long)client * blocks * block;
                    try (RawNbdClient nbd = new RawNbdClient(socket).connect("disk"))
                    {
                        for (int round = 0; round < rounds; round++)
                        {
                            final byte[] data = random(blocks * block, 100L * client + round);
                            final int[] replies = new int[blocks];
                            int sent = 0;
                            for (int received = 0; received < blocks; received++)
                            {
                                while (sent < blocks && sent - received < window)
                                {
                                    nbd.sendRequest(CMD_WRITE, 0, sent, base + (long)sent * block, block,
                                        Arrays.copyOfRange(data, sent * block, (sent + 1) * block));
                                    sent++;
                                }
                                final RawNbdClient.Reply reply = nbd.readReply(0);
                                assertEquals(0, reply.error());
                                replies[(int)reply.cookie()]++;
                            }
                            sent = 0;
                            for (int received = 0; received < blocks; received++)
                            {
                                while (sent < blocks && sent - received < window)
                                {
                                    nbd.sendRequest(CMD_READ, 0, sent, base + (long)sent * block, block, null);
                                    sent++;
                                }
                                final RawNbdClient.Reply reply = nbd.readReply(block);
                                assertEquals(0, reply.error());
                                final int index = (int)reply.cookie();
                                replies[index]++;
                                assertArrayEquals(Arrays.copyOfRange(data, index * block, (index + 1) * block),
                                    reply.data(), "block " + index + " of client " + client);
                            }
                            for (int i = 0; i < blocks; i++)
                            {
                                assertEquals(2, replies[i], "one reply per request, block " + i);
                            }
                        }
                    }
                    return null;
                }));
            }
            for (final java.util.concurrent.Future<Void> future : done)
            {
                future.get();
            }
        }
        finally
        {
            pool.shutdownNow();
        }
        assertEquals(0, server.errors());
    }

    @Test
    void shouldFlushTrimWriteZeroesAndHonourFua() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            final byte[] data = random(8 * BLOCK, 13);
            assertEquals(0, client.write(0, data, CMD_FLAG_FUA));
            assertArrayEquals(data, fileRange(0, data.length));

            assertEquals(0, client.command(CMD_WRITE_ZEROES, 0, BLOCK, 2 * BLOCK));
            assertEquals(0, client.command(CMD_WRITE_ZEROES, CMD_FLAG_FUA | CMD_FLAG_NO_HOLE, 5 * BLOCK, BLOCK));
            // Longer than the zero buffer and than max payload: no payload, so allowed.
            assertEquals(0, client.command(CMD_WRITE_ZEROES, 0, 2 * 1024 * 1024, 3 * 1024 * 1024));
            assertEquals(0, client.command(CMD_TRIM, 0, 6 * BLOCK, BLOCK));
            assertEquals(0, client.command(CMD_TRIM, CMD_FLAG_FUA, 7 * BLOCK, BLOCK));
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));

            final byte[] expected = data.clone();
            Arrays.fill(expected, BLOCK, 3 * BLOCK, (byte)0);
            Arrays.fill(expected, 5 * BLOCK, 6 * BLOCK, (byte)0);
            // Trim is advisory: the trimmed blocks keep their bytes.
            assertArrayEquals(expected, client.read(0, 8 * BLOCK).data());
            assertArrayEquals(expected, fileRange(0, 8 * BLOCK));
            assertArrayEquals(new byte[3 * 1024 * 1024], fileRange(2 * 1024 * 1024, 3 * 1024 * 1024));
        }
    }

    /**
     * On a volume that deallocates (a file with a hole, made sparse), a TRIM gives its blocks back and a
     * WRITE_ZEROES that may leave a hole (no NO_HOLE) deallocates its blocks; one with NO_HOLE is written. Either
     * way the zeroed ranges read as zeros.
     */
    @Test
    void shouldDeallocateTrimmedBlocksAndZeroesThatMayBeHolesOnASparseVolume() throws IOException
    {
        start(NbdServer.DEFAULT_IO_TIMEOUT_NS, SIZE / 2);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertEquals(0, client.command(CMD_TRIM, 0, BLOCK, 3 * BLOCK));
            assertEquals(0, client.command(CMD_WRITE_ZEROES, 0, 8 * BLOCK, 4 * BLOCK));
            assertEquals(0, client.command(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 16 * BLOCK, 4 * BLOCK));
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));

            final byte[] expected = random(SIZE / 2, 7);
            Arrays.fill(expected, 8 * BLOCK, 12 * BLOCK, (byte)0);
            Arrays.fill(expected, 16 * BLOCK, 20 * BLOCK, (byte)0);
            assertArrayEquals(Arrays.copyOf(expected, BLOCK), fileRange(0, BLOCK));
            assertArrayEquals(new byte[3 * BLOCK], fileRange(BLOCK, 3 * BLOCK));
            assertArrayEquals(Arrays.copyOfRange(expected, 4 * BLOCK, 24 * BLOCK), fileRange(4 * BLOCK, 20 * BLOCK));
        }
        final List<Long> holes = io.blockmover.FileHoles.starts(file, SIZE / 2);
        assertEquals(List.of((long)BLOCK, 8L * BLOCK), holes, "the trimmed blocks and the zeroes that may be holes");
    }

    @Test
    void shouldRejectOutOfRangeRequestsAndChangeNothing() throws IOException
    {
        start();
        final byte[] before = Files.readAllBytes(file);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertEquals(NBD_EINVAL, client.read(SIZE, BLOCK).error());
            assertEquals(NBD_EINVAL, client.read(SIZE - BLOCK, 2 * BLOCK).error());
            assertEquals(NBD_EINVAL, client.read(-BLOCK, BLOCK).error());
            // The protocol: ENOSPC for a write past the end, EINVAL for a read or trim past it.
            assertEquals(NBD_ENOSPC, client.write(SIZE - BLOCK, random(2 * BLOCK, 1), 0));
            assertEquals(NBD_ENOSPC, client.write(Long.MAX_VALUE - BLOCK + 1, random(BLOCK, 1), 0));
            assertEquals(NBD_ENOSPC, client.command(CMD_WRITE_ZEROES, 0, SIZE - BLOCK, 2 * BLOCK));
            assertEquals(NBD_EINVAL, client.command(CMD_TRIM, 0, SIZE, BLOCK));
            // The refused payloads were skipped: the stream is still in step.
            assertArrayEquals(fileRange(SIZE - BLOCK, BLOCK), client.read(SIZE - BLOCK, BLOCK).data());
        }
        assertArrayEquals(before, Files.readAllBytes(file));
        assertEquals(7, server.errors());
    }

    @Test
    void shouldRejectMisalignedOffsetAndLength() throws IOException
    {
        start();
        final byte[] before = Files.readAllBytes(file);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertEquals(BLOCK, client.minimumBlock);
            assertEquals(NBD_EINVAL, client.read(512, BLOCK).error());
            assertEquals(NBD_EINVAL, client.read(0, 512).error());
            assertEquals(NBD_EINVAL, client.write(512, random(BLOCK, 2), 0));
            assertEquals(NBD_EINVAL, client.write(0, random(BLOCK + 512, 2), 0));
            assertEquals(NBD_EINVAL, client.command(CMD_WRITE_ZEROES, 0, 0, 512));
            assertEquals(0, client.read(0, BLOCK).error());
        }
        assertArrayEquals(before, Files.readAllBytes(file));
    }

    @Test
    void shouldAcceptShortTailOnlyWhereItEndsTheExport() throws IOException
    {
        start();
        final int oddSize = 3 * BLOCK + 512;
        final Path oddFile = dir.resolve("odd.img");
        Files.write(oddFile, random(oddSize, 3));
        try (Volume odd = Volume.open(oddFile, true))
        {
            exports.add(new VolumeExport("odd", odd, false));
            try (RawNbdClient client = new RawNbdClient(socket).connect("odd"))
            {
                assertEquals(oddSize, client.size);
                final byte[] data = random(BLOCK + 512, 4);
                assertEquals(0, client.write(2 * BLOCK, data, CMD_FLAG_FUA));
                assertArrayEquals(data, client.read(2 * BLOCK, BLOCK + 512).data());
                assertEquals(NBD_EINVAL, client.read(BLOCK, 512).error());
                assertEquals(0, client.command(CMD_WRITE_ZEROES, 0, 3 * BLOCK, 512));
                assertArrayEquals(new byte[512], client.read(3 * BLOCK, 512).data());
            }
        }
    }

    @Test
    void shouldRefuseWritesToReadOnlyExport() throws IOException
    {
        start();
        addReadOnlyExport(4 * BLOCK);
        try (RawNbdClient client = new RawNbdClient(socket).connect("ro"))
        {
            assertEquals(NbdProtocol.FLAG_READ_ONLY, client.transmissionFlags & NbdProtocol.FLAG_READ_ONLY);
            assertEquals(NBD_EPERM, client.write(0, random(BLOCK, 5), 0));
            assertEquals(NBD_EPERM, client.command(CMD_TRIM, 0, 0, BLOCK));
            assertEquals(NBD_EPERM, client.command(CMD_WRITE_ZEROES, 0, 0, BLOCK));
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));
            assertArrayEquals(Arrays.copyOf(random(4 * BLOCK, 9), BLOCK), client.read(0, BLOCK).data());
        }
        assertArrayEquals(random(4 * BLOCK, 9), Files.readAllBytes(dir.resolve("ro.img")));
    }

    @Test
    void shouldRejectUnknownCommandZeroLengthAndOversizedRequests() throws IOException
    {
        start();
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertEquals(NBD_EINVAL, client.command(99, 0, 0, BLOCK));
            assertEquals(NBD_EINVAL, client.command(5, 0, 0, BLOCK));
            assertEquals(NBD_EINVAL, client.read(0, 0).error());
            assertEquals(NBD_EINVAL, client.read(0, MAX_PAYLOAD + BLOCK).error());
            // Larger than a slot's buffer: the payload is read and thrown away in pieces, the stream stays in step.
            assertEquals(NBD_EINVAL, client.write(0, random(2 * MAX_PAYLOAD + BLOCK, 6), 0));
            assertArrayEquals(fileRange(0, BLOCK), client.read(0, BLOCK).data());

            // Beyond the discard limit the server replies, then hangs up.
            client.sendRequest(CMD_WRITE, 0, 77, 0, NbdConnection.MAX_DISCARD_LENGTH + BLOCK, null);
            final RawNbdClient.Reply reply = client.readReply(0);
            assertEquals(77, reply.cookie());
            assertEquals(NBD_EINVAL, reply.error());
            assertTrue(client.isClosedByServer());
        }
    }

    @Test
    void shouldCloseOnlyTheConnectionThatSendsBadMagic() throws Exception
    {
        start();
        try (RawNbdClient good = new RawNbdClient(socket).connect("disk");
            RawNbdClient bad = new RawNbdClient(socket).connect("disk"))
        {
            final byte[] garbage = random(NbdProtocol.REQUEST_LENGTH, 8);
            bad.write(ByteBuffer.wrap(garbage));
            assertTrue(bad.isClosedByServer());
            assertArrayEquals(fileRange(0, BLOCK), good.read(0, BLOCK).data());
            awaitTrue("the bad connection is gone", () -> server.connections() == 1);
        }
        assertEquals(1, server.protocolErrors());
    }

    @Test
    void shouldSurviveClientThatDisconnectsMidPayload() throws Exception
    {
        start();
        final byte[] before = Files.readAllBytes(file);
        try (RawNbdClient good = new RawNbdClient(socket).connect("disk"))
        {
            try (RawNbdClient quitter = new RawNbdClient(socket).connect("disk"))
            {
                final ByteBuffer partial = ByteBuffer.allocate(NbdProtocol.REQUEST_LENGTH + 1000);
                partial.putInt(NbdProtocol.REQUEST_MAGIC).putShort((short)0).putShort((short)CMD_WRITE).putLong(1)
                    .putLong(0).putInt(MAX_PAYLOAD).put(random(1000, 1)).flip();
                quitter.write(partial);
            }
            awaitTrue("the quitter's connection is gone", () -> server.connections() == 1);
            assertArrayEquals(fileRange(0, BLOCK), good.read(0, BLOCK).data());
        }
        assertArrayEquals(before, Files.readAllBytes(file));
    }

    @Test
    void shouldFinishInFlightRequestsBeforeDisconnecting() throws IOException
    {
        start();
        final int requests = 16;
        final byte[] data = random(requests * BLOCK, 12);
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            for (int i = 0; i < requests; i++)
            {
                client.sendRequest(CMD_WRITE, 0, i, (long)i * BLOCK, BLOCK,
                    Arrays.copyOfRange(data, i * BLOCK, (i + 1) * BLOCK));
            }
            client.sendRequest(CMD_DISC, 0, 99, 0, 0, null);
            for (int i = 0; i < requests; i++)
            {
                assertEquals(0, client.readReply(0).error());
            }
            assertTrue(client.isClosedByServer());
        }
        assertArrayEquals(data, fileRange(0, data.length));
    }

    @Test
    void shouldCutOffClientThatStopsReadingRepliesWithoutHurtingOthers() throws Exception
    {
        start(TimeUnit.MILLISECONDS.toNanos(500));
        try (RawNbdClient stuck = new RawNbdClient(socket).connect("disk");
            RawNbdClient good = new RawNbdClient(socket).connect("disk"))
        {
            // Far more reply data than the socket buffers hold, and never read.
            for (int i = 0; i < 64; i++)
            {
                stuck.sendRequest(CMD_READ, 0, i, 0, MAX_PAYLOAD, null);
            }
            assertArrayEquals(fileRange(0, BLOCK), good.read(0, BLOCK).data());
            awaitTrue("the watchdog cuts the stuck client off", () -> server.timeouts() == 1);
            awaitTrue("the stuck connection is gone", () -> server.connections() == 1);
            assertArrayEquals(fileRange(BLOCK, BLOCK), good.read(BLOCK, BLOCK).data());
        }
    }

    @Test
    void shouldCutOffClientThatStallsInTheHandshake() throws Exception
    {
        start(TimeUnit.MILLISECONDS.toNanos(300));
        try (RawNbdClient silent = new RawNbdClient(socket))
        {
            awaitTrue("the watchdog cuts the silent client off", () -> server.timeouts() == 1);
            silent.readExactly(18);
            assertTrue(silent.isClosedByServer());
        }
    }

    @Test
    void shouldReplaceStaleSocketAndRefuseSecondLiveServer() throws IOException
    {
        start();
        final NbdServer second = new NbdServer(exports, socket, null, 1, MAX_PAYLOAD, System.getLogger("nbd-test"));
        final BlockmoverException ex = assertThrows(BlockmoverException.class, second::start);
        assertTrue(ex.getMessage().contains("already listening"), ex.getMessage());

        server.close();
        assertFalse(Files.exists(socket));
        Files.createFile(socket); // A leftover that nobody listens on.
        server = new NbdServer(exports, socket, null, 2, MAX_PAYLOAD, System.getLogger("nbd-test"));
        server.start();
        try (RawNbdClient client = new RawNbdClient(socket).connect("disk"))
        {
            assertArrayEquals(fileRange(0, BLOCK), client.read(0, BLOCK).data());
        }
    }

    @Test
    void shouldServeOverTcp() throws IOException
    {
        start();
        try (NbdServer tcp = new NbdServer(exports, null, new InetSocketAddress("127.0.0.1", 0), 2,
            MAX_PAYLOAD, System.getLogger("nbd-test")))
        {
            tcp.start();
            try (SocketChannel channel = SocketChannel.open(tcp.tcpAddress()))
            {
                final ByteBuffer hello = ByteBuffer.allocate(18);
                while (hello.hasRemaining())
                {
                    assertTrue(channel.read(hello) > 0);
                }
                assertEquals(NbdProtocol.NBDMAGIC, hello.getLong(0));
            }
        }
        assertNull(server.tcpAddress());
    }
}
