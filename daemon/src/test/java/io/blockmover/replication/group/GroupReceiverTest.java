package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import java.util.zip.CRC32C;

import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.RecordLogDescriptor;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.transport.NullFrameConnection;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The destination's receiver and its log forcer, driven duty cycle by duty cycle over a connection that hands over
 * scripted RECORD frames, on a real log and volume.
 */
class GroupReceiverTest
{
    private static final int SIZE = 4 * 1024 * 1024;
    private static final int MIB = 1024 * 1024;
    private static final int SESSION = 7;

    @TempDir
    Path dir;

    private final long[] nowNs = {0};
    private final Scripted connection = new Scripted();
    private RecordLog log;
    private DestinationGroup group;

    @BeforeEach
    void open() throws IOException
    {
        final Path file = dir.resolve("volume");
        Files.write(file, new byte[SIZE]);
        log = RecordLog.open(dir.resolve("log"), 16L * MIB, MIB);
        log.reset(1);
        final GroupConfig config = new GroupConfig("g", GroupConfig.ROLE_DESTINATION, "site-a", GroupMode.SYNC, false,
            List.of(new GroupConfig.VolumePair("/src", file.toString(), SIZE)), 16L * MIB, MIB, 0);
        group = new DestinationGroup(config, new Volume[] {Volume.open(file, true)}, log, () -> nowNs[0], MIB,
            1_000_000L, new DurableConsistency(dir));
    }

    @AfterEach
    void close()
    {
        group.close();
    }

