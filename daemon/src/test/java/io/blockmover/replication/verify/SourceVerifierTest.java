package io.blockmover.replication.verify;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.buffer.Slab;
import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.group.TestSourceGroups;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.transport.NullFrameConnection;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Verify's source and destination pieces against real files: the fence that puts a VERIFY record at the right
 * LSN while another thread keeps writing the same region, the job that turns results into located ranges, and
 * the destination's check that answers with a VERIFY_RESULT frame.
 */
class SourceVerifierTest
{
    private static final int REGION = 256 * 1024;
    private static final int SUB = 64 * 1024;
    private static final long VOLUME_SIZE = 4L * 1024 * 1024;
    private static final int WRITES = 600;

    @TempDir
    Path dir;

    private SourceGroup group;

    @AfterEach
    void close()
    {
        if (group != null)
        {
            group.close();
        }
    }

    private SourceGroup open(final long logSize) throws IOException
    {
        return TestSourceGroups.openAsync(dir, dir.resolve("volume.img"), VOLUME_SIZE, logSize, REGION);
    }

    @Test
    void shouldLogEachVerifyRecordAfterEveryWriteItsRegionHoldsWhileAWriterKeepsWriting() throws Exception
    {
        group = open(64L << 20);
        final VerifyRecord record = new VerifyRecord();
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        final ByteBuffer payload = ByteBuffer.allocateDirect(VerifyRecord.MAX_LENGTH);
        final AtomicInteger written = new AtomicInteger();
        final AtomicInteger verified = new AtomicInteger();
        final AtomicReference<Throwable> failed = new AtomicReference<>();
        // Writes straddle regions 1 and 2 and land all over both, as fast as they can.
        final Thread writer = new Thread(() ->
        {
            final ByteBuffer data = BufferUtil.allocateDirectAligned(8192, Slab.ALIGNMENT);
            try
            {
                for (int i = 0; i < WRITES; i++)
                {
                    // Halfway, wait for one verify: however the two threads are scheduled, at least one verify
                    // is logged between writes to the regions it covers.
                    while (i == WRITES / 2 && verified.get() == 0)
                    {
                        Thread.onSpinWait();
                    }
                    for (int j = 0; j < 8192; j++)
                    {
                        data.put(j, (byte)(i * 13 + j));
                    }
                    final long offset = REGION + (long)((i * 7919) % (2 * REGION / 4096 - 1)) * 4096;
                    group.export(0).write(offset, data, 8192, false);
                    written.incrementAndGet();
                }
            }
            catch (final Throwable ex)
            {
                failed.set(ex);
            }
        });
        writer.setDaemon(true);
        writer.start();
        // One verify after each step the writer makes, however fast or slow either side runs on this machine,
        // so the two always interleave and the log never fills with verifies alone.
        int verifies = 0;
        int seen = 0;
        while (writer.isAlive())
        {
            final int now = written.get();
            if (now == seen)
            {
                Thread.onSpinWait();
                continue;
            }
            seen = now;
            final long region = 1 + verifies % 2;
            final long lsn = group.appendFencedRegion(0, region, regionBuffer, payload, VerifyRecord.RECORD_VERIFY,
                (data, length, out) -> record.encode(1, data, length, SUB, out));
            assertTrue(lsn > 0, "appended: " + lsn);
            verifies++;
            verified.set(verifies);
        }
        writer.join();
        assertNull(failed.get());
        // Replay the log onto an image of the volume as the destination would: at each VERIFY record the image
        // must match the digests, or a write slipped past the fence.
        final byte[] image = new byte[(int)VOLUME_SIZE];
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        int checked = 0;
        int writes = 0;
        int verifiesBetweenWrites = 0;
        long lastLsn = 0;
        final ByteBuffer imageRegion = ByteBuffer.allocateDirect(REGION);
        while (cursor.next())
        {
            assertEquals(lastLsn + 1, cursor.lsn());
            lastLsn = cursor.lsn();
            final ByteBuffer p = cursor.payload();
            if ((cursor.flags() & VerifyRecord.RECORD_VERIFY) != 0)
            {
                imageRegion.clear().put(image, (int)cursor.offset(), REGION).flip();
                assertEquals(0, record.compare(p, imageRegion), "VERIFY at LSN " + cursor.lsn() + " of region " +
                    cursor.offset() / REGION + " does not match the writes logged before it");
                checked++;
                if (writes > 0 && writes < WRITES)
                {
                    verifiesBetweenWrites++;
                }
            }
            else
            {
                p.get(image, (int)cursor.offset(), cursor.length());
                writes++;
            }
        }
        assertEquals(verifies, checked);
        assertEquals(WRITES, writes);
        assertTrue(verifiesBetweenWrites >= 1, "no verify fell between two writes: " + verifies + " verifies");
        assertArrayEquals(image, Files.readAllBytes(dir.resolve("volume.img")), "replaying the log gives the volume");
    }

