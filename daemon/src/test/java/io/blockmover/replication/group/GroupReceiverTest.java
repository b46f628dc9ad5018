package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
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
import io.blockmover.replication.log.RecordLog;
import io.blockmover.transport.NullFrameConnection;

import static org.junit.jupiter.api.Assertions.assertEquals;

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

    private static AtomicCounter counter()
    {
        return new AtomicCounter(new UnsafeBuffer(ByteBuffer.allocateDirect(128)), 0);
    }

    /**
     * Hands over the frames queued with {@link #record}, each whole, and keeps the type and sequence of every
     * frame sent.
     */
    private static final class Scripted extends NullFrameConnection
    {
        final List<String> sent = new ArrayList<>();
        private final ArrayDeque<FrameHeader> headers = new ArrayDeque<>();
        private final ArrayDeque<ByteBuffer> payloads = new ArrayDeque<>();

        void record(final long lsn, final long offset, final int length)
        {
            final ByteBuffer payload = ByteBuffer.allocateDirect(length);
            for (int i = 0; i < length; i++)
            {
                payload.put(i, (byte)(lsn * 31 + i));
            }
            final CRC32C crc = new CRC32C();
            crc.update(payload.duplicate());
            headers.add(new FrameHeader().reset(FrameType.RECORD).sessionId(SESSION).volumeId(0).sequence(lsn)
                .offset(offset).payloadLength(length).payloadCrc((int)crc.getValue()).seal());
            payloads.add(payload);
        }

        @Override
        public boolean startSend(final FrameHeader header, final ByteBuffer payload)
        {
            sent.add(header.type() + " " + header.sequence());
            return super.startSend(header, payload);
        }

        @Override
        public boolean receiveHeader(final FrameHeader header)
        {
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