    /**
     * A sync partner forces after every batch. A large batch (1 MiB writes) is forced on the forcer's thread, so
     * records that arrive meanwhile are still acknowledged; the DURABLE follows once the forcer is done. Forced on
     * the receiver's own thread, a 1 MiB batch held up every record behind it for the whole force: 6 ms at the
     * median and 94 ms at p99 with both test hosts on one disk. A small batch is still forced on the receiver's
     * thread when the forcer is idle: at queue depth 1 a hand-over would put two wake-ups on a FLUSH's path.
     */
    @Test
    void shouldAcknowledgeRecordsWhileTheForcerForcesALargeBatch()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn()); // Not started: the test runs its duty cycles.
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);

        connection.record(1, 0, MIB);
        receiver.doWork();
        assertEquals(List.of("ACK 1"), connection.sent, "a 1 MiB batch is the forcer's");

        connection.record(2, MIB, MIB);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "ACK 2"), connection.sent, "acknowledged while the force is pending");

        forcer.doWork();
        receiver.doWork();
        assertEquals(List.of("ACK 1", "ACK 2", "DURABLE 2"), connection.sent, "one force for both (group commit)");
        assertEquals(0, forcer.doWork(), "nothing more to force");

        connection.record(3, 2 * MIB, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "ACK 2", "DURABLE 2", "ACK 3", "DURABLE 3"), connection.sent,
            "a small batch is forced on the receiver's thread at once");
        assertEquals(0, forcer.doWork());
    }

    /**
     * Small batches are forced on the receiver's thread only while nothing streams in: at 4k and queue depth 16,
     * records queued behind each inline force waited for it before their ACK (the partner's ACK at 1.2 ms p50
     * against a 0.4 ms local write). Once records arrive during a force, forces go to the forcer until one ends
     * with nothing new, and queue depth 1 gets its inline force back.
     */
    @Test
    void shouldHandSmallForcesToTheForcerWhileRecordsStreamIn()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);

        connection.record(1, 0, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1"), connection.sent, "alone: forced inline");

        connection.record(2, 4096, 4096); // Arrived during that force.
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1", "ACK 2"), connection.sent, "streaming: the forcer's");
        connection.record(3, 8192, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1", "ACK 2", "ACK 3"), connection.sent,
            "acknowledged while the force is pending");

        forcer.doWork();
        receiver.doWork();
        assertEquals("DURABLE 3", connection.sent.get(connection.sent.size() - 1));
        connection.sent.clear();

        connection.record(4, 12288, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 4", "DURABLE 4"), connection.sent, "nothing came during the last force: inline");
        receiver.doWork();
        connection.record(5, 16384, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 4", "DURABLE 4", "ACK 5", "DURABLE 5"), connection.sent,
            "a duty cycle that found nothing after the force keeps the next one inline");
    }

    /**
     * A sync partner starts writing the records it logged to the disk before it acknowledges them, then forces:
     * the pages' write overlaps the ACK's send instead of following it. Measured at 4k QD1 with a FLUSH after each
     * write: the partner's log force p50 fell from 135-177 us to 96-103 us, the source's FLUSH p50 from 134-159 us
     * to 94-119 us.
     */
    @Test
    void shouldStartWritingTheRecordsOutBeforeAcknowledgingThem()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);
        connection.probe = log::writeBehindBytes;

        connection.record(1, 0, 4096);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1"), connection.sent);
        assertEquals(RecordLogDescriptor.RECORD_HEADER_LENGTH + 4096L, connection.probed.get(0),
            "bytes on their way to the disk when the ACK was sent");
    }

    /**
     * A source that marks the records its clients' FLUSHes may soon wait for (it offered "flush_hints") gets a sync
     * partner that forces after every batch only while such records come. Meanwhile records stream to the disk and
     * are forced when a FLUSH asks, at flush.interval, or every quarter of the log. Forcing after every batch with no
     * FLUSH to wait for held a sync group at queue depth 16 at 0.49-0.51 of an unreplicated export on a shared
     * disk, against 0.61-0.65 without.
     */
    @Test
    void shouldForceAfterEveryBatchOnlyWhileTheSourcesClientsFlush()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);
        receiver.followFlushHints();

        connection.record(1, 0, 4096, 0);
        receiver.doWork();
        receiver.doWork();
        assertEquals(List.of("ACK 1"), connection.sent, "no FLUSH in sight: acknowledged, not forced");

        connection.frame(new FrameHeader().reset(FrameType.FLUSH).sessionId(SESSION).sequence(1).seal());
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1"), connection.sent, "forced when a FLUSH asks");
        receiver.doWork(); // Nothing came during that force: the next small batch is forced inline.

        connection.record(2, 4096, 4096, RecordFlags.FLUSHING);
        receiver.doWork();
        assertEquals(List.of("ACK 1", "DURABLE 1", "ACK 2", "DURABLE 2"), connection.sent,
            "clients flush: forced after the batch, unasked");

        connection.record(3, 8192, 4096, 0);
        receiver.doWork();
        receiver.doWork();
        assertEquals("ACK 3", connection.sent.get(connection.sent.size() - 1), "they stopped: not forced");
        nowNs[0] += 1_000_000L;
        receiver.doWork();
        forcer.doWork(); // Record 3 came straight after a force: the forcer's.
        receiver.doWork();
        assertEquals("DURABLE 3", connection.sent.get(connection.sent.size() - 1), "forced at flush.interval");
    }

    /**
     * Forced at least every quarter of the log, whatever flush.bytes says: the source gives its log's space back
     * only on DURABLE, and a fast stream would otherwise fill it between two forces at flush.interval (both sides'
     * logs have one size), and the source would fall back to tracking regions.
     */
    @Test
    void shouldForceAtLeastEveryQuarterOfTheLog()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, 1L << 40, Long.MAX_VALUE / 2, counter(), counter(), forcer);
        receiver.followFlushHints();

        for (int lsn = 1; lsn <= 3; lsn++)
        {
            connection.record(lsn, (lsn - 1L) * MIB, MIB, 0);
            receiver.doWork();
            receiver.doWork();
        }
        assertEquals(List.of("ACK 1", "ACK 2", "ACK 3"), connection.sent, "3 MiB of a 16 MiB log: not forced");
        connection.record(4, 3L * MIB, MIB, 0);
        receiver.doWork();
        receiver.doWork();
        forcer.doWork();
        receiver.doWork();
        assertEquals(List.of("ACK 1", "ACK 2", "ACK 3", "ACK 4", "DURABLE 4"), connection.sent, "a quarter: forced");
    }

    /**
     * The source says how far ahead it is (PROGRESS, about once a heartbeat interval); the destination keeps the
     * last report, aging, for group status and for what a failover would lose once the source is gone.
     */
    @Test
    void shouldKeepWhatTheSourceLastSaidAboutHowFarAheadItIs()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);
        assertNull(group.sourceReport().describe(log.tailLsn(), System.currentTimeMillis()), "nothing heard yet");

        connection.record(1, 0, 4096);
        connection.frame(new FrameHeader().reset(FrameType.PROGRESS).sessionId(SESSION).sequence(5).offset(20_480)
            .aux(1_500).volumeId(2).seal());
        receiver.doWork();
        final long receivedMs = System.currentTimeMillis();

        final Map<String, Object> report = group.sourceReport().describe(log.tailLsn(), receivedMs + 2_000);
        assertEquals(5L, report.get("lsn"));
        assertEquals(4L, report.get("records_behind"), "LSN 1 is here, 2 to 5 are not");
        assertEquals(20_480L, report.get("rpo_bytes"));
        assertEquals(1.5, report.get("rpo_seconds"));
        assertEquals(2L, report.get("dirty_regions"));
        assertTrue(((Double)report.get("seconds_ago")) >= 2.0, report.toString());
        // Records that arrive after the report are held: never counted as behind below zero.
        assertEquals(0L, group.sourceReport().describe(9, receivedMs).get("records_behind"));
    }

    private static AtomicCounter counter()
    {
        return new AtomicCounter(new UnsafeBuffer(ByteBuffer.allocateDirect(128)), 0);
    }

    /**
     * An exception that is not I/O in the receiver's duty cycle is a bug: the session ends as INTERNAL, named by
     * its class, instead of the agent runner logging it and running the next duty cycle into it again.
     */
    @Test
    void shouldEndTheSessionOnABugInItsDutyCycleNotRunIntoItAgain()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);
        connection.fault = new IllegalStateException("a bug");
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, receiver::doWork);
        assertEquals(io.blockmover.ErrorCode.INTERNAL, receiver.status().code());
        assertEquals("java.lang.IllegalStateException: a bug", receiver.status().message());
    }

    /**
     * A record that arrives damaged is asked for again (NACK) and what was sent behind it is dropped until it comes
     * again; once whole it is kept and the count starts over. One damaged on each of its sends ends the session
     * after the last NACK, named with its length and the count: a link that damages a 1 MiB resync region about
     * every other send ends sessions that way (FaultIT), and the log must say so, not read as a NACK skipped.
     */
    @Test
    void shouldAskForADamagedRecordAgainAndEndTheSessionOnlyWhenEachSendIsDamaged() throws IOException
    {
        final GroupReceiver receiver = resendingReceiver();

        connection.record(1, 0, 4096, 0, true);
        connection.record(2, 4096, 4096); // Sent before the source heard the NACK: dropped.
        receiver.doWork();
        assertEquals(List.of("NACK 1"), connection.sent);
        connection.sent.clear();
        connection.record(1, 0, 4096);
        connection.record(2, 4096, 4096);
        receiver.doWork();
        assertEquals(2, log.tailLsn(), "taken once whole, and the one behind it");
        assertTrue(connection.sent.contains("ACK 2"), connection.sent.toString());
        connection.sent.clear();

        for (int send = 1; send <= GroupReceiver.MAX_NACKS_PER_RECORD; send++)
        {
            connection.record(3, MIB, MIB, 0, true);
            receiver.doWork();
            assertEquals(List.of("NACK 3"), connection.sent, "send " + send);
            connection.sent.clear();
        }
        connection.record(3, MIB, MIB, 0, true);
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, () ->
        {
            receiver.doWork();
            receiver.doWork();
        });
        assertEquals(io.blockmover.ErrorCode.PROTOCOL_ERROR, receiver.status().code());
        assertEquals("record LSN 3 (1048576 bytes) arrived damaged (CRC32C mismatch) 9 times in a row; it will be " +
            "sent again after reconnecting", receiver.status().message());
        assertEquals(2, log.tailLsn());
    }

    /**
     * A zero record (its payload the length of its zeros) is logged as it came; one whose range runs past its
     * volume ends the session as a record of data would; one damaged on the way, its length with it, is asked for
     * again rather than taken for a range outside the volume.
     */
    @Test
    void shouldLogAZeroRecordInsideItsVolumeAndAskForADamagedOneAgain() throws IOException
    {
        final GroupReceiver receiver = resendingReceiver();

        connection.zeroRecord(1, 0, MIB, false);
        connection.zeroRecord(2, MIB, MIB, true);
        receiver.doWork();
        assertEquals(1, log.tailLsn());
        assertTrue(connection.sent.contains("NACK 2"), connection.sent.toString());
        final RecordLog.Cursor cursor = log.newCursor();
        assertTrue(cursor.next());
        assertEquals(RecordFlags.ZEROES, cursor.flags() & RecordFlags.ZEROES);
        assertEquals(MIB, ZeroRecord.decode(cursor.payload()));

        connection.zeroRecord(2, SIZE - MIB + 4096, MIB, false);
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, () ->
        {
            receiver.doWork();
            receiver.doWork();
        });
        assertEquals(io.blockmover.ErrorCode.PROTOCOL_ERROR, receiver.status().code());
        assertEquals("record LSN 2 for volume 0: zeros at " + (SIZE - MIB + 4096) + "+" + MIB + " are outside the " +
            "group's volumes", receiver.status().message());
        assertEquals(1, log.tailLsn());
    }

    /** A receiver that asks for a damaged record again (its source offered "resend"). */
    private GroupReceiver resendingReceiver()
    {
        final LogForcer forcer = new LogForcer(group, log.tailLsn());
        final GroupReceiver receiver = new GroupReceiver(group, connection, SESSION, () -> nowNs[0], 1_000_000_000L,
            60_000_000_000L, MIB, 1_000_000L, counter(), counter(), forcer);
        receiver.askForResends();
        return receiver;
    }

    /**
     * Hands over the frames queued with {@link #record}, each whole, and keeps the type and sequence of every
     * frame sent.
     */
    private static final class Scripted extends NullFrameConnection
    {
        final List<String> sent = new ArrayList<>();
        /** Read at every frame sent, into {@link #probed}. */
        LongSupplier probe = () -> 0;
        final List<Long> probed = new ArrayList<>();
        /** Thrown by the next receive, when set. */
        RuntimeException fault;
        private final ArrayDeque<FrameHeader> headers = new ArrayDeque<>();
        private final ArrayDeque<ByteBuffer> payloads = new ArrayDeque<>();

        void record(final long lsn, final long offset, final int length)
        {
            record(lsn, offset, length, 0);
        }

        void record(final long lsn, final long offset, final int length, final int flags)
        {
            record(lsn, offset, length, flags, false);
        }

        /** @param damaged whether one bit of the payload flips after its CRC is taken, as on a faulty link. */
        void record(final long lsn, final long offset, final int length, final int flags, final boolean damaged)
        {
            final ByteBuffer payload = ByteBuffer.allocateDirect(length);
            for (int i = 0; i < length; i++)
            {
                payload.put(i, (byte)(lsn * 31 + i));
            }
            final CRC32C crc = new CRC32C();
            crc.update(payload.duplicate());
            if (damaged)
            {
                payload.put(length / 2, (byte)(payload.get(length / 2) ^ 0x10));
            }
            headers.add(new FrameHeader().reset(FrameType.RECORD).sessionId(SESSION).volumeId(0).sequence(lsn)
                .offset(offset).payloadLength(length).payloadCrc((int)crc.getValue()).aux(flags).seal());
            payloads.add(payload);
        }

        /** @param damaged whether the length's top byte flips after its CRC is taken. */
        void zeroRecord(final long lsn, final long offset, final long length, final boolean damaged)
        {
            final ByteBuffer payload = ZeroRecord.encode(ByteBuffer.allocateDirect(ZeroRecord.PAYLOAD_LENGTH), length);
            final CRC32C crc = new CRC32C();
            crc.update(payload.duplicate());
            if (damaged)
            {
                payload.put(7, (byte)0x40);
            }
            headers.add(new FrameHeader().reset(FrameType.RECORD).sessionId(SESSION).volumeId(0).sequence(lsn)
                .offset(offset).payloadLength(ZeroRecord.PAYLOAD_LENGTH).payloadCrc((int)crc.getValue())
                .aux(RecordFlags.ZEROES).seal());
            payloads.add(payload);
        }

        /** A frame with no payload. */
        void frame(final FrameHeader header)
        {
            headers.add(header);
        }

        @Override
        public boolean startSend(final FrameHeader header, final ByteBuffer payload)
        {
            sent.add(header.type() + " " + header.sequence());
            probed.add(probe.getAsLong());
            return super.startSend(header, payload);
        }

        @Override
        public boolean receiveHeader(final FrameHeader header)
        {
            if (fault != null)
            {
                throw fault;
            }
            final FrameHeader next = headers.poll();
            if (next == null)
            {
                return false;
            }
            header.buffer().putBytes(0, next.buffer(), 0, FrameDescriptor.HEADER_LENGTH);
            return true;
        }

        @Override
        public boolean receivePayload(final ByteBuffer dst)
        {
            dst.put(payloads.poll());
            return true;
        }
    }
}