    @Test
    void shouldSkipADirtyRegionAndWaitWhileFrozen() throws IOException
    {
        group = open(1L << 20);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        final ByteBuffer payload = ByteBuffer.allocateDirect(VerifyRecord.MAX_LENGTH);
        final SourceGroup.RegionDigester digester = (data, length, out) -> 24;
        group.dirty(0).set(3);
        assertEquals(SourceGroup.REGION_DIRTY, group.appendFencedRegion(0, 3, regionBuffer, payload, 4, digester));
        group.freeze(true);
        assertEquals(RecordLog.NO_SPACE, group.appendFencedRegion(0, 2, regionBuffer, payload, 4, digester));
        group.freeze(false);
        assertEquals(1, group.appendFencedRegion(0, 2, regionBuffer, payload, 4, digester));
        assertTrue(group.log().isEmpty() == false);
    }

    @Test
    void shouldNeverReplayAVerifyRecordOntoTheVolume() throws IOException
    {
        group = open(1L << 20);
        // As a destination's log holds it after a switch: VERIFY flag, no WRITTEN flag.
        final ByteBuffer digests = ByteBuffer.allocate(VerifyRecord.DIGESTS_OFFSET + 16);
        for (int i = 0; i < digests.capacity(); i++)
        {
            digests.put(i, (byte)0x77);
        }
        assertTrue(group.log().tryAppend(group.log().tailLsn() + 1, 0, 2L * REGION, VerifyRecord.RECORD_VERIFY,
            digests, 0, digests.capacity()) >= 0);
        assertEquals(0, group.replayUnwritten());
        assertArrayEquals(new byte[(int)VOLUME_SIZE], Files.readAllBytes(dir.resolve("volume.img")));
    }

    @Test
    void shouldTurnResultsIntoLocatedRangesAndIgnoreOtherJobs() throws IOException
    {
        group = open(1L << 20);
        final SourceVerifier verifier = new SourceVerifier(group);
        group.verifier(verifier);
        assertEquals(VOLUME_SIZE / REGION, verifier.totalRegions());
        verifier.start(77);
        int work = 0;
        while (verifier.doWork() > 0)
        {
            work++;
        }
        // The scan's end (WINDOW / 2 = 16 regions) asks the partner for a force: its answers come once it applied.
        assertEquals(16 + 1, work, "one region per step, then the ask");
        assertEquals(group.log().tailLsn(), group.flushWantedLsn(), "the partner was not asked to force the records");
        assertFalse(verifier.isDone(), "results are still out");
        for (int r = 0; r < 16; r++)
        {
            final long mask = r == 5 ? 0b0110 : r == 9 ? 0b1000 : 0;
            verifier.onResult(VerifyResults.header(r + 1, 0, (long)r * REGION, mask), VerifyResults.payload(77, 0));
        }
        verifier.onResult(VerifyResults.header(99, 0, 0, 1), VerifyResults.payload(76, 0));
        assertEquals(1, verifier.staleResults());
        assertTrue(verifier.isDone());
        assertEquals(16, verifier.compared());
        assertEquals(2, verifier.different());
        final List<long[]> ranges = new ArrayList<>(verifier.mismatches());
        assertEquals(2, ranges.size());
        assertArrayEquals(new long[] {0, 5L * REGION + SUB, 2 * SUB}, ranges.get(0), "adjacent sub-blocks merge");
        assertArrayEquals(new long[] {0, 9L * REGION + 3 * SUB, SUB}, ranges.get(1));
    }

    /**
     * The partner compares a region once it applies the record, and applies only what its log made durable: left to
     * its timed force, a verify got one window of regions answered per flush.interval. The verifier asks for a force
     * through what it logged every half window, so that the force runs while it logs the other half.
     */
    @Test
    void shouldAskThePartnerToForceEveryHalfWindow() throws IOException
    {
        final int half = SourceVerifier.WINDOW / 2;
        group = TestSourceGroups.openAsync(dir, dir.resolve("volume.img"), 4L * half * REGION, 64L << 20, REGION);
        final SourceVerifier verifier = new SourceVerifier(group);
        group.verifier(verifier);
        final long before = group.log().tailLsn();
        final List<Long> asked = new ArrayList<>();
        verifier.start(78);
        runAndRecordAsks(verifier, asked);
        assertEquals(before + 2 * half, group.log().tailLsn(), "the window is full");
        assertEquals(List.of(before + half, before + 2 * half), asked);
        for (int r = 0; r < half; r++)
        {
            verifier.onResult(VerifyResults.header(before + r + 1, 0, (long)r * REGION, 0),
                VerifyResults.payload(78, 0));
        }
        runAndRecordAsks(verifier, asked);
        assertEquals(List.of(before + half, before + 2 * half, before + 3 * half), asked);
    }

    private void runAndRecordAsks(final SourceVerifier verifier, final List<Long> asked)
    {
        while (verifier.doWork() > 0)
        {
            final long wanted = group.flushWantedLsn();
            if (wanted > 0 && (asked.isEmpty() || asked.get(asked.size() - 1) != wanted))
            {
                asked.add(wanted);
            }
        }
    }

