package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.group.TestSourceGroups;
import io.blockmover.replication.log.RecordLog;

import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLUSH;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_READ;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A replicated volume served over NBD, its pipelined READs and WRITEs submitted through Linux AIO: the group logs
 * each write on the connection's reader before its volume write is submitted and finishes it on the reaper. A real
 * group (real O_DIRECT volume, real record log) behind a real server, driven by a raw client; the partner is absent
 * (async).
 */
@Timeout(60)
class NbdReplicatedExportTest
{
    private static final int BLOCK = 4096;
    private static final int REGION = 64 * 1024;
    private static final long VOLUME_SIZE = 4L * 1024 * 1024;

    @TempDir
    Path dir;

    private SourceGroup group;
    private NbdServer server;

    @AfterEach
    void stop()
    {
        if (server != null)
        {
            server.close();
        }
        if (group != null)
        {
            group.close();
        }
    }

    private RawNbdClient serve(final long logSize) throws IOException
    {
        group = TestSourceGroups.openAsync(dir, dir.resolve("volume.img"), VOLUME_SIZE, logSize, REGION);
        final ExportRegistry exports = new ExportRegistry();
        exports.add(group.export(0));
        final Path socket = dir.resolve("nbd.sock");
        server = new NbdServer(exports, socket, null, 8, 1024 * 1024, System.getLogger("nbd-test"));
        server.start();
        return new RawNbdClient(socket).connect("g/volume.img");
    }

    private static byte[] block(final int seed)
    {
        final byte[] b = new byte[BLOCK];
        for (int i = 0; i < BLOCK; i++)
        {
            b[i] = (byte)(seed * 31 + i);
        }
        return b;
    }

    /**
     * @param writes (offset, seed) pairs, sent in one socket write so that the server reads them in as few reads.
     */
    private static void sendBurst(final RawNbdClient client, final long cookieBase, final long[][] writes)
        throws IOException
    {
        final ByteBuffer burst = ByteBuffer.allocate(writes.length * (NbdProtocol.REQUEST_LENGTH + BLOCK));
        for (int i = 0; i < writes.length; i++)
        {
            burst.putInt(NbdProtocol.REQUEST_MAGIC).putShort((short)0).putShort((short)CMD_WRITE)
                .putLong(cookieBase + i).putLong(writes[i][0]).putInt(BLOCK).put(block((int)writes[i][1]));
        }
        client.write(burst.flip());
    }

    private byte[] volumeRange(final long offset, final int length) throws IOException
    {
        final byte[] all = Files.readAllBytes(dir.resolve("volume.img"));
        return Arrays.copyOfRange(all, (int)offset, (int)offset + length);
    }

