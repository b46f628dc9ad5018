package io.blockmover.replication.group;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.RecordLogDescriptor;
import io.blockmover.replication.log.ZeroRecord;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The destination applier's two test-failover duties: knowing when its volumes are a consistent prefix (from the
 * source's word and the resync records it applies), and arming a hook at an LSN boundary.
 */
class DestinationGroupTest
{
    private static final int SIZE = 1024 * 1024;
    private static final int REGION = 64 * 1024;

    @TempDir
    Path dir;

    private RecordLog log;
    private DestinationGroup group;
    private final ByteBuffer payload = ByteBuffer.allocate(4096);
    private long lsn;
    /** The applier's clock: the test moves it past the 1 ms force interval instead of sleeping. */
    private final long[] nowNs = {0};

    @BeforeEach
    void open() throws IOException
    {
        Files.write(dir.resolve("volume"), new byte[SIZE]);
        log = RecordLog.open(dir.resolve("log"), 4L << 20, REGION);
        log.reset(1);
        group = openGroup();
    }

    private DestinationGroup openGroup() throws IOException
    {
        return openGroup(1L << 20);
    }

    private DestinationGroup openGroup(final long forceBytes) throws IOException
    {
        return openGroup(forceBytes, REGION);
    }

    private DestinationGroup openGroup(final long forceBytes, final int region) throws IOException
    {
        final Path file = dir.resolve("volume");
        final GroupConfig config = new GroupConfig("g", GroupConfig.ROLE_DESTINATION, "site-a", GroupMode.SYNC, false,
            List.of(new GroupConfig.VolumePair("/src", file.toString(), SIZE)), 4L << 20, region, 0);
        return new DestinationGroup(config, new Volume[] {Volume.open(file, true)}, log, () -> nowNs[0],
            forceBytes, 1_000_000L, new DurableConsistency(dir));
    }

    /** The daemon restarts: same log and volume, the in-memory word of the source gone. */
    private void reopen() throws IOException
    {
        reopen(() -> { });
    }

    private void reopen(final Runnable whileDown) throws IOException
    {
        group.close();
        whileDown.run();
        log = RecordLog.open(dir.resolve("log"), 4L << 20, REGION);
        lsn = log.tailLsn();
        group = openGroup();
    }

    @AfterEach
    void close()
    {
        group.close();
    }

