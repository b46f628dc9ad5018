package io.blockmover.pipeline;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.CachedNanoClock;
import org.agrona.concurrent.status.AtomicCounter;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.ConcurrentBitSet;
import io.blockmover.replication.DirtyBitmap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Reader and Sender turned by hand over a real volume, bitmap and slab, with the transport replaced by a double.
 */
class SourcePipelineTest
{
    private static final int CHUNK = 16 * 1024;
    /** Four whole chunks and a last one of 4 KiB + 512 bytes, whose tail goes through the buffered channel. */
    private static final int SIZE = 4 * CHUNK + 4096 + 512;
    private static final int CHUNKS = 5;
    private static final int SESSION_ID = 0x5E55;
    private static final int FLUSH_CHUNKS = 16;
    private static final long HEARTBEAT_NS = TimeUnit.SECONDS.toNanos(1);
    private static final long PEER_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);

    @TempDir
    Path dir;

    private byte[] content;
    private Volume volume;
    private DirtyBitmap bitmap;
    private CncFile cnc;
    private AtomicCounter bytesRemaining;
    private AtomicCounter bytesCopied;
    private final CachedNanoClock clock = new CachedNanoClock();
    private final CapturingFrameConnection connection = new CapturingFrameConnection(1 << 20, 256, 1 << 20);
    private SourceSession session;
    private Reader reader;
    private Sender sender;

    private void start(final int slotCount, final int credits, final boolean seed, final boolean verify)
        throws IOException
    {
        content = new byte[SIZE];
        new Random(11).nextBytes(content);
        final Path file = dir.resolve("source.img");
        Files.write(file, content);
        volume = Volume.open(file, false);
        bitmap = DirtyBitmap.createAllDirty(dir.resolve("job.bitmap"), CHUNKS, CHUNK);
        cnc = CncFile.create(dir.resolve("counters.dat"), "test", 1, 64);
        bytesRemaining = cnc.newCounter("bytes remaining", 2);
        bytesCopied = cnc.newCounter("bytes copied", 2);
        final Slab slab = new Slab(2 * slotCount, CHUNK);
        final int slotBase = slab.lease(slotCount);
        clock.update(1_000_000);
        session = new SourceSession(SESSION_ID, volume, bitmap.bits(), CHUNK, slab, slotBase, slotCount, connection,
            credits, FLUSH_CHUNKS, seed, verify, 2, 256, HEARTBEAT_NS, PEER_TIMEOUT_NS, cnc, bytesRemaining,
            bytesCopied);
        reader = new Reader(session);
        sender = new Sender(session, clock);
        sender.onStart();
    }

    @AfterEach
    void close()
    {
        if (volume != null)
        {
            volume.close();
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

    private int turnReaderUntilIdle()
    {
        int chunks = 0;
        for (int i = 0; i < 100; i++)
        {
            final int work = reader.doWork();
            if (work == 0)
            {
                return chunks;
            }
            chunks += work;
        }
        throw new AssertionError("reader never went idle");
    }

    private long counter(final SystemCounter counter)
    {
        return cnc.counter(counter).get();
    }

    private ConcurrentBitSet dirty()
    {
        return bitmap.bits();
    }

    private static int lengthOf(final long chunk)
    {
        return (int)Math.min(CHUNK, SIZE - chunk * CHUNK);
    }

    private void assertChunkFrame(final int frame, final long chunk)
    {
        final FrameHeader header = connection.sentHeader(frame);
        final int offset = (int)(chunk * CHUNK);
        final int length = lengthOf(chunk);
        assertNull(header.validate(CHUNK), "frame " + frame + " is sealed and sound");
        assertEquals(FrameType.CHUNK, header.type());
        assertEquals(SESSION_ID, header.sessionId());
        assertEquals(chunk, header.sequence());
        assertEquals(offset, header.offset());
        assertEquals(length, header.payloadLength());
        assertEquals(Frames.crc32c(content, offset, length), header.payloadCrc(), "CRC32C of chunk " + chunk);
        assertArrayEquals(Arrays.copyOfRange(content, offset, offset + length), connection.sentPayload(frame),
            "payload of chunk " + chunk);
    }

    private void assertDirty(final boolean... expected)
    {
        for (int i = 0; i < expected.length; i++)
        {
            assertEquals(expected[i], dirty().get(i), "dirty bit of chunk " + i);
        }
    }

    @Test
    void shouldReadAndSendEveryDirtyChunkWithOffsetLengthAndCrc() throws IOException
    {
        start(8, 8, false, false);
        assertEquals(SIZE, bytesRemaining.get(), "every byte starts dirty");

        assertEquals(CHUNKS, turnReaderUntilIdle());
        assertEquals(0, connection.sentCount(), "the reader never touches the connection");
        sender.doWork();

        assertEquals(CHUNKS, connection.sentCount(FrameType.CHUNK));
        for (int chunk = 0; chunk < CHUNKS; chunk++)
        {
            assertChunkFrame(chunk, chunk);
        }
        assertEquals(CHUNKS, counter(SystemCounter.CHUNKS_SENT));
        assertEquals(SIZE, counter(SystemCounter.BYTES_SENT));
        assertDirty(true, true, true, true, true);
        assertEquals(SIZE, bytesRemaining.get(), "sending clears nothing");
        assertEquals(0, turnReaderUntilIdle(), "chunks in flight are not read again");
        assertEquals(SourceSession.PHASE_COPY, session.phase());
    }

    @Test
    void shouldStopSendingAtZeroCreditsAndResumeOnAck() throws IOException
    {
        start(4, 2, false, false);
        assertEquals(4, turnReaderUntilIdle(), "the ring holds four slots");

        sender.doWork();
        sender.doWork();
        assertEquals(2, connection.sentCount(FrameType.CHUNK), "two credits, two chunks");

        Frames.deliver(connection, FrameType.ACK, SESSION_ID, 0);
        sender.doWork();

        assertEquals(3, connection.sentCount(FrameType.CHUNK), "an ACK returns one credit");
        assertChunkFrame(2, 2);
        sender.doWork();
        assertEquals(3, connection.sentCount(FrameType.CHUNK));
    }

    @Test
    void shouldNotClearDirtyBitOnAckButOnDurable() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        sender.doWork();

        Frames.deliver(connection, FrameType.ACK, SESSION_ID, 0);
        Frames.deliver(connection, FrameType.ACK, SESSION_ID, 1);
        sender.doWork();
        assertDirty(true, true, true, true, true);
        assertEquals(SIZE, bytesRemaining.get());
        assertEquals(0, bytesCopied.get());
        assertEquals(0, turnReaderUntilIdle(), "written but not durable: still in flight, not read again");

        Frames.deliver(connection, FrameType.DURABLE, SESSION_ID, 0);
        Frames.deliver(connection, FrameType.ACK, SESSION_ID, 2);
        sender.doWork();

        assertDirty(false, false, true, true, true);
        assertEquals(SIZE - 2L * CHUNK, bytesRemaining.get());
        assertEquals(2L * CHUNK, bytesCopied.get());
        assertEquals(0, turnReaderUntilIdle(), "durable chunks are not read again");

        Frames.deliver(connection, FrameType.DURABLE, SESSION_ID, 0);
        sender.doWork();
        assertDirty(false, false, false, true, true);
        assertEquals(SIZE - 3L * CHUNK, bytesRemaining.get(), "a DURABLE covers the ACKs before it only");
    }

    @Test
    void shouldFinishWithCloseOnceEveryChunkIsDurable() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        sender.doWork();
        for (int chunk = 0; chunk < CHUNKS; chunk++)
        {
            Frames.deliver(connection, FrameType.ACK, SESSION_ID, chunk);
        }
        Frames.deliver(connection, FrameType.DURABLE, SESSION_ID, 0);

        sender.doWork();
        sender.doWork();

        assertEquals(0, dirty().cardinality());
        assertEquals(0, bytesRemaining.get());
        assertEquals(SIZE, bytesCopied.get(), "the short last chunk counts its real length");
        assertEquals(SourceSession.PHASE_FINISH, session.phase());
        assertEquals(1, connection.sentCount(FrameType.CLOSE));
        assertTrue(session.status().isRunning(), "running until the destination confirms");

        Frames.deliver(connection, FrameType.CLOSE, SESSION_ID, 0);
        sender.doWork();

        assertEquals(SessionStatus.COMPLETED, session.status().state());
        assertThrows(AgentTerminationException.class, sender::doWork);
        assertThrows(AgentTerminationException.class, reader::doWork);
    }

    @Test
    void shouldReadAndSendChunkAgainAfterNack() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        sender.doWork();
        final int before = connection.sentCount();

        Frames.deliver(connection, FrameType.NACK, SESSION_ID, 3);
        sender.doWork();
        assertEquals(1, counter(SystemCounter.CHUNKS_RESENT));
        assertEquals(1, turnReaderUntilIdle(), "the damaged chunk, and only it, is read again");
        sender.doWork();

        assertEquals(List.of(FrameType.CHUNK), connection.sentTypes(before));
        assertChunkFrame(before, 3);
        assertDirty(true, true, true, true, true);
    }

    @Test
    void shouldClearRegionsWhoseRemoteDigestMatchesWhenSeeded() throws IOException
    {
        start(8, 8, true, false);
        assertEquals(SourceSession.PHASE_SEED, session.phase());

        assertEquals(CHUNKS, turnReaderUntilIdle(), "the reader checksums every region");
        sender.doWork();

        assertEquals(0, connection.sentCount(FrameType.CHUNK), "nothing is copied before the comparison");
        assertEquals(1, connection.sentCount(FrameType.DIGEST_REQUEST));
        final FrameHeader request = connection.sentHeader(0);
        assertEquals(0, request.sequence());
        assertEquals(CHUNKS, request.aux());
        assertNull(request.validate(0));

        final int[] remote = new int[CHUNKS];
        for (int region = 0; region < CHUNKS; region++)
        {
            remote[region] = Frames.crc32c(content, region * CHUNK, lengthOf(region));
        }
        remote[1] ^= 1;
        remote[4] ^= 0x8000_0000;
        Frames.deliverDigests(connection, SESSION_ID, 0, remote);
        sender.doWork();

        assertDirty(false, true, false, false, true);
        assertEquals(CHUNK + lengthOf(4), bytesRemaining.get());
        assertEquals(2, session.regionsDifferent());
        assertEquals(CHUNKS, counter(SystemCounter.REGIONS_COMPARED));
        assertEquals(2, counter(SystemCounter.REGIONS_DIFFERENT));
        assertEquals(SourceSession.PHASE_COPY, session.phase());

        final int before = connection.sentCount();
        assertEquals(2, turnReaderUntilIdle());
        sender.doWork();
        assertEquals(List.of(FrameType.CHUNK, FrameType.CHUNK), connection.sentTypes(before));
        assertChunkFrame(before, 1);
        assertChunkFrame(before + 1, 4);
    }

    @Test
    void shouldResendRegionThatDiffersInVerifyAndThenFinishVerified() throws IOException
    {
        start(8, 8, false, true);
        turnReaderUntilIdle();
        sender.doWork();
        for (int chunk = 0; chunk < CHUNKS; chunk++)
        {
            Frames.deliver(connection, FrameType.ACK, SESSION_ID, chunk);
        }
        Frames.deliver(connection, FrameType.DURABLE, SESSION_ID, 0);
        sender.doWork();
        assertEquals(SourceSession.PHASE_VERIFY, session.phase());

        turnReaderUntilIdle();
        sender.doWork();
        final int[] remote = new int[CHUNKS];
        for (int region = 0; region < CHUNKS; region++)
        {
            remote[region] = Frames.crc32c(content, region * CHUNK, lengthOf(region));
        }
        remote[2] = ~remote[2];
        Frames.deliverDigests(connection, SESSION_ID, 0, remote);
        sender.doWork();

        assertEquals(1, counter(SystemCounter.VERIFY_MISMATCHES));
        assertEquals(SourceSession.PHASE_COPY, session.phase());
        assertDirty(false, false, true, false, false);
        assertEquals(CHUNK, bytesRemaining.get());
        final int resent = connection.sentCount();
        assertEquals(1, turnReaderUntilIdle());
        sender.doWork();
        assertChunkFrame(resent, 2);

        Frames.deliver(connection, FrameType.ACK, SESSION_ID, 2);
        Frames.deliver(connection, FrameType.DURABLE, SESSION_ID, 0);
        sender.doWork();
        assertEquals(SourceSession.PHASE_VERIFY, session.phase());
        turnReaderUntilIdle();
        sender.doWork();
        remote[2] = ~remote[2];
        Frames.deliverDigests(connection, SESSION_ID, 0, remote);
        sender.doWork();
        sender.doWork();

        assertTrue(session.verified());
        assertEquals(1, session.verifyMismatches());
        assertEquals(SourceSession.PHASE_FINISH, session.phase());
        assertEquals(1, connection.sentCount(FrameType.CLOSE));
    }

    @Test
    void shouldFailNonRetryablyOnPeerError() throws IOException
    {
        start(8, 8, false, false);
        Frames.deliverError(connection, SESSION_ID, ErrorCode.VOLUME_TOO_SMALL, "target has 4096 bytes");

        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(SessionStatus.FAILED, session.status().state());
        assertEquals(ErrorCode.VOLUME_TOO_SMALL, session.status().code());
        assertFalse(session.status().isRetryable());
        assertTrue(session.status().message().contains("target has 4096 bytes"), session.status().message());
        assertThrows(AgentTerminationException.class, reader::doWork, "the reader stops with the session");
    }

    /**
     * A bug in the sender's duty cycle (here thrown by the connection) ends the session once, as INTERNAL named by
     * its class; the agent runner used to log it and run the next duty cycle into it again.
     */
    @Test
    void shouldEndTheSessionOnABugInTheSendersDutyCycle() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        connection.failWith(new IllegalStateException("a bug"));

        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(ErrorCode.INTERNAL, session.status().code());
        assertEquals("java.lang.IllegalStateException: a bug", session.status().message());
        assertThrows(AgentTerminationException.class, reader::doWork, "the reader stops with the session");
    }

    @Test
    void shouldFailRetryablyWhenConnectionFails() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        connection.failWith(new IOException("Connection reset by peer"));

        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(SessionStatus.FAILED, session.status().state());
        assertEquals(ErrorCode.PEER_UNREACHABLE, session.status().code());
        assertTrue(session.status().isRetryable());
        assertTrue(session.status().message().contains("Connection reset by peer"), session.status().message());
        assertEquals(1, counter(SystemCounter.CONNECTIONS_LOST));
        assertDirty(true, true, true, true, true);
    }

    @Test
    void shouldFailOnDamagedFrameHeaderAndCountIt() throws IOException
    {
        start(8, 8, false, false);
        final FrameHeader ack = Frames.header(FrameType.ACK, SESSION_ID).sequence(0).seal();
        ack.buffer().putByte(20, (byte)(ack.buffer().getByte(20) ^ 4));
        connection.deliver(ack, null);

        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(1, counter(SystemCounter.FRAME_ERRORS));
        assertEquals(SessionStatus.FAILED, session.status().state());
        assertTrue(session.status().message().contains("header CRC mismatch"), session.status().message());
    }

    @Test
    void shouldFailWhenPeerAcknowledgesChunkOutsideVolume() throws IOException
    {
        start(8, 8, false, false);
        Frames.deliver(connection, FrameType.ACK, SESSION_ID, CHUNKS);

        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(1, counter(SystemCounter.FRAME_ERRORS));
        assertEquals(SessionStatus.FAILED, session.status().state());
    }

    @Test
    void shouldSendHeartbeatAfterIntervalOfSilence() throws IOException
    {
        start(8, 0, false, false);
        turnReaderUntilIdle();

        sender.doWork();
        clock.advance(HEARTBEAT_NS);
        sender.doWork();
        assertEquals(0, connection.sentCount(), "no credits, and not idle for longer than the interval yet");

        clock.advance(1);
        sender.doWork();
        assertEquals(1, connection.sentCount(FrameType.HEARTBEAT));
        final FrameHeader heartbeat = connection.sentHeader(0);
        assertEquals(SESSION_ID, heartbeat.sessionId());
        assertNull(heartbeat.validate(0));

        clock.advance(HEARTBEAT_NS / 2);
        sender.doWork();
        assertEquals(1, connection.sentCount(FrameType.HEARTBEAT), "the interval restarts with every send");
        clock.advance(HEARTBEAT_NS / 2 + 1);
        sender.doWork();
        assertEquals(2, connection.sentCount(FrameType.HEARTBEAT));
        assertTrue(session.status().isRunning());
    }

    @Test
    void shouldFailRetryablyWhenPeerIsSilentTooLong() throws IOException
    {
        start(8, 0, false, false);
        clock.advance(PEER_TIMEOUT_NS / 2);
        Frames.deliver(connection, FrameType.HEARTBEAT, SESSION_ID, 0);
        sender.doWork();
        clock.advance(PEER_TIMEOUT_NS);
        sender.doWork();
        assertTrue(session.status().isRunning(), "a heartbeat from the peer restarts the timeout");

        clock.advance(1);
        assertThrows(AgentTerminationException.class, sender::doWork);

        assertEquals(1, counter(SystemCounter.PEER_TIMEOUTS));
        assertEquals(ErrorCode.PEER_UNREACHABLE, session.status().code());
        assertTrue(session.status().isRetryable());
    }

    @Test
    void shouldHoldFramesWhileSendIsPending() throws IOException
    {
        start(8, 8, false, false);
        turnReaderUntilIdle();
        connection.stallFlushes(5);

        sender.doWork();
        assertEquals(1, connection.sentCount());
        sender.doWork();
        assertEquals(1, connection.sentCount(), "no second frame while the first is still going out");
        assertTrue(connection.isSendPending());
        connection.stallFlushes(0);
        for (int i = 0; i < 10; i++)
        {
            sender.doWork();
        }

        assertEquals(CHUNKS, connection.sentCount(FrameType.CHUNK));
        for (int chunk = 0; chunk < CHUNKS; chunk++)
        {
            assertChunkFrame(chunk, chunk);
        }
    }

    @Test
    void shouldKeepTheSlotsOfChunksOnTheWireFromTheReader() throws IOException
    {
        // The conductor's handshake used the connection first: frame numbers count its frames too.
        connection.startSend(new FrameHeader().reset(FrameType.OPEN).seal(), null);
        start(4, 8, false, false);
        connection.holdPayloads(); // As RDMA does: the device reads each slot after the post.
        assertEquals(4, turnReaderUntilIdle(), "the ring holds four slots");

        sender.doWork();
        assertEquals(4, connection.sentCount(FrameType.CHUNK), "all four chunks go out without waiting for the wire");
        assertEquals(0, turnReaderUntilIdle(), "no slot is read into while its chunk may still be on the wire");
        assertEquals(-1, session.senderSequence.get());

        connection.releaseFrames(2);
        sender.doWork();
        assertEquals(0, session.senderSequence.get(), "slots come back as their frames are released, in order");
        assertEquals(1, turnReaderUntilIdle(), "the last chunk is read into the first slot given back");
        sender.doWork();
        assertEquals(CHUNKS, connection.sentCount(FrameType.CHUNK));
        assertChunkFrame(5, 4);

        connection.releaseFrames(4);
        sender.doWork();
        assertEquals(2, session.senderSequence.get(), "a frame still on the wire holds back the slots behind it");
        connection.releaseFrames(1 + CHUNKS);
        sender.doWork();
        assertEquals(4, session.senderSequence.get());
    }
}