    /**
     * Writes to one region must reach the volume in LSN order: a write that finds another to its region still in
     * flight waits for it. Here every write of a burst overlaps the one before it in a region, and the ones before
     * it may be queued on the reader, not yet submitted: the reader must submit them before it waits, or it waits
     * for ever (the class time-out fails it).
     */
    @Test
    void shouldLogOverlappingPipelinedWritesInOrderAndLeaveTheLastOnTheVolume() throws IOException
    {
        final int writes = 16;
        try (RawNbdClient client = serve(8L << 20))
        {
            final long[][] burst = new long[writes][];
            for (int i = 0; i < writes; i++)
            {
                burst[i] = new long[] {(long)(i % 4) * BLOCK, i}; // Four blocks of region 0, each written 4 times.
            }
            sendBurst(client, 0, burst);
            for (int i = 0; i < writes; i++)
            {
                assertEquals(0, client.readReply(0).error());
            }
            assertEquals(0, client.command(CMD_FLUSH, 0, 0, 0));
            // Pipelined READs go through AIO too, the group holding its volume open meanwhile.
            for (int b = 0; b < 4; b++)
            {
                client.sendRequest(CMD_READ, 0, 100 + b, (long)b * BLOCK, BLOCK, null);
            }
            for (int b = 0; b < 4; b++)
            {
                final RawNbdClient.Reply reply = client.readReply(BLOCK);
                assertEquals(0, reply.error());
                assertArrayEquals(block(12 + (int)reply.cookie() - 100), reply.data(), "block " + reply.cookie());
            }
        }
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        for (int i = 0; i < writes; i++)
        {
            assertTrue(cursor.next(), "LSN " + (i + 1) + " is in the log");
            assertEquals(i + 1, cursor.lsn(), "records in the order the client sent them");
            assertEquals((long)(i % 4) * BLOCK, cursor.offset());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + (i + 1) + " flagged written");
            final byte[] payload = new byte[BLOCK];
            cursor.payload().slice().get(payload);
            assertArrayEquals(block(i), payload, "LSN " + (i + 1));
        }
        assertFalse(cursor.next());
        for (int b = 0; b < 4; b++)
        {
            assertArrayEquals(block(12 + b), volumeRange((long)b * BLOCK, BLOCK),
                "block " + b + " holds its last write");
        }
        // At most the first of each burst may have found the reader idle and run on it.
        assertTrue(server.directRequests() >= writes - 1 + 3, server.directRequests() + " of " + writes +
            " writes and 4 reads submitted through AIO");
        assertFalse(group.hasWritesInFlight());
    }

    /**
     * A log resize waits, holding the append lock, for every write in flight to end; a reader blocked at that lock
     * may hold appended writes it has not submitted yet. The resize lets go after a while so that the reader gets
     * in and submits them; otherwise each waits for the other for ever. Every write must then be in the new log, in
     * LSN order, flagged written, with the volume's bytes.
     */
    @Test
    void shouldLoseNoPipelinedWriteThatRacesAReplacementOfTheLog() throws Exception
    {
        final int bursts = 60;
        final int perBurst = 12;
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        try (RawNbdClient client = serve(8L << 20))
        {
            final Thread writer = new Thread(() ->
            {
                try
                {
                    for (int b = 0; b < bursts; b++)
                    {
                        final long[][] burst = new long[perBurst][];
                        for (int i = 0; i < perBurst; i++)
                        {
                            final int n = b * perBurst + i;
                            burst[i] = new long[] {(long)(n % (VOLUME_SIZE / BLOCK)) * BLOCK, n};
                        }
                        sendBurst(client, (long)b * perBurst, burst);
                        for (int i = 0; i < perBurst; i++)
                        {
                            assertEquals(0, client.readReply(0).error());
                        }
                    }
                }
                catch (final Throwable t)
                {
                    failure.set(t);
                }
            });
            writer.start();
            int replaced = 0;
            while (replaced < 6 && writer.isAlive())
            {
                final RecordLog next = RecordLog.open(dir.resolve("log.resize"),
                    replaced % 2 == 0 ? 16L << 20 : 8L << 20, REGION);
                long resumeAt = group.startLogCopy(next);
                for (int pass = 0; resumeAt >= 0 && pass < 16 && !group.isLogCopyNearlyDone(resumeAt); pass++)
                {
                    resumeAt = group.continueLogCopy(next, resumeAt, Long.MAX_VALUE);
                }
                assertTrue(resumeAt >= 0 &&
                    group.finishLogCopy(next, resumeAt, dir.resolve("log"), RecordLog::closeReplaced) >= 0);
                replaced++;
            }
            writer.join(TimeUnit.SECONDS.toMillis(30));
            assertNull(failure.get());
            assertTrue(replaced >= 2, "the log was replaced while writes went on: " + replaced);
        }
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        final byte[] volume = Files.readAllBytes(dir.resolve("volume.img"));
        for (long lsn = 1; lsn <= bursts * perBurst; lsn++)
        {
            assertTrue(cursor.next(), "LSN " + lsn + " is in the log");
            assertEquals(lsn, cursor.lsn());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + lsn + " flagged");
            assertTrue(cursor.verifyPayload());
            final byte[] payload = new byte[BLOCK];
            cursor.payload().slice().get(payload);
            assertArrayEquals(block((int)lsn - 1), payload, "LSN " + lsn);
            assertArrayEquals(Arrays.copyOfRange(volume, (int)cursor.offset(), (int)cursor.offset() + BLOCK), payload,
                "LSN " + lsn + " on the volume");
        }
        assertFalse(cursor.next());
        assertTrue(server.directRequests() > bursts * perBurst / 2, server.directRequests() + " of " +
            bursts * perBurst + " writes submitted through AIO");
    }
}