    private void apply(final long offset, final int flags)
    {
        assertTrue(log.tryAppend(++lsn, 0, offset, flags, payload, 0, payload.capacity()) >= 0);
        log.forceRecords(); // The receiver's part: the applier applies only what is durable in the log.
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());
    }

    /** Runs the applier past its force interval (1 ms), so the volume is forced and the state written. */
    private void settle()
    {
        group.doWork();
        nowNs[0] += 2_000_000;
        group.doWork();
        group.doWork();
    }

    /** What a restarted daemon would read. */
    private long durableClean()
    {
        return new DurableConsistency(dir).cleanThroughLsn();
    }

    @Test
    void shouldBeConsistentOnlyWhenTheSourceConfirmedAndNoResyncCameAfter() throws Exception
    {
        assertEquals(DurableConsistency.INCONSISTENT, durableClean(), "a group created here holds nothing yet");
        apply(0, 0);
        assertFalse(group.isConsistent(), "the initial sync is not confirmed finished");
        group.sourceState(1, true);
        assertTrue(group.isConsistent());
        settle();
        assertEquals(1, durableClean(), "forced through the confirmed point: kept");

        group.sourceState(1, false);
        assertTrue(group.isConsistent(), "dirty regions on the source leave this prefix consistent until resent");

        apply(REGION, SourceGroup.RECORD_RESYNC);
        assertEquals(DurableConsistency.INCONSISTENT, durableClean(), "kept before the resync write");
        assertFalse(group.isConsistent(), "a resync record after the confirmation: regions are mixed");
        group.sourceState(5, true);
        apply(0, 0);
        apply(0, 0);
        assertFalse(group.isConsistent(), "confirmed at LSN 5 but applied only " + group.appliedLsn());
        settle();
        assertEquals(DurableConsistency.INCONSISTENT, durableClean(), "not before the confirmed point is applied");
        apply(0, 0);
        assertTrue(group.isConsistent());
        settle();
        assertEquals(5, durableClean());
    }

    /**
     * A busy source says "clean" of record after record (RecordFlags.CLEAN), each ahead of what this side has
     * applied: the first point stays until a resync record invalidates it, or the applier, which lags by a force
     * interval, would never reach the point and the volumes would never be marked consistent.
     */
    @Test
    void shouldKeepTheFirstCleanPointWhileTheSourceSaysCleanOfEveryRecord() throws Exception
    {
        apply(0, 0);
        group.sourceState(1, true);
        group.sourceState(3, true);
        assertEquals(1, group.cleanLsn(), "a later point replaced a valid one");
        assertTrue(group.isConsistent());

        apply(REGION, SourceGroup.RECORD_RESYNC);
        group.sourceState(4, true);
        assertEquals(4, group.cleanLsn(), "a resync record came after the kept point: the next one counts");
        group.sourceState(4, false);
        group.sourceState(6, true);
        assertEquals(6, group.cleanLsn(), "after an unclean word, the next clean one counts");
    }

    /**
     * A bug in the apply (here a record naming a volume the group does not have, which the receiver never lets
     * in) backs off and retries from the log's head, named as a bug, like a volume's failure. It used to leave
     * doWork, and the runner logged it and ran the next duty cycle into it again, at once and for ever.
     */
    @Test
    void shouldBackOffFromABugInTheApplyNotRunIntoItAgain()
    {
        assertTrue(log.tryAppend(++lsn, 1, 0, 0, payload, 0, payload.capacity()) >= 0);
        log.forceRecords();
        assertEquals(0, group.doWork());
        assertTrue(group.failure() != null && group.failure().contains("IndexOutOfBoundsException") &&
            group.failure().contains("(a bug)") && group.failure().contains("tried again in"), group.failure());
        assertEquals(1, group.applyFailures());
        group.doWork();
        assertEquals(1, group.applyFailures(), "not again before the back-off");
    }

    /**
     * Applied records are released only once their volume is forced: by flush.bytes or by the interval. A log under
     * four times flush.bytes (256 MiB by default) used to wait for the interval every time it filled, holding the
     * receiver meanwhile (a 16 MiB log passed 64-80 MiB/s in 200 ms bursts); now a quarter of it is enough.
     */
    @Test
    void shouldReleaseALogSmallerThanFlushBytesEveryQuarterWithoutWaitingForTheInterval() throws Exception
    {
        group.close();
        log = RecordLog.open(dir.resolve("log"), 4L << 20, REGION);
        group = openGroup(256L << 20);
        final long quarter = log.capacity() / 4;
        int records = 0;
        while ((long)records * payload.capacity() < quarter)
        {
            apply((records % 16) * 4096L, 0);
            records++;
        }
        group.doWork();
        assertEquals(records + 1, log.headLsn(), "released after " + records + " records, the clock standing still");
        assertTrue(log.usedBytes() < quarter, "the log still holds " + log.usedBytes() + " bytes");
    }

    /**
     * The applier writes each record to its volume straight from the log's mapping, checked against its CRC there:
     * no copy, and no object per record (it once checked a duplicate() of the payload, then copied it into a
     * buffer of its own).
     */
    @Test
    void shouldApplyRecordsWithoutAllocating() throws Exception
    {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        final byte[] data = new byte[payload.capacity()];
        for (int i = 0; i < 5_000; i++)
        {
            appendAndApply(i, data);
        }
        final int records = 20_000;
        final long before = threads.getCurrentThreadAllocatedBytes();
        for (int i = 0; i < records; i++)
        {
            appendAndApply(i, data);
        }
        final long allocated = threads.getCurrentThreadAllocatedBytes() - before;
        // A few one-off kilobytes (lazy JDK internals) are tolerated; one object per record (16+ bytes) is not.
        assertTrue(allocated < records / 2, "allocated " + allocated + " bytes over " + records + " records");
        final ByteBuffer read = ByteBuffer.allocate(payload.capacity());
        try (FileChannel volume = FileChannel.open(dir.resolve("volume")))
        {
            volume.read(read, ((records - 1) % 16) * 4096L);
        }
        assertEquals(ByteBuffer.wrap(stamp(data, records - 1)), read.flip(), "the last record's bytes on the volume");
    }

    /**
     * Aligned records go to the volume with O_DIRECT, past the page cache: a long one on its own, short ones in
     * batches (ApplyBatch); none of it is cached after the apply, before any force. A record that is not aligned
     * for O_DIRECT still goes through the cache. All land.
     */
    @Test
    void shouldWriteAlignedRecordsPastThePageCache() throws Exception
    {
        final int longLength = DestinationGroup.DIRECT_APPLY_LENGTH;
        final long shortOffset = 2L * longLength;
        final long unalignedOffset = 3L * longLength + 512;
        final byte[] longData = openForLongRecords("long-log", 7);
        final byte[] shortData = stamp(new byte[4096], 9);
        final byte[] unalignedData = stamp(new byte[1024], 11);
        assertTrue(log.tryAppend(++lsn, 0, 0, 0, ByteBuffer.wrap(longData), 0, longLength) >= 0);
        assertTrue(log.tryAppend(++lsn, 0, shortOffset, 0, ByteBuffer.wrap(shortData), 0, shortData.length) >= 0);
        assertTrue(log.tryAppend(++lsn, 0, unalignedOffset, 0, ByteBuffer.wrap(unalignedData), 0,
            unalignedData.length) >= 0);
        log.forceRecords();
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());

        try (FileChannel volume = FileChannel.open(dir.resolve("volume")))
        {
            // Only asked, never touched: isLoaded() is mincore(2), which faults nothing in.
            assertFalse(volume.map(FileChannel.MapMode.READ_ONLY, 0, longLength).isLoaded(),
                "the long record's range is in the page cache");
            assertFalse(volume.map(FileChannel.MapMode.READ_ONLY, shortOffset, shortData.length).isLoaded(),
                "the short record's range is in the page cache");
            assertTrue(volume.map(FileChannel.MapMode.READ_ONLY, unalignedOffset - 512, 4096).isLoaded(),
                "the unaligned record did not go through the page cache");
            final ByteBuffer read = ByteBuffer.allocate(longLength);
            volume.read(read, 0);
            assertEquals(ByteBuffer.wrap(longData), read.flip(), "the long record's bytes on the volume");
            final ByteBuffer readShort = ByteBuffer.allocate(shortData.length);
            volume.read(readShort, shortOffset);
            assertEquals(ByteBuffer.wrap(shortData), readShort.flip(), "the short record's bytes on the volume");
            final ByteBuffer readUnaligned = ByteBuffer.allocate(unalignedData.length);
            volume.read(readUnaligned, unalignedOffset);
            assertEquals(ByteBuffer.wrap(unalignedData), readUnaligned.flip(), "the unaligned record's bytes");
        }
    }

    /**
     * The log is the volumes' write-ahead log: no record may reach a volume before it is durable in the log. A
     * long record went to its volume with O_DIRECT (the disk's cache, and durable at its next flush) while the
     * receiver had only written it to the log's page cache: a power cut then left the volume holding a write whose
     * record, and the records before it, were gone, and the volume was not a prefix of the source's writes (a
     * direct apply of short records failed the power-cut test that way). Through the page cache the same holds
     * whenever the kernel writes the pages back before the log's force. So the applier stops at the log's forced
     * position; the receiver's forces move it, and if none comes (the session ended) the applier forces the log
     * itself after two force intervals, so everything held is applied in the end.
     */
    @Test
    void shouldApplyOnlyRecordsDurableInTheLog() throws Exception
    {
        final int longLength = DestinationGroup.DIRECT_APPLY_LENGTH;
        final long shortOffset = 2L * longLength;
        final byte[] longData = openForLongRecords("wal-log", 11);
        final byte[] shortData = stamp(new byte[4096], 5);
        assertTrue(log.tryAppend(++lsn, 0, 0, 0, ByteBuffer.wrap(longData), 0, longLength) >= 0);
        for (int i = 0; i < 4; i++)
        {
            group.doWork();
        }
        assertEquals(0, group.appliedLsn(), "applied before its log record was forced");
        assertEquals(ByteBuffer.wrap(new byte[longLength]), read(0, longLength), "the volume before the force");

        log.force(); // The receiver's.
        assertTrue(log.tryAppend(++lsn, 0, shortOffset, 0, ByteBuffer.wrap(shortData), 0, shortData.length) >= 0);
        for (int i = 0; i < 4; i++)
        {
            group.doWork();
        }
        assertEquals(1, group.appliedLsn(), "the forced record, and not the one after it");
        assertEquals(ByteBuffer.wrap(longData), read(0, longLength));
        assertEquals(ByteBuffer.wrap(new byte[shortData.length]), read(shortOffset, shortData.length));

        nowNs[0] += 2_000_000; // Two force intervals, and no force came: the applier forces the log.
        group.doWork();
        nowNs[0] += 2_000_000;
        for (int i = 0; i < 4 && group.appliedLsn() < 2; i++)
        {
            group.doWork();
        }
        assertEquals(2, group.appliedLsn(), "held records are applied in the end");
        assertEquals(log.tailPosition(), log.forcedPosition());
        assertEquals(ByteBuffer.wrap(shortData), read(shortOffset, shortData.length));
        assertNull(group.failure());
    }

    /**
     * While the receiver forces the log every interval, the applier never forces it too: records keep arriving
     * beyond each force, so the applier is always held back by something, but never by the same position for two
     * intervals. It counted from the first time it was held back, and so forced the log itself every two
     * intervals of a steady stream, a device flush more for every two of the receiver's.
     */
    @Test
    void shouldLeaveTheLogsForcesToTheReceiverWhileItForces() throws Exception
    {
        payload.clear();
        for (int interval = 0; interval < 6; interval++)
        {
            assertTrue(log.tryAppend(++lsn, 0, (lsn % 16) * 4096L, 0, payload, 0, payload.capacity()) >= 0);
            group.doWork();
            nowNs[0] += 1_500_000; // Past one interval (1 ms), short of two.
            log.forceRecords(); // The receiver's, every interval.
            assertTrue(log.tryAppend(++lsn, 0, (lsn % 16) * 4096L, 0, payload, 0, payload.capacity()) >= 0);
            group.doWork();
            assertTrue(log.forcedPosition() < log.tailPosition(), "the applier forced the log itself, interval " +
                interval);
        }
        assertEquals(lsn - 1, group.appliedLsn(), "everything the receiver forced is applied");
    }

    private ByteBuffer read(final long offset, final int length) throws IOException
    {
        try (FileChannel volume = FileChannel.open(dir.resolve("volume")))
        {
            final ByteBuffer read = ByteBuffer.allocate(length);
            volume.read(read, offset);
            return read.flip();
        }
    }

    /**
     * Opens the group again on a new log whose records may be {@link DestinationGroup#DIRECT_APPLY_LENGTH} long.
     *
     * @return a long record's worth of random bytes.
     */
    private byte[] openForLongRecords(final String logName, final long seed) throws IOException
    {
        final int longLength = DestinationGroup.DIRECT_APPLY_LENGTH;
        group.close();
        log = RecordLog.open(dir.resolve(logName), 4L << 20, longLength);
        log.reset(1);
        lsn = 0;
        group = openGroup(1L << 20, longLength);
        final byte[] longData = new byte[longLength];
        new Random(seed).nextBytes(longData);
        return longData;
    }

    /**
     * Records found together are written together (ApplyBatch), yet the volume ends as LSN order leaves it: a
     * record writing bytes that an earlier one of the same batch writes waits for that batch, whether it is
     * batched itself (aligned) or not (a 512-byte record through the page cache), and the snapshot hook of a
     * record sees the bytes as the records before it left them, never older ones.
     */
    @Test
    void shouldApplyRecordsFoundTogetherInLsnOrder() throws Exception
    {
        final Path file = dir.resolve("volume");
        final List<String> seenByHook = new ArrayList<>();
        final ByteBuffer peek = ByteBuffer.allocate(1);
        final FileChannel reader = FileChannel.open(file);
        group.requestHook((volume, offset, length) ->
        {
            if (offset == 8192)
            {
                try
                {
                    peek.clear();
                    reader.read(peek, offset);
                    seenByHook.add(Integer.toString(peek.get(0)));
                }
                catch (final IOException ex)
                {
                    seenByHook.add(ex.toString());
                }
            }
        });
        group.doWork();
        final byte[] expected = new byte[SIZE];
        final ByteBuffer record = ByteBuffer.allocate(8192);
        // 200 records, appended before the applier runs: a block among three written again and again, others
        // around them, some 8 KiB records straddling blocks, and every tenth a 512-byte one inside a block.
        final Random random = new Random(3);
        final long[] offsets = new long[201];
        final int[] lengths = new int[201];
        for (int i = 1; i <= 200; i++)
        {
            final long offset;
            final int length;
            if (i % 10 == 0)
            {
                offset = 8192 + 512L * random.nextInt(8);
                length = 512;
            }
            else if (i % 7 == 0)
            {
                offset = 4096;
                length = 8192;
            }
            else
            {
                offset = random.nextInt(3) == 0 ? 8192 : 4096L * (4 + random.nextInt(60));
                length = 4096;
            }
            offsets[i] = offset;
            lengths[i] = length;
            final byte stamp = (byte)i;
            record.clear().limit(length);
            for (int b = 0; b < length; b++)
            {
                record.put(b, stamp);
            }
            Arrays.fill(expected, (int)offset, (int)offset + length, stamp);
            assertTrue(log.tryAppend(++lsn, 0, offset, 0, record, 0, length) >= 0);
        }
        log.forceRecords();
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());
        reader.close();
        assertTrue(Arrays.equals(expected, Files.readAllBytes(file)), "the volume differs from LSN order's result");
        // The hook ran before each record at 8192 (and before the others, which it ignores): each saw the first
        // byte of that block as the records before it had left it.
        final List<String> wanted = new ArrayList<>();
        byte at8192 = 0;
        for (int i = 1; i <= 200; i++)
        {
            if (offsets[i] == 8192)
            {
                wanted.add(Byte.toString(at8192));
            }
            if (offsets[i] <= 8192 && 8192 < offsets[i] + lengths[i])
            {
                at8192 = (byte)i;
            }
        }
        assertEquals(wanted, seenByHook, "what the hook saw before each record at byte 8192");
    }

    /** One record stamped with {@code i}, at one of 16 blocks, applied: the log forced whenever it is full. */
    private void appendAndApply(final int i, final byte[] data)
    {
        payload.clear();
        payload.put(stamp(data, i)).clear();
        while (log.tryAppend(++lsn, 0, (i % 16) * 4096L, 0, payload, 0, payload.capacity()) < 0)
        {
            lsn--;
            log.force(); // The receiver's part: released room comes back at a force.
            nowNs[0] += 2_000_000;
            group.doWork();
        }
        log.forceRecords();
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
    }

    private static byte[] stamp(final byte[] data, final int i)
    {
        Arrays.fill(data, (byte)i);
        return data;
    }

    /**
     * Once everything received is applied and released, and no record arrives to make the receiver force the log,
     * the applier forces the log's header itself: a restart then replays nothing, and a failover does not wait.
     */
    @Test
    void shouldPersistTheReleasedHeadWhenIdleSoThatARestartReplaysNothing() throws Exception
    {
        apply(0, 0);
        apply(REGION, 0);
        apply(2 * REGION, 0);
        settle();
        assertEquals(4, log.headLsn(), "applied, forced and released in memory");
        nowNs[0] += 2_000_000;
        group.doWork();
        // What a daemon killed now (no clean close, which would force the log) finds when it starts again.
        try (RecordLog afterKill = RecordLog.open(dir.resolve("log"), 4L << 20, REGION))
        {
            assertEquals(4, afterKill.headLsn(), "the released head is on disk");
            assertTrue(afterKill.isEmpty(), "nothing to replay");
        }
    }

    /**
     * A record whose bytes in the log no longer match their CRC is never applied, and never retried either:
     * reading it again gives the same bytes (a full or failing volume is retried; this is not that). Asked (by the
     * conductor, once the session is closed), the applier drops it with every record after it, so that the source
     * sends them again; before, it stopped there for good and the group had to be created again.
     */
    @Test
    void shouldStopAtARecordDamagedInTheLogAndDropItWithThoseAfterItWhenAsked() throws Exception
    {
        apply(0, 0);
        final long position = log.tryAppend(++lsn, 0, 4096, 0, payload, 0, payload.capacity());
        assertTrue(log.tryAppend(++lsn, 0, 8192, 0, payload, 0, payload.capacity()) >= 0);
        try (java.nio.channels.FileChannel file = java.nio.channels.FileChannel.open(dir.resolve("log"),
            java.nio.file.StandardOpenOption.WRITE))
        {
            final long payloadAt = RecordLogDescriptor.FILE_HEADER_LENGTH + position +
                RecordLogDescriptor.RECORD_HEADER_LENGTH;
            file.write(ByteBuffer.wrap(new byte[] {0x5a}), payloadAt + 10);
        }
        log.forceRecords();
        group.doWork();
        assertTrue(group.failure().contains("damaged in this host's log"), group.failure());
        assertFalse(group.failure().contains("tried again"), group.failure());
        assertEquals(2, group.damagedLsn());
        nowNs[0] += 3_600_000_000_000L;
        group.doWork();
        assertEquals(1, group.applyFailures(), "not retried");
        assertEquals(1, group.appliedLsn(), "never applied");

        group.dropDamagedRecords();
        group.doWork();
        assertEquals(0, group.damagedLsn());
        assertNull(group.failure());
        assertEquals(2, group.recordsDropped());
        assertEquals(1, log.tailLsn(), "holds LSN 1: the source sends LSN 2 on");
        assertTrue(log.isEmpty(), "LSN 1 was forced to the volume and released before the drop");
        assertEquals(1, group.appliedLsn());
        final List<long[]> dropped = group.takeDroppedRegions();
        assertEquals("[[0, 0, 0]]", dropped.stream().map(java.util.Arrays::toString).toList().toString(),
            "LSNs 2 and 3 wrote region 0 of volume 0: the source resends it if it released them");
        assertNull(group.takeDroppedRegions(), "once, for the next OPEN");

        lsn = 1;
        apply(4096, 0);
        assertEquals(2, group.appliedLsn(), "LSN 2, sent again, applies");
    }

    /**
     * The source's log took another size ('group set --log-size' there): this side moves to a new log of that size
     * once the session is ended, applying what it held first, so that the new log starts empty at the next LSN and
     * the source sends nothing again. The new file takes the old one's name.
     */
    @Test
    void shouldMoveToALogOfAnotherSizeOnceEverythingHeldIsApplied() throws Exception
    {
        apply(0, 0);
        final byte[] pattern = new byte[4096];
        Arrays.fill(pattern, (byte)0x6b);
        final ByteBuffer data = ByteBuffer.wrap(pattern);
        assertTrue(log.tryAppend(++lsn, 0, 8192, 0, data, 0, pattern.length) >= 0);
        assertTrue(log.tryAppend(++lsn, 0, 3 * REGION, 0, data, 0, pattern.length) >= 0);
        RecordLog.prepare(dir.resolve("log.resize"), 8L << 20, REGION);
        final RecordLog bigger = RecordLog.open(dir.resolve("log.resize"), 8L << 20, REGION);

        final int[] ended = {0};
        group.requestLogReplacement(bigger, dir.resolve("log"), () -> ended[0]++, RecordLog::closeReplaced);
        for (int i = 0; i < 100 && group.logReplacementState() != DestinationGroup.REPLACEMENT_DONE; i++)
        {
            group.doWork();
        }
        assertEquals(DestinationGroup.REPLACEMENT_DONE, group.logReplacementState(), group.logReplacementError());
        assertEquals(3, group.appliedLsn(), "what it held is applied first");
        assertSame(bigger, group.log());
        assertEquals(1, ended[0], "the conductor is woken");
        group.endLogReplacement();
        assertEquals(DestinationGroup.REPLACEMENT_NONE, group.logReplacementState());
        assertFalse(Files.exists(dir.resolve("log.resize")));
        assertEquals(8L << 20, RecordLog.capacityOf(dir.resolve("log")), "renamed over the group's log");
        try (RecordLog afterKill = RecordLog.open(dir.resolve("log"), 8L << 20, REGION))
        {
            assertEquals(4, afterKill.headLsn(), "a restart now holds LSN 3 and replays nothing");
            assertTrue(afterKill.isEmpty());
        }
        final ByteBuffer read = ByteBuffer.allocate(4096);
        try (FileChannel volume = FileChannel.open(dir.resolve("volume")))
        {
            volume.read(read, 3 * REGION);
        }
        assertTrue(Arrays.equals(pattern, read.array()), "LSN 3 is on the volume");

        log = bigger;
        apply(REGION, 0);
        assertEquals(4, group.appliedLsn(), "LSN 4 arrives in the new log and applies");
        settle();
        assertTrue(bigger.isEmpty(), "and is released from it");
    }

    /** A move that fails leaves the group on its log, applying as before. */
    @Test
    void shouldKeepItsLogWhenTheMoveToAnotherFails() throws Exception
    {
        apply(0, 0);
        final Path taken = Files.createDirectories(dir.resolve("taken"));
        Files.write(taken.resolve("file"), new byte[1]);
        RecordLog.prepare(dir.resolve("log.resize"), 8L << 20, REGION);
        final RecordLog bigger = RecordLog.open(dir.resolve("log.resize"), 8L << 20, REGION);

        group.requestLogReplacement(bigger, taken, () -> { }, RecordLog::closeReplaced);
        group.doWork();
        assertEquals(DestinationGroup.REPLACEMENT_FAILED, group.logReplacementState());
        assertTrue(group.logReplacementError().contains("cannot rename record log"), group.logReplacementError());
        assertSame(log, group.log());
        group.endLogReplacement();
        bigger.closeReplaced();
        apply(REGION, 0);
        assertEquals(2, group.appliedLsn());
    }

    /** Withdrawn before the applier took it (the volumes failed meanwhile), a move never happens. */
    @Test
    void shouldNeverMoveToALogWhoseMoveWasWithdrawn() throws Exception
    {
        RecordLog.prepare(dir.resolve("log.resize"), 8L << 20, REGION);
        try (RecordLog bigger = RecordLog.open(dir.resolve("log.resize"), 8L << 20, REGION))
        {
            group.requestLogReplacement(bigger, dir.resolve("log"), () -> { }, RecordLog::closeReplaced);
            assertTrue(group.cancelLogReplacement());
            group.doWork();
            assertEquals(DestinationGroup.REPLACEMENT_NONE, group.logReplacementState());
            assertSame(log, group.log());
            assertEquals(4L << 20, RecordLog.capacityOf(dir.resolve("log")));
        }
    }

    @Test
    void shouldKeepTheAnswerAcrossARestartWithoutTheSource() throws Exception
    {
        apply(0, 0);
        apply(REGION, SourceGroup.RECORD_RESYNC);
        reopen();
        assertFalse(group.isConsistent(), "mid initial sync, restarted: the source's word is gone");

        group.sourceState(lsn, true);
        settle();
        reopen();
        assertTrue(group.isConsistent(), "finished and forced before the restart: a failover may use the volumes");
        assertEquals(2, durableClean());

        apply(2 * REGION, SourceGroup.RECORD_RESYNC);
        reopen();
        assertFalse(group.isConsistent(), "a resync after the clean point, then a crash");
    }

    @Test
    void shouldTreatReplayedResyncRecordsUpToTheCleanPointAsPartOfIt() throws Exception
    {
        // A power loss can lose the log's released head but not the forced consistency file: the replay then
        // applies resync records again that the clean point already covers.
        apply(0, 0);
        apply(REGION, SourceGroup.RECORD_RESYNC);
        apply(0, 0);
        reopen(() -> new DurableConsistency(dir).markClean(2));
        assertFalse(group.isConsistent(), "replay not yet past the clean point");
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertTrue(group.isConsistent());
        assertEquals(2, durableClean());
    }

    @Test
    void shouldArmAHookBetweenRecordsAndCallItBeforeEachWrite()
    {
        apply(0, 0);
        final List<long[]> calls = new ArrayList<>();
        final ApplyHook hook = (volume, offset, length) -> calls.add(new long[] {volume, offset, length});
        group.requestHook(hook);
        assertNull(group.armedHook(), "armed by the applier, not by the request");
        group.doWork();
        assertSame(hook, group.armedHook());
        assertEquals(1, group.armedLsn());

        apply(8192, 0);
        assertEquals(1, calls.size());
        assertEquals(8192, calls.get(0)[1]);
        assertEquals(4096, calls.get(0)[2]);

        group.requestHook(null);
        group.doWork();
        assertNull(group.armedHook());
        apply(0, 0);
        assertEquals(1, calls.size(), "a disarmed hook is not called");
    }

    @Test
    void shouldArmAHookOnlyOnceAppliedThroughTheLsnAskedFor()
    {
        apply(0, 0);
        // Two records held but not yet durable: the applier cannot reach them before a force.
        assertTrue(log.tryAppend(++lsn, 0, 4096, 0, payload, 0, payload.capacity()) >= 0);
        assertTrue(log.tryAppend(++lsn, 0, 8192, 0, payload, 0, payload.capacity()) >= 0);
        final List<long[]> calls = new ArrayList<>();
        final ApplyHook hook = (volume, offset, length) -> calls.add(new long[] {volume, offset, length});
        group.requestHook(hook, lsn);
        for (int i = 0; i < 3; i++)
        {
            group.doWork();
        }
        assertNull(group.armedHook(), "armed before the applier reached the LSN asked for");
        assertEquals(1, group.appliedLsn());

        group.forceLog();
        while (group.armedHook() != hook)
        {
            group.doWork();
        }
        assertEquals(3, group.armedLsn());
        assertEquals(List.of(), calls, "the records before the LSN asked for are not preserved for the view");
        apply(0, 0);
        assertEquals(1, calls.size());

        group.requestHook(null);
        group.doWork();
        assertNull(group.armedHook(), "dropped at once, whatever LSN the hook waited for");
    }

    /**
     * A record of zeros of a region (an empty region's initial sync, a client's WRITE_ZEROES) becomes a hole in a
     * sparse destination file, not written zeros: a sparse or thin destination stays so where its source holds
     * nothing. A short one, or one with data, is written; and so is every record on a file with every block
     * allocated, which keeps its space reserved.
     */
    @Test
    void shouldDeallocateTheRangeOfARegionOfZerosInASparseFile() throws Exception
    {
        final byte[] data = new byte[SIZE - REGION];
        new Random(7).nextBytes(data);
        reopenOver(data); // Old data, and a hole in the last region.
        applyZerosDataAndShortZeros(false);
        assertSparseAfterZerosDataAndShortZeros(data, false);
    }

    @Test
    void shouldWriteTheZerosOnAFileWithEveryBlockAllocated() throws Exception
    {
        final byte[] data = new byte[SIZE];
        new Random(8).nextBytes(data);
        reopenOver(data);
        applyZerosDataAndShortZeros(false);
        assertThickAfterZerosDataAndShortZeros(data);
    }

    /**
     * A zero record (its payload the length of its zeros, ZeroRecord) is applied as the zeros it stands for: a
     * hole where the volume deallocates, a short one included (nothing to compare: a TRIM's few KiB), the zeros
     * written everywhere else.
     */
    @Test
    void shouldApplyAZeroRecordAsTheZerosItStandsFor() throws Exception
    {
        final byte[] sparse = new byte[SIZE - REGION];
        new Random(9).nextBytes(sparse);
        reopenOver(sparse);
        applyZerosDataAndShortZeros(true);
        assertSparseAfterZerosDataAndShortZeros(sparse, true);

        final byte[] thick = new byte[SIZE];
        new Random(10).nextBytes(thick);
        reopenOver(thick);
        applyZerosDataAndShortZeros(true);
        assertThickAfterZerosDataAndShortZeros(thick);
    }

    /**
     * A resync record is a region as its source holds it; of a sparse or thin source, data around holes. Its zero
     * pieces stay holes on a sparse destination (after a source's crash every region of its activity log is
     * resent, and written whole they filled the destination's holes), its data is written around them. A client's
     * record of the same bytes is written whole, and on a file with every block allocated nothing is deallocated.
     */
    @Test
    void shouldDeallocateTheZeroPiecesOfAResyncRecord() throws Exception
    {
        final byte[] sparse = new byte[SIZE - REGION];
        new Random(11).nextBytes(sparse);
        reopenOver(sparse);
        applyRegionWithHolesAsResyncAndAsClientWrite();
        assertTrue(Arrays.equals(afterRegionWithHoles(sparse), Files.readAllBytes(dir.resolve("volume"))),
            "not what the records say");
        assertEquals(List.of(List.of(4096L, 8192L), List.of(12288L, (long)REGION - 4096),
            List.of((long)SIZE - REGION, (long)SIZE)), holes(), "the resync record's zeros (and the file's hole)");
        assertEquals(REGION - 3 * 4096, group.bytesDeallocated());

        final byte[] thick = new byte[SIZE];
        new Random(12).nextBytes(thick);
        reopenOver(thick);
        applyRegionWithHolesAsResyncAndAsClientWrite();
        assertTrue(Arrays.equals(afterRegionWithHoles(thick), Files.readAllBytes(dir.resolve("volume"))),
            "not what the records say");
        assertEquals(List.of(), holes(), "a fully allocated destination lost blocks");
        assertEquals(0, group.bytesDeallocated());
    }

    /** A region holding data in its blocks 0, 2 and last, zeros elsewhere. */
    private static byte[] regionWithHoles()
    {
        final byte[] region = new byte[REGION];
        Arrays.fill(region, 0, 4096, (byte)1);
        Arrays.fill(region, 8192, 12288, (byte)2);
        Arrays.fill(region, REGION - 4096, REGION, (byte)3);
        return region;
    }

    /** {@link #regionWithHoles} as a resync record of region 0, then as a client's record of region 1. */
    private void applyRegionWithHolesAsResyncAndAsClientWrite()
    {
        final ByteBuffer region = ByteBuffer.wrap(regionWithHoles());
        assertTrue(log.tryAppend(++lsn, 0, 0, SourceGroup.RECORD_RESYNC, region, 0, REGION) >= 0);
        assertTrue(log.tryAppend(++lsn, 0, REGION, 0, region, 0, REGION) >= 0);
        log.forceRecords();
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());
        settle();
    }

    private static byte[] afterRegionWithHoles(final byte[] data)
    {
        final byte[] expected = Arrays.copyOf(data, SIZE);
        System.arraycopy(regionWithHoles(), 0, expected, 0, REGION);
        System.arraycopy(regionWithHoles(), 0, expected, REGION, REGION);
        return expected;
    }

    /**
     * @param asZeroRecords whether the zeros came as zero records: then the short one is a hole too; as data, it is
     *                      too short to be worth a compare, and written.
     */
    private void assertSparseAfterZerosDataAndShortZeros(final byte[] data, final boolean asZeroRecords)
        throws IOException
    {
        assertEquals(REGION + (asZeroRecords ? 4096 : 0), group.bytesDeallocated());
        assertTrue(Arrays.equals(afterZerosDataAndShortZeros(data), Files.readAllBytes(dir.resolve("volume"))),
            "not what the records say");
        final List<List<Long>> expected = new java.util.ArrayList<>(List.of(List.of(0L, (long)REGION)));
        if (asZeroRecords)
        {
            expected.add(List.of(2L * REGION, 2L * REGION + 4096));
        }
        expected.add(List.of((long)SIZE - REGION, (long)SIZE));
        assertEquals(expected, holes(), "only the zeros (and the hole the file had) are holes");
    }

    private void assertThickAfterZerosDataAndShortZeros(final byte[] data) throws IOException
    {
        assertEquals(0, group.bytesDeallocated());
        assertTrue(Arrays.equals(afterZerosDataAndShortZeros(data), Files.readAllBytes(dir.resolve("volume"))),
            "not what the records say");
        assertEquals(List.of(), holes(), "a fully allocated destination lost blocks");
    }

    /** The volume's bytes once {@link #applyZerosDataAndShortZeros} applied its records over these. */
    private static byte[] afterZerosDataAndShortZeros(final byte[] data)
    {
        final byte[] expected = Arrays.copyOf(data, SIZE);
        Arrays.fill(expected, 0, REGION, (byte)0);
        Arrays.fill(expected, REGION, 2 * REGION, (byte)1);
        Arrays.fill(expected, 2 * REGION, 2 * REGION + 4096, (byte)0);
        return expected;
    }

    /** The daemon restarts over a volume file of these bytes, extended with a hole to its size. */
    private void reopenOver(final byte[] data) throws IOException
    {
        reopen(() ->
        {
            try
            {
                Files.write(dir.resolve("volume"), data);
                try (RandomAccessFile file = new RandomAccessFile(dir.resolve("volume").toFile(), "rw"))
                {
                    file.setLength(SIZE); // A hole, no block allocated.
                }
            }
            catch (final IOException ex)
            {
                throw new java.io.UncheckedIOException(ex);
            }
        });
    }

    /**
     * A region of zeros (a resync record), a region of ones, 4 KiB of zeros, applied and forced.
     *
     * @param asZeroRecords whether the zeros come as zero records (their length), or as data.
     */
    private void applyZerosDataAndShortZeros(final boolean asZeroRecords)
    {
        final ByteBuffer ones = ByteBuffer.allocate(REGION);
        Arrays.fill(ones.array(), (byte)1);
        appendZeros(0, REGION, SourceGroup.RECORD_RESYNC, asZeroRecords);
        assertTrue(log.tryAppend(++lsn, 0, REGION, 0, ones, 0, REGION) >= 0);
        appendZeros(2L * REGION, 4096, 0, asZeroRecords);
        log.forceRecords();
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());
        settle();
    }

    private void appendZeros(final long offset, final int length, final int flags, final boolean asZeroRecord)
    {
        final ByteBuffer payload = asZeroRecord ?
            ZeroRecord.encode(ByteBuffer.allocate(ZeroRecord.PAYLOAD_LENGTH), length) : ByteBuffer.allocate(length);
        assertTrue(log.tryAppend(++lsn, 0, offset, flags | (asZeroRecord ? RecordFlags.ZEROES : 0), payload, 0,
            payload.capacity()) >= 0);
    }

    /** The volume file's ranges with no block allocated (FIEMAP). */
    private List<List<Long>> holes()
    {
        return io.blockmover.FileHoles.of(dir.resolve("volume"), SIZE);
    }
}
