package io.blockmover.replication.log;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.Stream;
import java.util.zip.CRC32C;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.replication.log.RecordLogDescriptor.FILE_HEADER_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_HEADER_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.recordLength;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class RecordLogTest
{
    private static final long CAPACITY = 1 << 20;
    private static final int SEGMENT_LENGTH = 256 * 1024;
    private static final int MAX_RECORD_LENGTH = 64 * 1024;

    @TempDir
    Path dir;

    private final ByteBuffer payload = ByteBuffer.allocateDirect(MAX_RECORD_LENGTH);
    private final ByteBuffer payloadView = payload.duplicate();
    private final CRC32C claimCrc = new CRC32C();

    static void fill(final ByteBuffer buffer, final long lsn, final int length)
    {
        for (int i = 0; i < length; i++)
        {
            buffer.put(i, patternByte(lsn, i));
        }
    }

    static byte patternByte(final long lsn, final int i)
    {
        return (byte)(lsn * 31 + i * 7 + (i >>> 8));
    }

    static int lengthOf(final long lsn, final int maxRecordLength)
    {
        return (int)((lsn * 7919) % maxRecordLength) + 1;
    }

    private static void assertPattern(final ByteBuffer view, final long lsn, final int length)
    {
        assertEquals(length, view.remaining());
        final int start = view.position();
        for (int i = 0; i < length; i++)
        {
            if (view.get(start + i) != patternByte(lsn, i))
            {
                throw new AssertionError("payload of LSN " + lsn + " differs at byte " + i);
            }
        }
    }

    private RecordLog openSmall(final String name)
    {
        return RecordLog.open(dir.resolve(name), CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
    }

    /**
     * Appends the test pattern of {@code lsn}: odd LSNs through tryAppend (stores into the mapping), even ones
     * through claim and commit (a staging buffer written with pwrite), so every test that appends covers both and
     * their mix: padding, wrap, recovery, concurrent readers.
     */
    private long append(final RecordLog log, final long lsn, final int length)
    {
        fill(payload, lsn, length);
        if ((lsn & 1) == 1)
        {
            return log.tryAppend(lsn, (int)(lsn % 5), lsn * 512, 0, payload, 0, length);
        }
        final ByteBuffer claim = log.claim(length);
        if (claim == null)
        {
            return RecordLog.NO_SPACE;
        }
        claim.put(payload.duplicate().clear().limit(length));
        final CRC32C crc = new CRC32C();
        crc.update(payload.duplicate().clear().limit(length));
        try
        {
            return log.commit(lsn, (int)(lsn % 5), lsn * 512, 0, (int)crc.getValue());
        }
        catch (final RuntimeException ex)
        {
            log.abort();
            throw ex;
        }
    }

    /**
     * A resize copies the records not yet released into a new log byte for byte: the same LSNs, flags and CRCs, so a
     * record damaged in the old log stays detectably damaged (a new CRC would pass its damage on as good data).
     */
    @Test
    void shouldCopyTheUnreleasedRecordsIntoANewLogByteForByte() throws IOException
    {
        final long firstPosition;
        try (RecordLog from = RecordLog.open(dir.resolve("from"), CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
            RecordLog to = RecordLog.open(dir.resolve("to"), 4 * CAPACITY, MAX_RECORD_LENGTH))
        {
            from.reset(7);
            for (int i = 0; i < 4; i++)
            {
                payload.clear();
                for (int b = 0; b < 3000; b++)
                {
                    payload.put(b, (byte)(i * 7 + b));
                }
                final long position = from.tryAppend(7 + i, i % 2, i * 4096L, i == 3 ? 0 : 4, payload, 0, 3000);
                assertTrue(position >= 0);
                if (i == 0)
                {
                    from.release(position);
                }
            }
            final RecordLog.Cursor damage = from.newCursor();
            damage.position(from.headPosition());
            for (int i = 0; i < 3; i++)
            {
                assertTrue(damage.next());
            }
            damage.payload().put(damage.payload().position() + 10, (byte)0x5a); // LSN 10, through the mapping

            assertEquals(3, copyUnreleased(to, from));
            final RecordLog.Cursor copy = to.newCursor();
            copy.position(to.headPosition());
            for (int i = 1; i < 4; i++)
            {
                assertTrue(copy.next());
                assertEquals(7 + i, copy.lsn());
                assertEquals(i % 2, copy.volume());
                assertEquals(i * 4096L, copy.offset());
                assertEquals(i == 3 ? 0 : 4, copy.flags());
                assertEquals(i != 3, copy.verifyPayload(), "LSN " + copy.lsn() + " damaged only if it was before");
                assertEquals((byte)(i * 7 + 20), copy.payload().get(copy.payload().position() + 20));
            }
            assertFalse(copy.next());
            assertEquals(8, to.headLsn());
            assertEquals(10, to.tailLsn());
            assertEquals(to.tailPosition(), to.forcedPosition(), "forced before it returns");
            firstPosition = to.headPosition();
        }
        assertEquals(4 * CAPACITY, RecordLog.capacityOf(dir.resolve("to")));
        try (RecordLog reopened = RecordLog.open(dir.resolve("to"), 4 * CAPACITY, MAX_RECORD_LENGTH))
        {
            assertEquals(8, reopened.headLsn(), "the copy's head is durable");
            assertEquals(9, reopened.tailLsn(), "recovery ends before the damaged last record, as in the old log");
            assertEquals(firstPosition, reopened.headPosition());
        }
    }

    /**
     * The copy of a running group's log: the records there when it starts are copied while appends go on; then, the
     * appender stopped, a flag set since on a record already copied is taken again, and the records appended
     * meanwhile follow.
     */
    /** A copy in one go: the first and the last part, nothing between. */
    private static long copyUnreleased(final RecordLog to, final RecordLog from)
    {
        final long resumeAt = to.startCopyFrom(from);
        return resumeAt < 0 ? -1 : to.finishCopyFrom(from, resumeAt);
    }

    @Test
    void shouldCopyWhatWasAppendedAndFlaggedDuringTheFirstPartOfACopy() throws IOException
    {
        try (RecordLog from = RecordLog.open(dir.resolve("from"), CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
            RecordLog to = RecordLog.open(dir.resolve("to"), 2 * CAPACITY, MAX_RECORD_LENGTH))
        {
            from.reset(1);
            final long first = from.tryAppend(1, 0, 0, 0, payload, 0, 5000);
            assertTrue(from.tryAppend(2, 0, 8192, 4, payload, 0, 5000) >= 0);
            final long start = to.startCopyFrom(from);
            assertEquals(from.headPosition(), start);
            final long afterOne = to.continueCopyFrom(from, start, 1);
            assertEquals(1, to.tailLsn(), "a step copies whole records, at least one");
            final long resumeAt = to.continueCopyFrom(from, afterOne, Long.MAX_VALUE);
            assertEquals(from.tailPosition(), resumeAt);
            assertEquals(2, to.tailLsn());
            assertEquals(to.tailPosition(), to.forcedPosition(), "each step forces what it copied");

            from.markFlag(first, 4); // A write in flight reached its volume.
            assertTrue(from.tryAppend(3, 1, 4096, 0, payload, 0, 700) >= 0);
            assertEquals(3, to.finishCopyFrom(from, resumeAt));
            final RecordLog.Cursor copy = to.newCursor();
            copy.position(to.headPosition());
            assertTrue(copy.next());
            assertEquals(4, copy.flags(), "the flag set after the first part");
            assertTrue(copy.next());
            assertEquals(4, copy.flags());
            assertTrue(copy.next());
            assertEquals(3, copy.lsn());
            assertEquals(1, copy.volume());
            assertEquals(700, copy.length());
            assertTrue(copy.verifyPayload());
            assertFalse(copy.next());
            assertEquals(to.tailPosition(), to.forcedPosition());
        }
    }

    @Test
    void shouldNotCopyIntoALogThatTheRecordsWouldMoreThanHalfFill() throws IOException
    {
        try (RecordLog from = RecordLog.open(dir.resolve("from"), CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
            RecordLog to = RecordLog.open(dir.resolve("to"), CAPACITY / 2, MAX_RECORD_LENGTH, SEGMENT_LENGTH))
        {
            from.reset(1);
            final long[] positions = new long[5];
            for (int i = 0; i < 5; i++)
            {
                positions[i] = from.tryAppend(1 + i, 0, 0, 0, payload, 0, MAX_RECORD_LENGTH);
                assertTrue(positions[i] >= 0);
            }
            assertEquals(-1, copyUnreleased(to, from), "5 x 64 KiB is more than half of 512 KiB");
            assertTrue(to.isEmpty());
            assertEquals(RecordLog.NULL_LSN, to.headLsn(), "nothing written");

            // Appends during the copy outgrow the new log (two segments of three records): it is empty again, for
            // another start.
            from.release(positions[2]);
            final long start = to.startCopyFrom(from);
            assertTrue(start >= 0, "two records fit in half");
            for (int i = 5; i < 10; i++)
            {
                assertTrue(from.tryAppend(1 + i, 0, 0, 0, payload, 0, MAX_RECORD_LENGTH) >= 0);
            }
            assertEquals(-1, to.continueCopyFrom(from, start, Long.MAX_VALUE));
            assertTrue(to.isEmpty());
            assertEquals(from.headLsn(), to.tailLsn() + 1, "empty, ready to start again");
        }
    }

    @Test
    void shouldReadALogsCapacityFromItsHeaderOnly() throws IOException
    {
        RecordLog.open(dir.resolve("log"), 2 * CAPACITY, MAX_RECORD_LENGTH).close();
        assertEquals(2 * CAPACITY, RecordLog.capacityOf(dir.resolve("log")));
        Files.write(dir.resolve("garbage"), new byte[FILE_HEADER_LENGTH]);
        assertEquals(-1, RecordLog.capacityOf(dir.resolve("garbage")));
        Files.write(dir.resolve("short"), new byte[100]);
        assertEquals(-1, RecordLog.capacityOf(dir.resolve("short")));
        assertEquals(-1, RecordLog.capacityOf(dir.resolve("missing")));
    }

    @Test
    void shouldRoundTripRecordFieldsAndPayload()
    {
        try (RecordLog log = openSmall("a.log"))
        {
            assertTrue(log.isEmpty());
            assertEquals(CAPACITY, log.freeBytes());
            fill(payload, 100, 3000);
            final CRC32C crc = new CRC32C();
            crc.update(payload.duplicate().limit(3000));
            final long first = log.tryAppend(100, 7, 1L << 40, 0x10, payload, 0, 3000);
            assertEquals(0, first);
            final long second = append(log, 101, 1);
            assertEquals(recordLength(3000), second);
            final long third = append(log, 102, 0);

            assertFalse(log.isEmpty());
            assertEquals(100, log.headLsn());
            assertEquals(102, log.tailLsn());
            assertEquals(recordLength(3000) + recordLength(1) + recordLength(0), log.usedBytes());

            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertEquals(first, cursor.position());
            assertEquals(100, cursor.lsn());
            assertEquals(7, cursor.volume());
            assertEquals(1L << 40, cursor.offset());
            assertEquals(3000, cursor.length());
            assertEquals(0x10, cursor.flags());
            assertEquals((int)crc.getValue(), cursor.payloadCrc());
            assertTrue(cursor.verifyPayload());
            assertPattern(cursor.payload(), 100, 3000);

            assertTrue(cursor.next());
            assertEquals(101, cursor.lsn());
            assertPattern(cursor.payload(), 101, 1);
            assertTrue(cursor.next());
            assertEquals(third, cursor.position());
            assertEquals(0, cursor.length());
            assertFalse(cursor.next());

            log.markFlag(second, 0x4);
            log.markFlag(second, 0x1);
            assertEquals(0x5, log.flags(second));
            assertEquals(0x10, log.flags(first));

            assertThrows(IllegalArgumentException.class, () -> append(log, 104, 10), "an LSN gap is refused");
            assertThrows(IllegalArgumentException.class, () -> append(log, 102, 10), "a repeated LSN is refused");
            final ByteBuffer tooLong = ByteBuffer.allocate(MAX_RECORD_LENGTH + 1);
            assertThrows(IllegalArgumentException.class,
                () -> log.tryAppend(103, 0, 0, 0, tooLong, 0, MAX_RECORD_LENGTH + 1));
            assertEquals(102, log.tailLsn());
        }
    }

    /**
     * A payload damaged under the log (its disk or memory) is mended by rewriting it: recovery after a reopen must
     * then take the mended record and every record after it, not stop at it as at a torn tail.
     */
    @Test
    void shouldRewriteADamagedPayloadSoThatRecoveryKeepsItAndTheRecordsAfterIt()
    {
        final Path file = dir.resolve("mend.log");
        final long mended;
        try (RecordLog log = openSmall("mend.log"))
        {
            append(log, 1, 4096);
            mended = append(log, 2, 4096);
            append(log, 3, 100);
            log.markFlag(mended, 0x10000);
            log.force();

            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertTrue(cursor.next());
            final ByteBuffer damaged = cursor.payload();
            damaged.put(damaged.position() + 17, (byte)(damaged.get(damaged.position() + 17) ^ 0x40));
            assertFalse(cursor.verifyPayload(), "damaged through the mapping, as a bad disk or memory would");

            fill(payload, 77, 4096);
            log.rewritePayload(mended, payload.duplicate().clear().limit(4096));
            assertTrue(cursor.position(mended).next());
            assertTrue(cursor.verifyPayload());
            assertPattern(cursor.payload(), 77, 4096);
            assertEquals(0x10000, cursor.flags(), "the flags stay");
            assertThrows(IllegalArgumentException.class,
                () -> log.rewritePayload(mended, payload.duplicate().clear().limit(4095)), "another length");
        }
        try (RecordLog log = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH))
        {
            assertEquals(3, log.recovery().records(), "the mended record and the one after it are recovered");
            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertTrue(cursor.next());
            assertEquals(2, cursor.lsn());
            assertTrue(cursor.verifyPayload());
            assertPattern(cursor.payload(), 77, 4096);
        }
    }

    /**
     * A cursor that is not on a record (left behind released space that appends reused) fails with the position,
     * instead of taking payload bytes for a length.
     */
    @Test
    void shouldRefuseToReadARecordWhereThereIsNone()
    {
        try (RecordLog log = openSmall("nowhere.log"))
        {
            final long first = append(log, 1, 4096);
            append(log, 2, 4096);
            final RecordLog.Cursor cursor = log.newCursor().position(first + RECORD_HEADER_LENGTH + 1024);
            final IllegalStateException ex = assertThrows(IllegalStateException.class, cursor::next);
            assertTrue(ex.getMessage().contains("no record at position " + (first + RECORD_HEADER_LENGTH + 1024)),
                ex.getMessage());
            assertTrue(cursor.position(first).next(), "a record's own position still reads");
            assertEquals(1, cursor.lsn());
        }
    }

    @Test
    void shouldWrapManyTimesWithRandomSizesNeverCrossingASegment()
    {
        final Random random = new Random(42);
        try (RecordLog log = openSmall("wrap.log"))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            long nextAppend = 1;
            long nextRead = 1;
            final long records = 3000;
            final List<Integer> lengths = new ArrayList<>();
            while (nextRead <= records)
            {
                final int length = random.nextInt(MAX_RECORD_LENGTH + 1);
                if (nextAppend <= records)
                {
                    final long position = append(log, nextAppend, length);
                    if (position >= 0)
                    {
                        final long start = position % CAPACITY;
                        final long end = start + recordLength(length) - 1;
                        assertEquals(start / SEGMENT_LENGTH, end / SEGMENT_LENGTH, "record crosses a segment end");
                        lengths.add(length);
                        nextAppend++;
                    }
                }
                // Read (and release) a random number of records, so head and tail move at different paces.
                final int reads = random.nextInt(3);
                for (int i = 0; i < reads && cursor.next(); i++)
                {
                    assertEquals(nextRead, cursor.lsn());
                    assertEquals(lengths.get((int)(nextRead - 1)), cursor.length());
                    assertTrue(cursor.verifyPayload());
                    assertPattern(cursor.payload(), nextRead, cursor.length());
                    assertEquals((int)(nextRead % 5), cursor.volume());
                    log.release(cursor.position());
                    nextRead++;
                }
                log.force();
            }
            assertTrue(log.tailPosition() > 20 * CAPACITY, "wrapped many times: " + log.tailPosition());
            assertTrue(log.isEmpty());
            assertEquals(records + 1, log.headLsn());
        }
    }

    /**
     * A batch: records staged one by one, then written with one pwrite. Nothing is visible or appendable around it
     * until it is written; then every record reads back, and recovers, as if appended alone.
     */
    @Test
    void shouldPublishStagedRecordsOnlyOnceTheirBatchIsWritten()
    {
        final int[] lengths = {4096, 1, 600, 65536 - 100, 4096};
        try (RecordLog log = openSmall("batch.log"))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            long expected = 0;
            for (int i = 0; i < lengths.length; i++)
            {
                final long lsn = i + 1;
                fill(payload, lsn, lengths[i]);
                assertEquals(expected, log.stage(lsn, (int)(lsn % 5), lsn * 512, 0, payload, 0, lengths[i]));
                expected += recordLength(lengths[i]);
            }
            assertEquals(5, log.stagedRecords());
            assertEquals(5, log.lastStagedLsn());
            assertFalse(cursor.next(), "nothing published before the batch is written");
            assertEquals(0, log.tailPosition());
            assertThrows(IllegalStateException.class, () -> log.tryAppend(6, 0, 0, 0, payload, 0, 10));
            assertThrows(IllegalStateException.class, () -> log.claim(10));
            assertThrows(IllegalArgumentException.class, () -> log.stage(7, 0, 0, 0, payload, 0, 10),
                "LSNs follow the staged ones");

            assertEquals(5, log.writeBatch());
            assertEquals(0, log.writeBatch(), "nothing left");
            assertEquals(expected, log.tailPosition());
            assertEquals(5, log.tailLsn());
            for (int i = 0; i < lengths.length; i++)
            {
                assertTrue(cursor.next());
                assertEquals(i + 1, cursor.lsn());
                assertTrue(cursor.verifyPayload());
                assertPattern(cursor.payload(), i + 1, lengths[i]);
                assertEquals((i + 1) * 512L, cursor.offset());
            }
            assertTrue(append(log, 6, 100) >= 0, "appends go on after it");
        }
        try (RecordLog log = openSmall("batch.log"))
        {
            assertEquals(6, log.recovery().records());
            assertEquals(1, log.recovery().firstLsn());
        }
    }

    /**
     * A batch stops where a record would not fit it or its segment: the caller writes it and appends that record
     * alone (with padding). Many laps of random batches and sizes, read and released as they go, then recovered.
     */
    @Test
    void shouldStageBatchesAcrossSegmentsAndLapsAndRecoverEveryRecord()
    {
        final Random random = new Random(7);
        final List<Integer> lengths = new ArrayList<>();
        long nextRead = 1;
        try (RecordLog log = openSmall("batches.log"))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            long lsn = 1;
            int notStaged = 0;
            while (lsn <= 4000)
            {
                final int batch = 1 + random.nextInt(12);
                for (int i = 0; i < batch; i++)
                {
                    final int length = random.nextInt(4) == 0 ? random.nextInt(MAX_RECORD_LENGTH + 1) : 4096;
                    fill(payload, lsn, length);
                    long position = log.stage(lsn, (int)(lsn % 5), lsn * 512, 0, payload, 0, length);
                    if (position == RecordLog.NOT_STAGED)
                    {
                        notStaged++;
                        log.writeBatch();
                        position = log.tryAppend(lsn, (int)(lsn % 5), lsn * 512, 0, payload, 0, length);
                    }
                    if (position == RecordLog.NO_SPACE)
                    {
                        break;
                    }
                    final long start = position % CAPACITY;
                    assertEquals(start / SEGMENT_LENGTH, (start + recordLength(length) - 1) / SEGMENT_LENGTH,
                        "record crosses a segment end");
                    lengths.add(length);
                    lsn++;
                }
                log.writeBatch();
                final int reads = random.nextInt(batch + 4);
                for (int i = 0; i < reads && cursor.next(); i++)
                {
                    assertEquals(nextRead, cursor.lsn());
                    assertEquals(lengths.get((int)(nextRead - 1)), cursor.length());
                    assertTrue(cursor.verifyPayload(), "LSN " + nextRead);
                    assertPattern(cursor.payload(), nextRead, cursor.length());
                    log.release(cursor.position());
                    nextRead++;
                }
                log.force();
            }
            assertTrue(log.tailPosition() > 10 * CAPACITY, "wrapped many times: " + log.tailPosition());
            assertTrue(notStaged > 10, "batches ended early: " + notStaged);
        }
        try (RecordLog log = openSmall("batches.log"))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            cursor.position(log.headPosition());
            long read = nextRead;
            while (cursor.next())
            {
                assertEquals(read, cursor.lsn());
                assertTrue(cursor.verifyPayload());
                assertPattern(cursor.payload(), read, lengths.get((int)(read - 1)));
                read++;
            }
            assertEquals(lengths.size() + 1, read, "every record not released is recovered");
        }
    }

    /**
     * A batch torn by a crash (its pwrite only partly reached the file) recovers as a prefix of its records, as
     * separate appends would: recovery checks each record.
     */
    @Test
    void shouldRecoverAPrefixOfABatchWhoseWriteWasTorn() throws IOException
    {
        final Path file = dir.resolve("torn.log");
        try (RecordLog log = openSmall("torn.log"))
        {
            for (long lsn = 1; lsn <= 4; lsn++)
            {
                fill(payload, lsn, 4096);
                log.stage(lsn, 0, lsn * 4096, 0, payload, 0, 4096);
            }
            log.writeBatch();
            log.force();
        }
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE))
        {
            // The third record's payload never reached the disk: its last page is zeros.
            channel.write(ByteBuffer.allocate(4096), FILE_HEADER_LENGTH + 2L * recordLength(4096) + 64 + 2048);
        }
        try (RecordLog log = openSmall("torn.log"))
        {
            assertEquals(2, log.recovery().records());
            assertEquals(2, log.tailLsn());
            fill(payload, 3, 4096);
            assertTrue(log.stage(3, 0, 3 * 4096, 0, payload, 0, 4096) >= 0, "the next batch takes LSN 3");
            log.writeBatch();
            assertEquals(3, log.tailLsn());
        }
    }

    /**
     * The file refuses the batch's write (made immutable: EPERM, as a failing disk gives EIO). The batch is dropped
     * as if never staged, the error is thrown, and the next records take its LSNs and its place.
     */
    @Test
    void shouldDropABatchTheFileRefusesAndGiveItsLsnsToTheNextRecords() throws Exception
    {
        final Path file = dir.resolve("refused.log");
        try (RecordLog log = openSmall("refused.log"))
        {
            assertTrue(append(log, 1, 100) >= 0);
            fill(payload, 2, 4096);
            log.stage(2, 0, 0, 0, payload, 0, 4096);
            log.stage(3, 0, 0, 0, payload, 0, 4096);
            assumeTrue(chattr("+i", file), "chattr +i needs root and a file system that has the flag");
            try
            {
                assertThrows(UncheckedIOException.class, log::writeBatch);
            }
            finally
            {
                assertTrue(chattr("-i", file));
            }
            assertEquals(0, log.stagedRecords());
            assertEquals(1, log.tailLsn());
            fill(payload, 2, 4096);
            assertEquals(recordLength(100), log.stage(2, 0, 0, 0, payload, 0, 4096));
            assertEquals(1, log.writeBatch());
            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertTrue(cursor.next());
            assertEquals(2, cursor.lsn());
            assertPattern(cursor.payload(), 2, 4096);
            assertFalse(cursor.next());
        }
    }

    private static boolean chattr(final String flag, final Path file) throws IOException, InterruptedException
    {
        final Process p = new ProcessBuilder("chattr", flag, file.toString()).redirectErrorStream(true).start();
        p.getInputStream().readAllBytes();
        return p.waitFor() == 0;
    }

    /**
     * A sparse log made every force of its first lap allocate blocks too (and a fallocated one would convert
     * extents): the production open writes every block once, while tests that need a huge log keep it sparse.
     */
    @Test
    void shouldWriteEveryBlockOfANewLogSoForcesNeverAllocate() throws IOException, InterruptedException
    {
        final Path file = dir.resolve("allocated.log");
        try (RecordLog log = RecordLog.open(file, 8L << 20, MAX_RECORD_LENGTH))
        {
            assertTrue(append(log, 1, 4096) >= 0);
            log.force();
        }
        final long size = Files.size(file);
        assertTrue(allocatedBytes(file) >= size, "allocated " + allocatedBytes(file) + " of " + size);
        try (RecordLog log = RecordLog.open(file, 8L << 20, MAX_RECORD_LENGTH))
        {
            assertEquals(1, log.recovery().records(), "the zeros are not mistaken for records");
        }

        final Path sparse = dir.resolve("sparse.log");
        RecordLog.open(sparse, 8L << 20, MAX_RECORD_LENGTH, 1 << 20).close();
        assertTrue(allocatedBytes(sparse) < Files.size(sparse) / 2, "the test-only open stays sparse");
    }

    /**
     * An async partner forces its log only every flush.interval; meanwhile write-behind starts the write-out of each
     * megabyte appended (sync_file_range), so a force does not write an interval's worth at once. Every appended
     * byte is started exactly once, across the wrap, and never more than one lap of the ring per call.
     */
    @Test
    void shouldStartTheWriteOutOfEachAppendedMegabyteOnceAcrossTheWrap()
    {
        final long capacity = 4L << 20;
        try (RecordLog log = RecordLog.open(dir.resolve("behind.log"), capacity, MAX_RECORD_LENGTH, 1 << 20))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            final int length = 60_000;
            long lsn = 1;
            long started = 0;
            long lastStartedAt = 0;
            boolean sawNothingToStart = false;
            while (log.tailPosition() < 3 * capacity)
            {
                while (append(log, lsn, length) < 0)
                {
                    assertTrue(cursor.next());
                    log.release(cursor.position());
                    log.force();
                }
                lsn++;
                final long pending = log.tailPosition() - lastStartedAt;
                final long now = log.writeBehind();
                if (pending < RecordLog.WRITE_BEHIND_BYTES)
                {
                    assertEquals(0, now, "less than the threshold waits");
                    sawNothingToStart = true;
                }
                else
                {
                    assertEquals(pending, now, "the kernel accepted the whole span, wrapped or not");
                    lastStartedAt = log.tailPosition();
                }
                started += now;
            }
            assertTrue(sawNothingToStart);
            assertEquals(lastStartedAt, started, "each byte once");
            assertEquals(started, log.writeBehindBytes());

            for (int i = 0; i < 80; i++)
            {
                while (append(log, lsn, length) < 0)
                {
                    assertTrue(cursor.next());
                    log.release(cursor.position());
                    log.force();
                }
                lsn++;
            }
            assertTrue(log.tailPosition() - lastStartedAt > capacity);
            assertEquals(capacity, log.writeBehind(), "more than a lap pending: the ring, once");
        }
    }

    private static long allocatedBytes(final Path file) throws IOException, InterruptedException
    {
        final Process stat = new ProcessBuilder("stat", "-c", "%b %B", file.toString()).start();
        final String[] out = new String(stat.getInputStream().readAllBytes(), StandardCharsets.US_ASCII).trim()
            .split(" ");
        assertEquals(0, stat.waitFor());
        return Long.parseLong(out[0]) * Long.parseLong(out[1]);
    }

    /**
     * The source's front end appends while its shipper and flushes force from other threads. A CRC object shared
     * between the two once gave appends wrong payload CRCs, which the partner then refused forever.
     */
    @Test
    void shouldKeepEveryPayloadCrcWhenForcedFromAnotherThreadDuringAppends() throws InterruptedException
    {
        try (RecordLog log = RecordLog.open(dir.resolve("forced.log"), 16L << 20, MAX_RECORD_LENGTH))
        {
            final java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
            final java.util.concurrent.atomic.AtomicLong verified = new java.util.concurrent.atomic.AtomicLong(-1);
            final Thread forcer = new Thread(() ->
            {
                long released = -1;
                while (!done.get())
                {
                    // Release what the reader checked, so that every force writes a head slot and its CRC.
                    final long position = verified.get();
                    if (position > released)
                    {
                        log.release(position);
                        released = position;
                    }
                    log.force();
                }
            });
            forcer.start();
            final RecordLog.Cursor reader = log.newCursor();
            long lsn = 1;
            long checked = 0;
            final long endNs = System.nanoTime() + 2_000_000_000L;
            while (System.nanoTime() < endNs)
            {
                fill(payload, lsn, MAX_RECORD_LENGTH);
                if (log.tryAppend(lsn, 0, lsn * 4096, 0, payload, 0, MAX_RECORD_LENGTH) >= 0)
                {
                    lsn++;
                }
                while (reader.next())
                {
                    assertTrue(reader.verifyPayload(), "payload CRC of LSN " + reader.lsn());
                    verified.set(reader.position());
                    checked++;
                }
            }
            done.set(true);
            forcer.join();
            assertEquals(lsn - 1, checked);
        }
    }

    @Test
    void shouldReturnNoSpaceWhenFullAndSpaceAfterRelease()
    {
        try (RecordLog log = openSmall("full.log"))
        {
            final int length = 4000;
            long lsn = 1;
            while (append(log, lsn, length) >= 0)
            {
                lsn++;
            }
            final long appended = lsn - 1;
            assertTrue(log.freeBytes() < recordLength(length) * 2L, "free " + log.freeBytes());
            assertEquals(RecordLog.NO_SPACE, append(log, lsn, length));
            assertNull(log.claim(length));

            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertTrue(cursor.next());
            log.release(cursor.position());
            assertEquals(RecordLog.NO_SPACE, append(log, lsn, length), "released space is reusable after force");
            log.force();
            assertTrue(append(log, lsn, length) >= 0);
            assertEquals(appended + 1, log.tailLsn());
            assertEquals(3, log.headLsn());
        }
    }

    /**
     * A source's log frees room by persisting its head alone: records released are the partner's to keep, and
     * forcing the rest would write every record to this disk only to release it moments later. The room is
     * reusable at once; the records stay unforced; and a log dropped without a force recovers from the new head.
     */
    @Test
    void shouldMakeReleasedRoomReusableByPersistingTheHeadAloneWithoutForcingRecords()
    {
        final Path file = dir.resolve("head-alone.log");
        final long forcedBefore;
        final RecordLog log = openSmall("head-alone.log");
        long lsn = 1;
        while (append(log, lsn, 4000) >= 0)
        {
            lsn++;
        }
        forcedBefore = log.forcedPosition();
        final RecordLog.Cursor cursor = log.newCursor();
        for (int i = 0; i < 20; i++)
        {
            assertTrue(cursor.next());
        }
        log.release(cursor.position());
        assertEquals(RecordLog.NO_SPACE, append(log, lsn, 4000), "released room is not reusable before");

        log.persistHead();
        assertTrue(log.isHeadPersisted());
        assertEquals(forcedBefore, log.forcedPosition(), "no record was forced");
        assertEquals(CAPACITY - log.usedBytes(), log.freeBytes(), "the released room is reusable");
        assertTrue(append(log, lsn, 4000) >= 0);

        // Dropped without a force: recovery starts at the persisted head, LSN 21, and finds every later record
        // the page cache holds.
        final RecordLog dropped = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
        assertEquals(21, dropped.headLsn());
        assertEquals(lsn, dropped.tailLsn());
        dropped.close();
        log.close();
    }

    /**
     * A source's released records are dropped from the page cache before the kernel writes them back: the file
     * reads zeros there afterwards. Every record after the persisted head stays whole, through appends that wrap
     * into the zeroed range and through recovery of a log dropped without a force. Without the discard, the range
     * still holds the released records.
     */
    @Test
    void shouldDiscardReleasedRecordsBehindThePersistedHeadAndKeepEveryLaterOne() throws IOException
    {
        final Path file = dir.resolve("discard.log");
        final RecordLog log = openSmall("discard.log");
        assumeTrue(log.isDiscardable(), "discards need ext4; " + dir + " is on " + Files.getFileStore(dir).type());
        long lsn = 1;
        while (append(log, lsn, lengthOf(lsn, 4000)) >= 0)
        {
            lsn++;
        }
        final RecordLog.Cursor cursor = log.newCursor();
        while (cursor.nextPosition() < CAPACITY / 2)
        {
            assertTrue(cursor.next());
        }
        final long firstKept = cursor.lsn() + 1;
        log.release(cursor.position());
        final long head = log.headPosition();

        log.persistHeadForDiscard();
        assertTrue(log.isHeadPersisted());
        assertEquals(CAPACITY - log.usedBytes() - head, log.freeBytes(), "withheld from appends until discarded");
        long dealt = 0;
        for (long done; (done = log.discardReleased(128 * 1024)) > 0; )
        {
            dealt += done;
        }
        assertEquals(head, dealt, "every released byte dealt with");
        final long zeroedEnd = (FILE_HEADER_LENGTH + head) & -RecordLog.DISCARD_ALIGNMENT;
        final long zeroedStart = RecordLog.DISCARD_ALIGNMENT;
        assertEquals(zeroedEnd - zeroedStart, log.discardedBytes());
        assertEquals(CAPACITY - log.usedBytes(), log.freeBytes(), "reusable once discarded");
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ))
        {
            final ByteBuffer bytes = ByteBuffer.allocate((int)(zeroedEnd - zeroedStart));
            channel.read(bytes, zeroedStart);
            for (int i = 0; i < bytes.capacity(); i++)
            {
                if (bytes.get(i) != 0)
                {
                    throw new AssertionError("released byte " + (zeroedStart + i) + " of the file is still there");
                }
            }
        }

        // Appends wrap into the zeroed range; the log, and a copy of it dropped without a force, hold every record.
        final long lastBeforeWrap = lsn - 1;
        while (append(log, lsn, lengthOf(lsn, 4000)) >= 0)
        {
            lsn++;
        }
        assertTrue(lsn - 1 > lastBeforeWrap, "appends reused the discarded room");
        final RecordLog dropped = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
        for (final RecordLog each : new RecordLog[] {log, dropped})
        {
            final RecordLog.Cursor reader = each.newCursor();
            for (long l = firstKept; l < lsn; l++)
            {
                assertTrue(reader.next(), "record " + l);
                assertEquals(l, reader.lsn());
                assertTrue(reader.verifyPayload(), "payload of record " + l);
                assertPattern(reader.payload(), l, lengthOf(l, 4000));
            }
            assertFalse(reader.next());
        }
        dropped.close();
        log.close();
    }

    /**
     * Appends LSNs 1 to 100 of 4000 bytes and releases the first 50, without a force.
     *
     * @return the cursor, on LSN 50.
     */
    private RecordLog.Cursor appendHundredReleaseFifty(final RecordLog log)
    {
        for (long lsn = 1; lsn <= 100; lsn++)
        {
            assertTrue(append(log, lsn, 4000) >= 0);
        }
        final RecordLog.Cursor cursor = log.newCursor();
        for (int i = 0; i < 50; i++)
        {
            assertTrue(cursor.next());
        }
        log.release(cursor.position());
        return cursor;
    }

    /**
     * What waits to be discarded never stands in the way: an append that needs the room persists the head, and a
     * force, either of which gives the discard up at once; records forced before they were released are clean and
     * are never discarded.
     */
    @Test
    void shouldGiveUpADiscardWhenTheRoomIsNeededOrTheRecordsWereForced()
    {
        try (RecordLog log = openSmall("discard-given-up.log"))
        {
            assumeTrue(log.isDiscardable(), "discards need ext4");
            final RecordLog.Cursor cursor = appendHundredReleaseFifty(log);
            log.persistHeadForDiscard();
            assertTrue(log.freeBytes() < CAPACITY - log.usedBytes());
            log.persistHead();
            assertEquals(CAPACITY - log.usedBytes(), log.freeBytes(), "room needed: reusable at once");
            assertEquals(0, log.discardReleased(Long.MAX_VALUE));

            for (int i = 0; i < 20; i++)
            {
                assertTrue(cursor.next());
            }
            log.release(cursor.position());
            log.persistHeadForDiscard();
            log.force();
            assertEquals(CAPACITY - log.usedBytes(), log.freeBytes(), "forced: reusable at once");
            assertEquals(0, log.discardReleased(Long.MAX_VALUE));
            assertEquals(0, log.discardedBytes());
        }
    }

    /**
     * @return a path on /dev/shm (tmpfs) where no file is yet; the test is skipped where there is none.
     */
    private static Path tmpfsFile(final String prefix) throws IOException
    {
        final Path shm = Path.of("/dev/shm");
        assumeTrue(Files.isDirectory(shm) && "tmpfs".equals(Files.getFileStore(shm).type()), "needs /dev/shm");
        final Path file = Files.createTempFile(shm, prefix, ".log");
        Files.delete(file);
        return file;
    }

    /**
     * Where a zero range would write the pages back first (every file system but ext4, tmpfs among them), the
     * log keeps them: the released room is reusable as soon as the head is persisted.
     */
    @Test
    void shouldNotDiscardOutsideExt4() throws IOException
    {
        final Path file = tmpfsFile("blockmover-discard-");
        try (RecordLog log = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH))
        {
            assertFalse(log.isDiscardable());
            appendHundredReleaseFifty(log);
            log.persistHeadForDiscard();
            assertEquals(CAPACITY - log.usedBytes(), log.freeBytes());
            assertEquals(0, log.discardReleased(Long.MAX_VALUE));
        }
        finally
        {
            Files.deleteIfExists(file);
        }
    }

    private RecordLog openPrepared(final String name)
    {
        RecordLog.prepare(dir.resolve(name), CAPACITY, MAX_RECORD_LENGTH);
        return RecordLog.open(dir.resolve(name), CAPACITY, MAX_RECORD_LENGTH);
    }

    /**
     * Fills the log, releases its first half, and discards what was released (zeroes it in the file).
     *
     * @return the next LSN to append.
     */
    private long fillReleaseHalfAndDiscard(final RecordLog log, final long firstLsn)
    {
        long lsn = firstLsn;
        while (append(log, lsn, 4000) >= 0)
        {
            lsn++;
        }
        final RecordLog.Cursor cursor = log.newCursor();
        cursor.position(log.headPosition());
        while (cursor.nextPosition() < log.headPosition() + CAPACITY / 2)
        {
            assertTrue(cursor.next());
        }
        log.release(cursor.position());
        log.persistHeadForDiscard();
        while (log.discardReleased(Long.MAX_VALUE) > 0)
        {
            assertTrue(log.discardedBytes() > 0);
        }
        return lsn;
    }

    /**
     * A FLUSH whose volume's device flush reaches the log's disk has the log's pages written and leaves the flush
     * to the volume's: only where writing them changes none of the file's metadata. Over blocks a discard zeroed
     * (unwritten extents on ext4), the file must be forced, until a force has recorded them written again.
     */
    @Test
    void shouldLeaveTheDiskFlushToTheCallerOnlyOverBlocksWrittenBefore()
    {
        try (RecordLog log = openPrepared("shared-flush.log"))
        {
            assumeTrue(log.isDiscardable(), "needs ext4");
            log.headPersistInterval(Long.MAX_VALUE);
            assertTrue(append(log, 1, 4000) >= 0);
            final long written = log.writeOutForDeviceFlush();
            assertEquals(log.tailPosition(), written, "a prepared log's blocks are all written");
            assertEquals(0, log.forcedPosition());
            log.flushedThrough(written);
            assertEquals(written, log.forcedPosition());

            long lsn = fillReleaseHalfAndDiscard(log, 2);
            final long zeroedFrom = log.forcedPosition();
            assertEquals(log.tailPosition(), log.writeOutForDeviceFlush(), "nothing lies over zeroed blocks yet");
            while (log.tailPosition() <= zeroedFrom + CAPACITY)
            {
                assertTrue(append(log, lsn++, 4000) >= 0);
            }
            assertEquals(-1, log.writeOutForDeviceFlush(), "records over zeroed blocks: a force only");
            log.force();
            assertTrue(append(log, lsn++, 4000) >= 0);
            assertEquals(-1, log.writeOutForDeviceFlush(), "until every zeroed block is written over and forced");
            releaseAll(log);
            log.force();
            while (append(log, lsn, 4000) >= 0)
            {
                lsn++;
            }
            log.force();
            releaseAll(log);
            log.force();
            assertTrue(append(log, lsn, 4000) >= 0);
            assertEquals(log.tailPosition(), log.writeOutForDeviceFlush(),
                "zeroed blocks written over and forced: the disk flush will do");
        }
    }

    private static void releaseAll(final RecordLog log)
    {
        final RecordLog.Cursor cursor = log.newCursor();
        cursor.position(log.headPosition());
        while (cursor.next())
        {
            log.release(cursor.position());
        }
    }

    /**
     * A log reopened after discards finds the blocks they left zeroed (FIEMAP: unwritten extents) and keeps the
     * force for records that land on them. A sparse log (tests) finds its holes the same way.
     */
    @Test
    void shouldFindTheBlocksLeftUnwrittenWhenReopened()
    {
        final long zeroedFrom;
        long lsn;
        try (RecordLog log = openPrepared("reopened.log"))
        {
            assumeTrue(log.isDiscardable(), "needs ext4");
            lsn = fillReleaseHalfAndDiscard(log, 1);
            zeroedFrom = log.headPosition() - CAPACITY / 2;
            log.force();
        }
        try (RecordLog log = RecordLog.open(dir.resolve("reopened.log"), CAPACITY, MAX_RECORD_LENGTH))
        {
            log.headPersistInterval(Long.MAX_VALUE);
            assertTrue(append(log, lsn++, 4000) >= 0);
            assertEquals(log.tailPosition(), log.writeOutForDeviceFlush(), "appended over blocks still written");
            while (log.tailPosition() <= zeroedFrom + CAPACITY + RecordLog.DISCARD_ALIGNMENT + 8192)
            {
                assertTrue(append(log, lsn++, 4000) >= 0);
            }
            assertEquals(-1, log.writeOutForDeviceFlush(), "records over blocks zeroed before the reopen");
        }
        try (RecordLog sparse = openSmall("sparse.log"))
        {
            assertTrue(append(sparse, 1, 4000) >= 0);
            assertEquals(-1, sparse.writeOutForDeviceFlush(), "records over holes: a force only");
        }
    }

    /**
     * Outside ext4 (tmpfs here) writing a file's pages is not known to leave its metadata alone: always a force.
     */
    @Test
    void shouldAlwaysForceALogOutsideExt4() throws IOException
    {
        final Path file = tmpfsFile("blockmover-shared-flush-");
        try
        {
            RecordLog.prepare(file, CAPACITY, MAX_RECORD_LENGTH);
            try (RecordLog log = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH))
            {
                assertTrue(append(log, 1, 4000) >= 0);
                assertEquals(-1, log.writeOutForDeviceFlush());
            }
        }
        finally
        {
            Files.deleteIfExists(file);
        }
    }

    /**
     * The force after each batch of a sync partner makes the records durable; the released head (a page of its
     * own) only when enough was released, time passed, or room is getting short. A full force always writes it.
     */
    @Test
    void shouldPersistTheReleasedHeadOnAForceOfRecordsOnlyWhenDue()
    {
        try (RecordLog log = openSmall("lazy-head.log"))
        {
            log.headPersistInterval(Long.MAX_VALUE);
            final RecordLog.Cursor cursor = log.newCursor();
            long lsn = 1;
            for (; lsn <= 4; lsn++)
            {
                assertTrue(append(log, lsn, 4000) >= 0);
            }
            assertTrue(cursor.next());
            log.release(cursor.position());
            log.forceRecords();
            assertFalse(log.isHeadPersisted(), "one small record released: the head waits");
            assertEquals(CAPACITY - log.usedBytes() - recordLength(4000), log.freeBytes(), "not reusable yet");

            while (log.headPosition() < CAPACITY / 16)
            {
                assertTrue(append(log, lsn++, 4000) >= 0);
                assertTrue(cursor.next());
                log.release(cursor.position());
            }
            log.forceRecords();
            assertTrue(log.isHeadPersisted(), "a 16th of the log released: the head is due");
            assertEquals(CAPACITY - log.usedBytes(), log.freeBytes(), "released room is reusable");

            while (log.freeBytes() >= CAPACITY / 2)
            {
                assertTrue(append(log, lsn++, 4000) >= 0);
            }
            assertTrue(cursor.next());
            log.release(cursor.position());
            log.forceRecords();
            assertTrue(log.isHeadPersisted(), "less than half free: the head is due");

            assertTrue(cursor.next());
            log.release(cursor.position());
            log.force();
            assertTrue(log.isHeadPersisted(), "a full force always persists it");
        }
    }

    @Test
    void shouldRecoverRecordsAndHeadAfterCloseAndAfterDrop()
    {
        final Path file = dir.resolve("recover.log");
        final long tail;
        try (RecordLog log = openSmall("recover.log"))
        {
            for (long lsn = 1; lsn <= 300; lsn++)
            {
                assertTrue(append(log, lsn, lengthOf(lsn, 4000)) >= 0);
            }
            final RecordLog.Cursor cursor = log.newCursor();
            for (int i = 0; i < 10; i++)
            {
                assertTrue(cursor.next());
            }
            log.release(cursor.position());
            tail = log.tailPosition();
        }

        // Dropped without close or force: what a killed process leaves in the page cache.
        final RecordLog dropped = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH);
        assertEquals(new RecordLog.Recovery(290, 11, 300, dropped.headPosition(), tail), dropped.recovery());
        assertEquals(11, dropped.headLsn());
        assertEquals(300, dropped.tailLsn());
        assertTrue(append(dropped, 301, 100) >= 0);

        try (RecordLog log = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH))
        {
            assertEquals(291, log.recovery().records());
            assertEquals(301, log.tailLsn());
            final RecordLog.Cursor cursor = log.newCursor();
            for (long lsn = 11; lsn <= 301; lsn++)
            {
                assertTrue(cursor.next());
                assertEquals(lsn, cursor.lsn());
                assertTrue(cursor.verifyPayload());
                assertPattern(cursor.payload(), lsn, lsn == 301 ? 100 : lengthOf(lsn, 4000));
            }
            assertFalse(cursor.next());
            assertTrue(append(log, 302, 10) >= 0, "appends continue after recovery");
        }
        dropped.close();
    }

    /**
     * A long recovery scan reports how far it has gone, so that the daemon can tell systemd it progresses (a full
     * log of tens of GiB takes minutes on a slow disk, longer than a start timeout); a log with nothing to scan
     * reports nothing.
     */
    @Test
    void shouldReportProgressWhileRecoveryScansALongLog()
    {
        // Beyond recovery's read-ahead window (32 MiB), which it asks for at once, then a MiB at a time.
        final long capacity = 64L << 20;
        final Path file = dir.resolve("progress.log");
        final List<long[]> calls = new ArrayList<>();
        final RecordLog.RecoveryProgress progress = (checked, most) -> calls.add(new long[] {checked, most});
        try (RecordLog log = RecordLog.open(file, capacity, MAX_RECORD_LENGTH, progress))
        {
            assertEquals(List.of(), calls, "an empty log has nothing to report");
            long lsn = 1;
            while (append(log, lsn, MAX_RECORD_LENGTH) >= 0)
            {
                lsn++;
            }
            assertTrue(lsn > 1000, "the log filled up with records: " + lsn);
            log.force();
        }

        try (RecordLog log = RecordLog.open(file, capacity, MAX_RECORD_LENGTH, progress))
        {
            final long scanned = log.recovery().tailPosition() - log.recovery().headPosition();
            assertTrue(scanned > capacity - 2 * MAX_RECORD_LENGTH, "the scan went through the log: " + scanned);
            assertTrue(calls.size() >= 25, "a report for each MiB asked beyond the first window: " + calls.size());
            long previous = -1;
            for (final long[] call : calls)
            {
                assertTrue(call[0] > previous && call[0] <= scanned, "checked bytes grow: " + call[0]);
                assertEquals(capacity, call[1]);
                previous = call[0];
            }
        }
    }

    /**
     * A log bigger than its file system's free space is refused before a byte is written: it used to be written
     * until the disk was full (the whole file system, for every service of the host) and fail a minute later.
     */
    @Test
    void shouldRefuseALogItsFileSystemHasNoRoomFor() throws IOException
    {
        final Path file = dir.resolve("huge.log");
        final long free = Files.getFileStore(dir).getUsableSpace();
        final long capacity = ((free >> 30) + 2) << 30; // whole GiB, a valid geometry, 1-2 GiB more than is free

        final long startNs = System.nanoTime();
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> RecordLog.prepare(file, capacity, MAX_RECORD_LENGTH));

        assertEquals(ErrorCode.BAD_REQUEST, ex.code());
        assertTrue(ex.getMessage().contains("stays free for the rest of the host: choose --log-size "),
            ex.getMessage());
        assertTrue(System.nanoTime() - startNs < TimeUnit.SECONDS.toNanos(5), "refused before writing");
        try (Stream<Path> left = Files.list(dir))
        {
            assertEquals(List.of(), left.toList(), "nothing written");
        }
    }

    /**
     * A log whose writing is cancelled (its create refused by the partner, or deleted) stops at the next MiB and
     * leaves nothing: no log, and no half-written temporary file taking the room.
     */
    @Test
    void shouldStopWritingALogWhenCancelledAndLeaveNothing() throws IOException
    {
        final Path file = dir.resolve("cancelled.log");
        final AtomicLong written = new AtomicLong();
        final AtomicInteger asked = new AtomicInteger();

        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> RecordLog.prepare(file, 64L << 20, MAX_RECORD_LENGTH, written, () -> asked.incrementAndGet() > 3));

        assertEquals(ErrorCode.CANCELLED, ex.code(), ex.getMessage());
        assertEquals(4, asked.get(), "asked before each MiB, and stopped at once");
        assertTrue(written.get() > 0 && written.get() < 4L << 20, "written: " + written.get());
        try (Stream<Path> left = Files.list(dir))
        {
            assertEquals(List.of(), left.toList(), "nothing kept");
        }
    }

    @Test
    void shouldStopRecoveryBeforeADamagedPayload() throws IOException
    {
        final long position = writeTenRecords("payload.log");
        corrupt(dir.resolve("payload.log"), position + RECORD_HEADER_LENGTH + 17, (byte)0x55);
        assertRecoveredUpTo("payload.log", 9, position);
    }

    @Test
    void shouldStopRecoveryBeforeADamagedHeader() throws IOException
    {
        final long position = writeTenRecords("header.log");
        corrupt(dir.resolve("header.log"), position + RecordLogDescriptor.RECORD_OFFSET_OFFSET, (byte)0x55);
        assertRecoveredUpTo("header.log", 9, position);
    }

    @Test
    void shouldStopRecoveryBeforeATornTail() throws IOException
    {
        final long position = writeTenRecords("torn.log");
        final int length = recordLength(lengthOf(10, 4000));
        try (FileChannel channel = FileChannel.open(dir.resolve("torn.log"), StandardOpenOption.WRITE))
        {
            channel.write(ByteBuffer.allocate(length / 2), FILE_HEADER_LENGTH + position + length - length / 2);
        }
        assertRecoveredUpTo("torn.log", 9, position);
    }

    @Test
    void shouldNotTakeAStaleRecordForTheNextOneAfterReset()
    {
        final Path file = dir.resolve("reset.log");
        try (RecordLog log = openSmall("reset.log"))
        {
            for (long lsn = 1; lsn <= 5; lsn++)
            {
                append(log, lsn, 100);
            }
            log.reset(1000);
            assertTrue(log.isEmpty());
            assertEquals(999, log.tailLsn());
            assertThrows(IllegalArgumentException.class, () -> append(log, 6, 100));
            assertTrue(append(log, 1000, 100) >= 0);
        }
        try (RecordLog log = RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH, SEGMENT_LENGTH))
        {
            assertEquals(1, log.recovery().records());
            assertEquals(1000, log.headLsn());
            assertEquals(1000, log.tailLsn());
        }
    }

    @Test
    void shouldRefuseClaimWithBadCrcAndLeaveNoRecord()
    {
        try (RecordLog log = openSmall("claim.log"))
        {
            ByteBuffer view = log.claim(1000);
            assertNotNull(view);
            assertEquals(1000, view.remaining());
            fill(payload, 1, 1000);
            view.put(payload.duplicate().limit(1000));
            assertEquals(RecordLog.CRC_MISMATCH, log.commit(1, 0, 0, 0, 12345));
            assertTrue(log.isEmpty());
            assertFalse(log.newCursor().next());

            view = log.claim(1000);
            assertNotNull(view);
            view.put(payload.duplicate().limit(1000));
            final CRC32C crc = new CRC32C();
            crc.update(payload.duplicate().limit(1000));
            final long position = log.commit(1, 2, 4096, 0, (int)crc.getValue());
            assertEquals(0, position);
            final RecordLog.Cursor cursor = log.newCursor();
            assertTrue(cursor.next());
            assertEquals(1, cursor.lsn());
            assertPattern(cursor.payload(), 1, 1000);

            assertNotNull(log.claim(10));
            assertThrows(IllegalStateException.class, () -> append(log, 2, 10), "a claim is open");
            log.abort();
            assertTrue(append(log, 2, 10) >= 0);
        }
        try (RecordLog log = openSmall("claim.log"))
        {
            assertEquals(2, log.recovery().records());
        }
    }

    @Test
    void shouldRefuseAFileWithOtherGeometry()
    {
        final Path file = dir.resolve("geometry.log");
        openSmall("geometry.log").close();
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> RecordLog.open(file, CAPACITY, MAX_RECORD_LENGTH / 2, SEGMENT_LENGTH));
        assertTrue(ex.getMessage().contains(file.toString()), ex.getMessage());
        assertTrue(ex.getMessage().contains("configuration"), ex.getMessage());
        assertThrows(BlockmoverException.class, () -> RecordLog.open(file, 2 * CAPACITY, MAX_RECORD_LENGTH));
        assertThrows(BlockmoverException.class, () -> RecordLog.open(dir.resolve("bad.log"), 3 * 4096, 100));
    }

    @Test
    void shouldMapLogsLargerThanTwoGibInSegments() throws IOException
    {
        final long capacity = 3L << 30;
        final Path file = dir.resolve("large.log");
        final long start = capacity - 2 * MAX_RECORD_LENGTH;
        // Sparse: the test places records far into the log without writing 3 GiB first.
        try (RecordLog log = RecordLog.open(file, capacity, MAX_RECORD_LENGTH, 1 << 30))
        {
            assertEquals(1 << 30, log.segmentLength());
            log.resetAt(start, 1);
            for (long lsn = 1; lsn <= 6; lsn++)
            {
                assertTrue(append(log, lsn, MAX_RECORD_LENGTH - 1) >= 0);
            }
            assertTrue(log.tailPosition() > capacity, "wrapped to the first segment");
            log.resetAt(log.tailPosition() + (2L << 30) - 3 * MAX_RECORD_LENGTH - log.tailPosition() % capacity, 7);
            for (long lsn = 7; lsn <= 12; lsn++)
            {
                assertTrue(append(log, lsn, MAX_RECORD_LENGTH - 1) >= 0, "across the 2 GiB mark");
            }
        }
        assertTrue(Files.size(file) > capacity);
        try (RecordLog log = RecordLog.open(file, capacity, MAX_RECORD_LENGTH))
        {
            assertEquals(6, log.recovery().records());
            final RecordLog.Cursor cursor = log.newCursor();
            for (long lsn = 7; lsn <= 12; lsn++)
            {
                assertTrue(cursor.next());
                assertEquals(lsn, cursor.lsn());
                assertPattern(cursor.payload(), lsn, MAX_RECORD_LENGTH - 1);
            }
        }
    }

    /**
     * What the concurrent tests check of each record, beyond its LSN.
     */
    private interface RecordCheck
    {
        void check(RecordLog.Cursor cursor, long lsn);
    }

    /**
     * A reader for the concurrent tests: reads LSNs 1 to {@code records} in order, checks each, and publishes how
     * far it read for the releaser; the first failure of any thread stops it.
     */
    private static Thread reader(final RecordLog log, final long records, final AtomicLong readUpTo,
        final AtomicReference<Throwable> failure, final RecordCheck check)
    {
        return new Thread(() ->
        {
            try
            {
                final RecordLog.Cursor cursor = log.newCursor();
                long expected = 1;
                while (expected <= records && failure.get() == null)
                {
                    if (cursor.next())
                    {
                        assertEquals(expected, cursor.lsn());
                        check.check(cursor, expected);
                        readUpTo.lazySet(cursor.position());
                        expected++;
                    }
                }
            }
            catch (final Throwable ex)
            {
                failure.compareAndSet(null, ex);
            }
        }, "reader");
    }

    /**
     * A releaser for the concurrent tests: releases up to what the reader has read, until the head passes the
     * last record or a thread failed.
     */
    private static Thread releaser(final RecordLog log, final long records, final AtomicLong readUpTo,
        final AtomicReference<Throwable> failure)
    {
        return new Thread(() ->
        {
            try
            {
                long released = -1;
                while (log.headLsn() <= records && failure.get() == null)
                {
                    final long position = readUpTo.get();
                    if (position > released)
                    {
                        log.release(position);
                        released = position;
                    }
                }
            }
            catch (final Throwable ex)
            {
                failure.compareAndSet(null, ex);
            }
        }, "releaser");
    }

    @Test
    @Timeout(60)
    void shouldDeliverEveryLsnOnceInOrderWithConcurrentAppenderReaderAndReleaser() throws InterruptedException
    {
        final long records = 1_000_000;
        final int maxLength = 128;
        try (RecordLog log = RecordLog.open(dir.resolve("concurrent.log"), 16 * CAPACITY, maxLength, SEGMENT_LENGTH))
        {
            final AtomicLong readUpTo = new AtomicLong(-1);
            final AtomicReference<Throwable> failure = new AtomicReference<>();
            final Thread reader = reader(log, records, readUpTo, failure, (cursor, expected) ->
            {
                assertEquals((int)(expected % maxLength), cursor.length());
                assertTrue(cursor.verifyPayload(), "CRC of LSN " + expected);
                if (cursor.length() > 0)
                {
                    assertEquals(patternByte(expected, cursor.length() - 1),
                        cursor.payload().get(cursor.payload().limit() - 1));
                }
            });
            final Thread releaser = releaser(log, records, readUpTo, failure);
            reader.start();
            releaser.start();

            final long startNs = System.nanoTime();
            long lsn = 1;
            while (lsn <= records && failure.get() == null)
            {
                final int length = (int)(lsn % maxLength);
                fill(payload, lsn, length);
                if (log.tryAppend(lsn, 0, lsn, 0, payload, 0, length) >= 0)
                {
                    lsn++;
                }
                else
                {
                    // Full: make the released head durable so its space can be reused; the pause keeps the
                    // number of msyncs (not what this test measures) low.
                    log.force();
                    LockSupport.parkNanos(100_000);
                }
            }
            reader.join();
            releaser.join();
            log.force();
            final long elapsedNs = System.nanoTime() - startNs;
            if (failure.get() != null)
            {
                throw new AssertionError(failure.get());
            }
            assertTrue(log.isEmpty());
            System.out.printf("concurrent: %d records through a %d-byte log in %d ms%n",
                records, log.capacity(), TimeUnit.NANOSECONDS.toMillis(elapsedNs));
        }
    }

    /**
     * Discards run beside appends the way a source runs them (housekeeping, under the lock its forces share with
     * an append that finds the log full): no append ever lands where a discard zeroes, so every record read back
     * is whole. A log that let appends reuse room still waiting for its discard loses records here.
     */
    @Test
    @Timeout(120)
    void shouldNeverDiscardWhatAnAppendWroteWithConcurrentAppenderReaderReleaserAndDiscarder()
        throws InterruptedException
    {
        final long records = 60_000;
        final int length = 4000;
        try (RecordLog log = RecordLog.open(dir.resolve("discard-concurrent.log"), 2 * CAPACITY, MAX_RECORD_LENGTH,
            SEGMENT_LENGTH))
        {
            assumeTrue(log.isDiscardable(), "discards need ext4");
            final Object forceLock = new Object();
            final AtomicLong readUpTo = new AtomicLong(-1);
            final AtomicReference<Throwable> failure = new AtomicReference<>();
            final Thread reader = reader(log, records, readUpTo, failure, (cursor, expected) ->
            {
                assertTrue(cursor.verifyPayload(), "CRC of LSN " + expected);
                assertPattern(cursor.payload(), expected, length);
            });
            final Thread releaser = releaser(log, records, readUpTo, failure);
            final Thread discarder = new Thread(() ->
            {
                try
                {
                    while (log.headLsn() <= records && failure.get() == null)
                    {
                        synchronized (forceLock)
                        {
                            log.persistHeadForDiscard();
                        }
                        while (true)
                        {
                            synchronized (forceLock)
                            {
                                if (log.discardReleased(64 * 1024) == 0)
                                {
                                    break;
                                }
                            }
                        }
                        LockSupport.parkNanos(200_000);
                    }
                }
                catch (final Throwable ex)
                {
                    failure.compareAndSet(null, ex);
                }
            }, "discarder");
            reader.start();
            releaser.start();
            discarder.start();
            final ByteBuffer source = ByteBuffer.allocateDirect(length);
            long lsn = 1;
            while (lsn <= records && failure.get() == null)
            {
                fill(source, lsn, length);
                if (log.tryAppend(lsn, 0, lsn, 0, source, 0, length) >= 0)
                {
                    lsn++;
                }
                else if (log.capacity() - log.usedBytes() > log.freeBytes())
                {
                    synchronized (forceLock)
                    {
                        log.persistHead();
                    }
                }
            }
            reader.join();
            releaser.join();
            discarder.join();
            if (failure.get() != null)
            {
                throw new AssertionError(failure.get());
            }
            assertTrue(log.discardedBytes() > 0, "discarded " + log.discardedBytes());
            System.out.printf("discards beside appends: %d records of %d bytes, %d bytes discarded%n", records,
                length, log.discardedBytes());
        }
    }

    @Test
    void shouldNotAllocateOnAppendReadReleaseAndForce()
    {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        final long threadId = Thread.currentThread().getId();
        try (RecordLog log = openSmall("alloc.log"))
        {
            final RecordLog.Cursor cursor = log.newCursor();
            fill(payload, 0, 512);
            final long[] lsn = {1};
            cycle(log, cursor, lsn, 50_000);
            final long before = threads.getThreadAllocatedBytes(threadId);
            cycle(log, cursor, lsn, 100_000);
            final long allocated = threads.getThreadAllocatedBytes(threadId) - before;
            System.out.println("allocated over 100k append+read+release: " + allocated + " bytes");
            assertTrue(allocated < 1024, "allocated " + allocated + " bytes");
        }
    }

    private void cycle(final RecordLog log, final RecordLog.Cursor cursor, final long[] lsn, final int count)
    {
        for (int i = 0; i < count; i++)
        {
            final int length = 64 + (i & 511);
            while ((i & 1) == 0 ? log.tryAppend(lsn[0], 1, 0, 0, payload, 0, length) < 0 :
                commitClaim(log, lsn[0], length) < 0)
            {
                log.force();
            }
            if (!cursor.next() || cursor.lsn() != lsn[0] || !cursor.verifyPayload())
            {
                throw new AssertionError("record " + lsn[0]);
            }
            if ((i & 63) == 63)
            {
                log.release(cursor.position());
            }
            lsn[0]++;
        }
    }

    /**
     * A claim filled from the payload, committed with a CRC given as the network would give it (not computed
     * here: this is the allocation test's hot loop).
     */
    private long commitClaim(final RecordLog log, final long lsn, final int length)
    {
        final ByteBuffer claim = log.claim(length);
        if (claim == null)
        {
            return RecordLog.NO_SPACE;
        }
        final int start = claim.position();
        claim.put(payloadView.clear().limit(length));
        claim.position(start);
        claimCrc.reset();
        claimCrc.update(claim);
        return log.commit(lsn, 1, 0, 0, (int)claimCrc.getValue());
    }

    @Test
    @Timeout(60)
    void shouldRecoverEveryPrintedLsnAfterKillMinusNine() throws IOException, InterruptedException
    {
        final Path file = dir.resolve("killed.log");
        final long capacity = 64L << 20;
        final int maxLength = 4000;
        final String classPath = System.getProperty("surefire.test.class.path",
            System.getProperty("java.class.path"));
        final Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        final ProcessBuilder builder = new ProcessBuilder(java.toString(), "@" + jvmOptions(), "-cp", classPath,
            RecordLogCrashWriter.class.getName(), file.toString(), Long.toString(capacity),
            Integer.toString(maxLength), Integer.toString(SEGMENT_LENGTH));
        builder.redirectError(ProcessBuilder.Redirect.INHERIT);
        final Process process = builder.start();
        long printed = 0;
        try (BufferedReader lines =
            new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.US_ASCII)))
        {
            String line;
            while ((line = lines.readLine()) != null)
            {
                if ("FULL".equals(line))
                {
                    break;
                }
                final long lsn = Long.parseLong(line);
                assertEquals(printed + 1, lsn);
                printed = lsn;
                if (printed == 5000)
                {
                    // The writer is mid-append now; kill -9 leaves whatever it had written in the page cache.
                    // (Process.destroyForcibly would also close our end of its output: use the handle.)
                    process.toHandle().destroyForcibly();
                }
            }
        }
        assertTrue(process.waitFor(30, TimeUnit.SECONDS));
        assertTrue(printed >= 5000, "printed " + printed);

        try (RecordLog log = RecordLog.open(file, capacity, maxLength, SEGMENT_LENGTH))
        {
            final RecordLog.Recovery recovery = log.recovery();
            System.out.println("killed writer printed " + printed + ", recovery " + recovery);
            assertEquals(1, recovery.firstLsn());
            assertTrue(recovery.lastLsn() >= printed, "lost LSNs after " + recovery.lastLsn());
            assertEquals(recovery.lastLsn(), recovery.records());
            final RecordLog.Cursor cursor = log.newCursor();
            for (long lsn = 1; lsn <= recovery.lastLsn(); lsn++)
            {
                assertTrue(cursor.next());
                assertEquals(lsn, cursor.lsn());
                assertEquals(lsn * 4096, cursor.offset());
                assertTrue(cursor.verifyPayload());
                assertPattern(cursor.payload(), lsn, lengthOf(lsn, maxLength));
            }
            assertFalse(cursor.next());
        }
    }

    @Test
    void shouldReportThroughput()
    {
        try (RecordLog log = RecordLog.open(dir.resolve("speed.log"), 256L << 20, 1 << 20))
        {
            final ByteBuffer big = ByteBuffer.allocateDirect(1 << 20);
            final RecordLog.Cursor cursor = log.newCursor();
            final long[] lsn = {1};
            // Warm up, then measure: appends only, releasing and forcing whenever the log fills.
            throughput(log, cursor, big, lsn, 4096, 20_000);
            final long smallNs = throughput(log, cursor, big, lsn, 4096, 100_000);
            throughput(log, cursor, big, lsn, 1 << 20, 256);
            final long bigNs = throughput(log, cursor, big, lsn, 1 << 20, 1024);
            System.out.printf("throughput: 4 KiB records %.0f appends/s, 1 MiB records %.2f GB/s%n",
                100_000 * 1e9 / smallNs, 1024.0 * (1 << 20) / bigNs);
        }
    }

    private static long throughput(final RecordLog log, final RecordLog.Cursor cursor, final ByteBuffer src,
        final long[] lsn, final int length, final int count)
    {
        final long startNs = System.nanoTime();
        for (int i = 0; i < count; i++)
        {
            while (log.tryAppend(lsn[0], 0, 0, 0, src, 0, length) < 0)
            {
                long last = -1;
                while (cursor.next())
                {
                    last = cursor.position();
                }
                if (last >= 0)
                {
                    log.release(last);
                }
                log.force();
            }
            lsn[0]++;
        }
        return System.nanoTime() - startNs;
    }

    private static Path jvmOptions()
    {
        final String root = System.getProperty("maven.multiModuleProjectDirectory");
        if (root != null && Files.exists(Path.of(root, "config", "jvm.options")))
        {
            return Path.of(root, "config", "jvm.options");
        }
        Path dir = Path.of(System.getProperty("user.dir")).toAbsolutePath();
        while (dir != null)
        {
            final Path candidate = dir.resolve("config").resolve("jvm.options");
            if (Files.exists(candidate))
            {
                return candidate;
            }
            dir = dir.getParent();
        }
        throw new IllegalStateException("config/jvm.options not found above " + System.getProperty("user.dir"));
    }

    private long writeTenRecords(final String name)
    {
        long last = -1;
        try (RecordLog log = openSmall(name))
        {
            for (long lsn = 1; lsn <= 10; lsn++)
            {
                last = append(log, lsn, lengthOf(lsn, 4000));
            }
        }
        return last;
    }

    private void corrupt(final Path file, final long position, final byte value) throws IOException
    {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE))
        {
            final ByteBuffer one = ByteBuffer.allocate(1);
            channel.read(one, FILE_HEADER_LENGTH + position);
            one.put(0, (byte)(one.get(0) ^ value));
            one.clear();
            channel.write(one, FILE_HEADER_LENGTH + position);
        }
    }

    private void assertRecoveredUpTo(final String name, final long lastLsn, final long tail)
    {
        try (RecordLog log = openSmall(name))
        {
            assertEquals(lastLsn, log.recovery().records());
            assertEquals(lastLsn, log.tailLsn());
            assertEquals(tail, log.tailPosition());
            final RecordLog.Cursor cursor = log.newCursor();
            for (long lsn = 1; lsn <= lastLsn; lsn++)
            {
                assertTrue(cursor.next());
                assertEquals(lsn, cursor.lsn());
            }
            assertFalse(cursor.next());
            assertTrue(append(log, lastLsn + 1, 10) >= 0, "appends resume at the recovered tail");
        }
    }
}
