package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.CachedNanoClock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Receiver and Writer turned by hand over a real volume and slab, with the transport replaced by a double.
 */
class DestinationPipelineTest
{
    private static final int CHUNK = 16 * 1024;
    private static final int SIZE = 4 * CHUNK + 4096 + 512;
    private static final int CHUNKS = 5;
    private static final int SESSION_ID = 0xD057;
    private static final long HEARTBEAT_NS = TimeUnit.SECONDS.toNanos(1);
    private static final long PEER_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);
    private static final long FLUSH_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(200);

    @TempDir
    Path dir;

    private final byte[] content = new byte[SIZE];
    private Path file;
    private Volume volume;
    private CncFile cnc;
    private final CachedNanoClock clock = new CachedNanoClock();
    private final CapturingFrameConnection connection = new CapturingFrameConnection(1 << 20, 256, 1 << 20);
    private DestinationSession session;
    private Receiver receiver;
    private Writer writer;

    private void start(final int flushChunks) throws IOException
    {
        new Random(22).nextBytes(content);
        file = dir.resolve("target.img");
        Files.write(file, new byte[SIZE]);
        volume = Volume.open(file, true);
        cnc = CncFile.create(dir.resolve("counters.dat"), "test", 1, 64);
        final Slab slab = new Slab(8, CHUNK);
        final int slotBase = slab.lease(4);
        clock.update(5_000_000);
        session = new DestinationSession(SESSION_ID, volume, SIZE, CHUNK, slab, slotBase, 4, connection,
            HEARTBEAT_NS, PEER_TIMEOUT_NS, flushChunks, FLUSH_INTERVAL_NS, cnc);
        receiver = new Receiver(session, clock);
        writer = new Writer(session, clock);
        receiver.onStart();
        writer.onStart();
    }

    @AfterEach
    void close()
    {
        if (volume != null)
        {
            volume.close();
        }
        if (cnc != null)
        {
            cnc.close();
        }
    }

    private static int lengthOf(final long chunk)
    {
        return (int)Math.min(CHUNK, SIZE - chunk * CHUNK);
    }

    private byte[] dataOf(final long chunk)
    {
        final int offset = (int)(chunk * CHUNK);
        return Arrays.copyOfRange(content, offset, offset + lengthOf(chunk));
    }

    private void deliverChunk(final long chunk)
    {
        final byte[] data = dataOf(chunk);
        Frames.deliverChunk(connection, SESSION_ID, chunk, chunk * CHUNK, data, Frames.crc32c(data, 0, data.length));
    }

    private void crank()
    {
        receiver.doWork();
        writer.doWork();
        receiver.doWork();
    }

    private long counter(final SystemCounter counter)
    {
        return cnc.counter(counter).get();
    }

    private byte[] onDisk(final long chunk) throws IOException
    {
        final byte[] all = Files.readAllBytes(file);
        final int offset = (int)(chunk * CHUNK);
        return Arrays.copyOfRange(all, offset, offset + lengthOf(chunk));
    }

    private void assertReply(final int frame, final FrameType type, final long sequence)
    {
        final FrameHeader header = connection.sentHeader(frame);
        assertNull(header.validate(CHUNK), "frame " + frame);
        assertEquals(type, header.type(), "frame " + frame);
        assertEquals(SESSION_ID, header.sessionId());
        assertEquals(sequence, header.sequence(), "frame " + frame);
    }

    @Test
    void shouldWriteIntactChunkAtItsOffsetAndAcknowledgeIt() throws IOException
    {
        start(100);
        deliverChunk(1);

        crank();

        assertArrayEquals(dataOf(1), onDisk(1));
        assertArrayEquals(new byte[CHUNK], onDisk(0), "nothing else is written");
        assertArrayEquals(new byte[CHUNK], onDisk(2));
        assertEquals(List.of(FrameType.ACK), connection.sentTypes(0));
        assertReply(0, FrameType.ACK, 1);
        assertEquals(1, counter(SystemCounter.CHUNKS_RECEIVED));
        assertEquals(CHUNK, counter(SystemCounter.BYTES_RECEIVED));
        assertEquals(1, counter(SystemCounter.CHUNKS_WRITTEN));
        assertEquals(0, counter(SystemCounter.VOLUME_FORCES), "one chunk of a hundred: not forced yet");
    }

    @Test
    void shouldWriteLastChunkWithSubBlockTailWithoutExtendingVolume() throws IOException
    {
        start(100);
        deliverChunk(CHUNKS - 1);

        crank();

        assertArrayEquals(dataOf(CHUNKS - 1), onDisk(CHUNKS - 1));
        assertEquals(SIZE, Files.size(file));
        assertReply(0, FrameType.ACK, CHUNKS - 1);
    }

    @Test
    void shouldAssemblePayloadArrivingInPieces() throws IOException
    {
        start(100);
        connection.maxPayloadBytesPerCall(1000);
        deliverChunk(2);

        for (int i = 0; i < 40 && connection.sentCount() == 0; i++)
        {
            crank();
        }

        assertArrayEquals(dataOf(2), onDisk(2));
        assertReply(0, FrameType.ACK, 2);
    }

    @Test
    void shouldNackDamagedChunkAndWriteNothing() throws IOException
    {
        start(100);
        final byte[] data = dataOf(3);
        final int crc = Frames.crc32c(data, 0, data.length);
        data[100] ^= 0x20;
        Frames.deliverChunk(connection, SESSION_ID, 3, 3L * CHUNK, data, crc);

        crank();

        assertEquals(List.of(FrameType.NACK), connection.sentTypes(0));
        assertReply(0, FrameType.NACK, 3);
        assertArrayEquals(new byte[CHUNK], onDisk(3), "a damaged chunk is never written");
        assertEquals(1, counter(SystemCounter.PAYLOAD_CRC_ERRORS));
        assertEquals(0, counter(SystemCounter.CHUNKS_WRITTEN));
        assertTrue(session.status().isRunning(), "a damaged chunk is resent, not fatal");

        deliverChunk(3);
        crank();
        assertArrayEquals(dataOf(3), onDisk(3));
        assertReply(1, FrameType.ACK, 3);
    }

    @Test
    void shouldAnnounceDurableAfterFlushChunksChunks() throws IOException
    {
        start(2);
        deliverChunk(0);
        crank();
        assertEquals(List.of(FrameType.ACK), connection.sentTypes(0));

        deliverChunk(1);
        crank();

        assertEquals(List.of(FrameType.ACK, FrameType.ACK, FrameType.DURABLE), connection.sentTypes(0));
        assertReply(1, FrameType.ACK, 1);
        assertEquals(1, counter(SystemCounter.VOLUME_FORCES));
        assertArrayEquals(dataOf(0), onDisk(0));
        assertArrayEquals(dataOf(1), onDisk(1));
    }

    @Test
    void shouldAnnounceDurableAfterFlushInterval() throws IOException
    {
        start(100);
        deliverChunk(0);
        crank();

        clock.advance(FLUSH_INTERVAL_NS - 1);
        crank();
        assertEquals(0, connection.sentCount(FrameType.DURABLE));

        clock.advance(1);
        crank();
        assertEquals(List.of(FrameType.ACK, FrameType.DURABLE), connection.sentTypes(0));
        assertEquals(1, counter(SystemCounter.VOLUME_FORCES));

        clock.advance(FLUSH_INTERVAL_NS * 10);
        crank();
        assertEquals(1, counter(SystemCounter.VOLUME_FORCES), "nothing unforced, nothing to force");
    }

    /**
     * A chunk of zeros sent without them (a header alone, to a destination that offered it) writes the chunk's
     * zeros, from a slot that last held another chunk's data, and is acknowledged as any chunk.
     */
    @Test
    void shouldWriteTheZerosOfAChunkSentWithoutThem() throws IOException
    {
        start(100);
        for (int chunk = 0; chunk < 4; chunk++)
        {
            deliverChunk(chunk);
            crank();
        }
        connection.deliver(Frames.header(FrameType.CHUNK, SESSION_ID).sequence(2).offset(2L * CHUNK)
            .aux(FrameDescriptor.CHUNK_ZEROES).seal(), null);
        crank();

        assertArrayEquals(new byte[CHUNK], onDisk(2));
        assertArrayEquals(dataOf(1), onDisk(1));
        assertArrayEquals(dataOf(3), onDisk(3));
        assertReply(4, FrameType.ACK, 2);
        assertEquals(5, counter(SystemCounter.CHUNKS_WRITTEN));
        assertEquals(4L * CHUNK, counter(SystemCounter.BYTES_RECEIVED), "no bytes came for the zeros");
    }

    @Test
    void shouldFailOnAChunkOfZerosThatCarriesAPayload() throws IOException
    {
        start(100);
        final byte[] data = new byte[CHUNK];
        final ByteBuffer payload = ByteBuffer.allocateDirect(CHUNK);
        connection.deliver(Frames.header(FrameType.CHUNK, SESSION_ID).sequence(0).offset(0).payloadLength(CHUNK)
            .payloadCrc(Frames.crc32c(data, 0, CHUNK)).aux(FrameDescriptor.CHUNK_ZEROES).seal(), payload);

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertFailedWithFrameError("outside the volume's geometry");
    }

    @Test
    void shouldFailOnChunkBeyondVolume() throws IOException
    {
        start(100);
        final byte[] data = dataOf(0);
        Frames.deliverChunk(connection, SESSION_ID, CHUNKS, (long)CHUNKS * CHUNK, data, 0);

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertFailedWithFrameError("outside the volume's geometry");
    }

    @Test
    void shouldFailOnChunkAtWrongOffset() throws IOException
    {
        start(100);
        final byte[] data = dataOf(1);
        Frames.deliverChunk(connection, SESSION_ID, 1, CHUNK + 4096, data, Frames.crc32c(data, 0, data.length));

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertFailedWithFrameError("outside the volume's geometry");
        assertArrayEquals(new byte[CHUNK], onDisk(1));
    }

    @Test
    void shouldFailOnLastChunkClaimingFullLength() throws IOException
    {
        start(100);
        final byte[] data = new byte[CHUNK];
        Frames.deliverChunk(connection, SESSION_ID, CHUNKS - 1, (CHUNKS - 1L) * CHUNK, data,
            Frames.crc32c(data, 0, data.length));

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertFailedWithFrameError("outside the volume's geometry");
        assertEquals(SIZE, Files.size(file));
    }

    @Test
    void shouldFailOnFrameOfAnotherSession() throws IOException
    {
        start(100);
        final byte[] data = dataOf(0);
        Frames.deliverChunk(connection, SESSION_ID + 1, 0, 0, data, Frames.crc32c(data, 0, data.length));

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertFailedWithFrameError("frame of session");
        assertArrayEquals(new byte[CHUNK], onDisk(0));
    }

    private void assertFailedWithFrameError(final String why)
    {
        assertEquals(SessionStatus.FAILED, session.status().state());
        assertTrue(session.status().message().contains(why), session.status().message());
        assertEquals(1, counter(SystemCounter.FRAME_ERRORS));
        assertEquals(0, counter(SystemCounter.CHUNKS_WRITTEN));
        assertThrows(AgentTerminationException.class, writer::doWork, "the writer stops too");
        assertTrue(session.isWriterDone());
    }

    @Test
    void shouldForceThenAnswerClose() throws IOException
    {
        start(100);
        deliverChunk(0);
        Frames.deliver(connection, FrameType.CLOSE, SESSION_ID, 0);

        receiver.doWork();
        writer.doWork();
        assertTrue(session.status().isRunning());
        assertThrows(AgentTerminationException.class, receiver::doWork, "the receiver ends once CLOSE has left");

        assertEquals(List.of(FrameType.ACK, FrameType.DURABLE, FrameType.CLOSE), connection.sentTypes(0));
        assertEquals(1, counter(SystemCounter.VOLUME_FORCES), "the CLOSE answer follows a force");
        assertEquals(SessionStatus.COMPLETED, session.status().state());
        assertThrows(AgentTerminationException.class, writer::doWork);
        assertTrue(session.isWriterDone());
        assertArrayEquals(dataOf(0), onDisk(0));
    }

    @Test
    void shouldAnswerDigestRequestWithRegionChecksumsAfterForce() throws IOException
    {
        start(100);
        deliverChunk(0);
        deliverChunk(2);
        connection.deliver(Frames.header(FrameType.DIGEST_REQUEST, SESSION_ID).sequence(0).aux(CHUNKS).seal(), null);

        for (int i = 0; i < 3; i++)
        {
            crank();
        }

        assertEquals(List.of(FrameType.ACK, FrameType.ACK, FrameType.DURABLE, FrameType.DIGEST),
            connection.sentTypes(0));
        final FrameHeader digest = connection.sentHeader(3);
        assertNull(digest.validate(CHUNK));
        assertEquals(0, digest.sequence());
        assertEquals(CHUNKS, digest.aux());
        final byte[] payload = connection.sentPayload(3);
        assertEquals(CHUNKS * 4, payload.length);
        assertEquals(Frames.crc32c(payload, 0, payload.length), digest.payloadCrc());
        final ByteBuffer crcs = ByteBuffer.wrap(payload).order(ByteOrder.LITTLE_ENDIAN);
        final byte[] disk = Files.readAllBytes(file);
        for (int region = 0; region < CHUNKS; region++)
        {
            assertEquals(Frames.crc32c(disk, region * CHUNK, lengthOf(region)), crcs.getInt(), "region " + region);
        }
        assertEquals(Frames.crc32c(content, 0, CHUNK), Frames.crc32c(disk, 0, CHUNK));
    }

    @Test
    void shouldFailNonRetryablyWhenSourceReportsError() throws IOException
    {
        start(100);
        Frames.deliverError(connection, SESSION_ID, ErrorCode.CANCELLED, "job 3 cancelled");

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertEquals(ErrorCode.CANCELLED, session.status().code());
        assertFalse(session.status().isRetryable());
        assertTrue(session.status().message().contains("job 3 cancelled"), session.status().message());
    }

    @Test
    void shouldFailRetryablyWhenConnectionFails() throws IOException
    {
        start(100);
        connection.failWith(new IOException("Broken pipe"));

        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertEquals(ErrorCode.PEER_UNREACHABLE, session.status().code());
        assertTrue(session.status().isRetryable());
        assertEquals(1, counter(SystemCounter.CONNECTIONS_LOST));
    }

    /**
     * A bug in the receiver's duty cycle ends the session once, as INTERNAL named by its class, and the writer
     * still forces what it wrote on the way out.
     */
    @Test
    void shouldEndTheSessionOnABugInTheReceiversDutyCycle() throws IOException
    {
        start(100);
        deliverChunk(0);
        crank();
        connection.failWith(new IllegalStateException("a bug"));

        assertThrows(AgentTerminationException.class, receiver::doWork);
        assertEquals(ErrorCode.INTERNAL, session.status().code());
        assertEquals("java.lang.IllegalStateException: a bug", session.status().message());

        assertThrows(AgentTerminationException.class, writer::doWork);
        assertTrue(session.isWriterDone());
    }

    @Test
    void shouldForceWhatWasWrittenWhenSessionEndsEarly() throws IOException
    {
        start(100);
        deliverChunk(0);
        crank();
        connection.failWith(new IOException("Broken pipe"));
        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertThrows(AgentTerminationException.class, writer::doWork);

        assertEquals(1, counter(SystemCounter.VOLUME_FORCES), "written chunks are made durable on the way out");
        assertTrue(session.isWriterDone());
    }

    @Test
    void shouldHeartbeatWhenIdleAndTimeOutSilentSource() throws IOException
    {
        start(100);
        clock.advance(HEARTBEAT_NS + 1);
        receiver.doWork();
        assertEquals(List.of(FrameType.HEARTBEAT), connection.sentTypes(0));
        assertReply(0, FrameType.HEARTBEAT, 0);

        clock.advance(PEER_TIMEOUT_NS);
        assertThrows(AgentTerminationException.class, receiver::doWork);

        assertEquals(1, counter(SystemCounter.PEER_TIMEOUTS));
        assertTrue(session.status().isRetryable());
    }
}