    @Test
    void shouldMarkEachDifferentRegionDirtyAsItsResultArrivesWhenRepairingAndResumeAfterTheLastAnswer()
        throws IOException
    {
        group = open(1L << 20);
        final SourceVerifier verifier = new SourceVerifier(group);
        group.verifier(verifier);
        verifier.start(78, 0, true, 0);
        assertEquals(1, verifier.doWork());
        assertEquals(1, verifier.doWork());
        assertEquals(1, verifier.doWork());
        verifier.onResult(VerifyResults.header(1, 0, 0, 0), VerifyResults.payload(78, 0));
        verifier.onResult(VerifyResults.header(2, 0, REGION, 0b10), VerifyResults.payload(78, 0));
        assertTrue(group.dirty(0).get(1), "a different region is dirty at once, before the job ends");
        assertFalse(group.dirty(0).get(0));
        assertEquals(1, verifier.markedDirty());
        assertEquals(1, verifier.answeredThrough(), "region 2's result is still out");

        // The link went: a new job resumes after the last answer, with region 2, not from the start.
        verifier.abandon();
        verifier.start(79, 0, true, verifier.answeredThrough() + 1);
        assertEquals(0, verifier.markedDirty());
        assertEquals(1, verifier.doWork());
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        long lastOffset = -1;
        while (cursor.next())
        {
            lastOffset = cursor.offset();
        }
        assertEquals(2L * REGION, lastOffset, "the resumed job's first VERIFY record is region 2's");
        verifier.onResult(VerifyResults.header(4, 0, 2L * REGION, -1L),
            VerifyResults.payload(79, VerifyRecord.STATUS_MALFORMED));
        assertTrue(group.dirty(0).get(2), "a region the destination could not compare is resent too");

        // Without repair nothing is marked; the report alone says what differs.
        group.dirty(0).clearAll();
        verifier.abandon();
        verifier.start(80, 0, false, 3);
        assertEquals(1, verifier.doWork());
        verifier.onResult(VerifyResults.header(5, 0, 3L * REGION, 1), VerifyResults.payload(80, 0));
        assertFalse(group.dirty(0).get(3));
        assertEquals(1, verifier.different());
    }

    @Test
    void shouldCheckTheDestinationCopyAndAnswerWithAResultFrame() throws IOException
    {
        final Path file = dir.resolve("destination.img");
        final byte[] bytes = new byte[(int)VOLUME_SIZE];
        for (int i = 0; i < bytes.length; i++)
        {
            bytes[i] = (byte)(i * 31 + (i >> 9));
        }
        Files.write(file, bytes);
        final VerifyRecord record = new VerifyRecord();
        final ByteBuffer sourceRegion = ByteBuffer.allocateDirect(REGION).put(bytes, 2 * REGION, REGION).flip();
        final ByteBuffer payload = ByteBuffer.allocateDirect(VerifyRecord.MAX_LENGTH);
        payload.limit(record.encode(5, sourceRegion, REGION, SUB, payload));
        final DestinationVerifier verifier = new DestinationVerifier(REGION);
        final ByteBuffer scratch = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        final Captured connection = new Captured();
        try (Volume volume = Volume.open(file, true))
        {
            verifier.check(10, 0, 2L * REGION, payload, volume, scratch);
            bytes[2 * REGION + 3 * SUB + 17] ^= 1;
            Files.write(file, bytes);
            verifier.check(11, 0, 2L * REGION, payload, volume, scratch);
            verifier.check(12, 0, 3L * REGION + 4096, payload, volume, scratch);
            // Voided by the source (damaged in its log): zeros, job id 0, passed over without an answer.
            verifier.check(13, 0, 2L * REGION, ByteBuffer.allocate(payload.limit()), volume, scratch);
        }
        assertEquals(3, verifier.regionsChecked());
        assertEquals(2, verifier.regionsDifferent());
        final FrameHeader header = new FrameHeader();
        final long[][] expected = {{10, 0, VerifyRecord.STATUS_COMPARED}, {11, 1L << 3, VerifyRecord.STATUS_COMPARED},
            {12, -1L, VerifyRecord.STATUS_MALFORMED}};
        for (final long[] e : expected)
        {
            assertTrue(verifier.sendNext(connection, header, 3));
            assertNull(connection.header.validate(VerifyRecord.RESULT_LENGTH));
            assertEquals(FrameType.VERIFY_RESULT, connection.header.type());
            assertEquals(3, connection.header.sessionId());
            assertEquals(e[0], connection.header.sequence());
            assertEquals(e[1], connection.header.aux());
            assertEquals(5, connection.payload.getLong(0));
            assertEquals(e[2], connection.payload.getInt(VerifyRecord.RESULT_STATUS_OFFSET));
        }
        assertFalse(verifier.sendNext(connection, header, 3));
    }

    /**
     * Keeps the last frame sent.
     */
    private static final class Captured extends NullFrameConnection
    {
        final FrameHeader header = new FrameHeader();
        final ByteBuffer payload = ByteBuffer.allocate(64).order(ByteOrder.LITTLE_ENDIAN);

        @Override
        public boolean startSend(final FrameHeader sent, final ByteBuffer data)
        {
            header.buffer().putBytes(0, sent.buffer(), 0, io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH);
            payload.clear();
            payload.put(data.duplicate()).flip();
            return true;
        }
    }
}
