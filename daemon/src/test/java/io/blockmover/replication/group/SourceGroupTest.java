package io.blockmover.replication.group;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.SmallTmpfs;
import io.blockmover.buffer.Slab;
import io.blockmover.frontend.nbd.DirectIo;
import io.blockmover.frontend.nbd.NbdErrorException;
import io.blockmover.frontend.nbd.NbdExport;
import io.blockmover.frontend.nbd.NbdProtocol;
import io.blockmover.io.Volume;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.replication.verify.SourceVerifier;
import io.blockmover.replication.verify.VerifyRecord;
import io.blockmover.replication.verify.VerifyResults;
import io.blockmover.transport.NullFrameConnection;

import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The source side of a group against real files: a real O_DIRECT volume, a real record log and bitmaps. The
 * partner is played by calling the methods the shipper calls.
 */
class SourceGroupTest
{
    private static final int REGION = 64 * 1024;
    private static final long VOLUME_SIZE = 4L * 1024 * 1024;
    private static final int REGIONS = (int)(VOLUME_SIZE / REGION);

    @TempDir
    Path dir;

    private SourceGroup group;
    private final ByteBuffer buffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);

    @AfterEach
    void close()
    {
        if (group != null)
        {
            group.close();
        }
    }

    private SourceGroup open(final GroupMode mode, final long logSize) throws IOException
    {
        return open(mode, logSize, RecordLog.open(dir.resolve("log"), logSize, REGION));
    }

    private SourceGroup open(final GroupMode mode, final long logSize, final RecordLog log) throws IOException
    {
        return open(mode, logSize, log, dir.resolve("volume.img"));
    }

    private SourceGroup open(final GroupMode mode, final long logSize, final RecordLog log, final Path volumeFile)
        throws IOException
    {
        if (!Files.exists(volumeFile))
        {
            Files.write(volumeFile, new byte[(int)VOLUME_SIZE]);
        }
        final GroupConfig config = new GroupConfig("g", GroupConfig.ROLE_SOURCE, "peer", mode, false,
            List.of(new GroupConfig.VolumePair(volumeFile.toString(), "/dst", VOLUME_SIZE)), logSize, REGION, 0);
        if (log.headLsn() == RecordLog.NULL_LSN)
        {
            log.reset(1);
        }
        final SourceGroup g = new SourceGroup(config, dir, new Volume[] {Volume.open(volumeFile, true)}, log, false);
        g.dirty(0).clearAll();
        return g;
    }

    /** A volume of data in every region, for the group to open: a resync sends an empty region as its length only. */
    private void writeDataVolume() throws IOException
    {
        final byte[] data = new byte[(int)VOLUME_SIZE];
        new java.util.Random(5).nextBytes(data);
        Files.write(dir.resolve("volume.img"), data);
    }

    private ByteBuffer pattern(final int seed, final int length)
    {
        buffer.clear();
        for (int i = 0; i < length; i++)
        {
            buffer.put(i, (byte)(seed * 31 + i));
        }
        return buffer;
    }

    private byte[] fileBytes(final long offset, final int length) throws IOException
    {
        final byte[] all = Files.readAllBytes(dir.resolve("volume.img"));
        final byte[] part = new byte[length];
        System.arraycopy(all, (int)offset, part, 0, length);
        return part;
    }

    private static byte[] bytes(final ByteBuffer buffer, final int length)
    {
        final byte[] b = new byte[length];
        buffer.duplicate().clear().get(b, 0, length);
        return b;
    }

    @Test
    void shouldLogEveryWriteInLsnOrderAndWriteTheVolume() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NbdExport export = group.export(0);
        for (int i = 0; i < 5; i++)
        {
            export.write(i * 8192L, pattern(i, 4096), 4096, false);
        }
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        for (int i = 0; i < 5; i++)
        {
            assertTrue(cursor.next());
            assertEquals(i + 1, cursor.lsn());
            assertEquals(i * 8192L, cursor.offset());
            assertTrue(cursor.verifyPayload());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "marked written once on the volume");
            assertArrayEquals(bytes(pattern(i, 4096), 4096), fileBytes(i * 8192L, 4096));
        }
        assertFalse(cursor.next());
        assertEquals("g/volume.img", export.name());
    }

    /**
     * An async group's FLUSH makes its log durable too. Where the volume's device flush reaches the log's disk
     * (both on this host's one disk, as here), the log's pages are written out and that flush serves both; a
     * volume elsewhere (tmpfs) has the log forced on its own. Either way the log is forced through every record
     * written before the FLUSH.
     */
    @Test
    void shouldMakeTheLogDurableWithTheVolumesDiskFlushWhereItReachesTheLog() throws IOException
    {
        final Path shm = Path.of("/dev/shm");
        final Path elsewhere = Files.createTempFile(shm, "blockmover-volume-", ".img");
        try
        {
            Files.write(elsewhere, new byte[(int)VOLUME_SIZE]);
            for (final Path volumeFile : new Path[] {dir.resolve("volume.img"), elsewhere})
            {
                Files.deleteIfExists(dir.resolve("log"));
                RecordLog.prepare(dir.resolve("log"), 1L << 20, REGION);
                group = open(GroupMode.ASYNC, 1L << 20, RecordLog.open(dir.resolve("log"), 1L << 20, REGION),
                    volumeFile);
                final NbdExport export = group.export(0);
                for (int i = 0; i < 3; i++)
                {
                    export.write(i * 8192L, pattern(i, 4096), 4096, false);
                    export.flush();
                    assertEquals(group.log().tailPosition(), group.log().forcedPosition(), volumeFile.toString());
                }
                final boolean shared = io.blockmover.io.BlockDevices.flushCovers(volumeFile, dir);
                assertEquals(shared ? 3 : 0, group.logForcesSharedWithVolume.get(), volumeFile.toString());
                assertFalse(volumeFile == elsewhere && shared, "tmpfs is on no disk");
                group.close();
                group = null;
            }
        }
        finally
        {
            Files.deleteIfExists(elsewhere);
        }
    }

    /**
     * 'group set --log-size': the group moves to a log of another size with every record the partner may lack, in
     * place of the old log's file, and goes on from the next LSN; after a restart the new log is the group's.
     */
    @Test
    void shouldMoveToALogOfAnotherSizeWithEveryRecordThePartnerMayLack() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NbdExport export = group.export(0);
        for (int i = 0; i < 5; i++)
        {
            export.write(i * 8192L, pattern(i, 4096), 4096, false);
        }
        export.write(1L << 20, pattern(9, REGION), REGION, false);
        final RecordLog.Cursor held = group.log().newCursor();
        held.position(group.log().headPosition());
        assertTrue(held.next());
        assertTrue(held.next());
        group.log().release(held.position()); // The partner holds LSN 1 and 2 durably.

        final RecordLog small = RecordLog.open(dir.resolve("log.small"), 128 * 1024, REGION);
        assertEquals(-1, replaceLog(small, dir.resolve("log")), "76 KiB of records are more than half");
        small.close();
        assertEquals(1L << 20, group.log().capacity(), "nothing changed");

        final RecordLog bigger = RecordLog.open(dir.resolve("log.resize"), 4L << 20, REGION);
        assertEquals(4, replaceLog(bigger, dir.resolve("log")));
        assertEquals(4L << 20, group.log().capacity());
        assertEquals(dir.resolve("log"), group.log().path());
        assertFalse(Files.exists(dir.resolve("log.resize")));
        export.write(5 * 8192L, pattern(5, 4096), 4096, false);

        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        for (int i = 2; i < 5; i++)
        {
            assertTrue(cursor.next());
            assertEquals(i + 1, cursor.lsn());
            assertEquals(i * 8192L, cursor.offset());
            assertTrue(cursor.verifyPayload());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0);
            assertArrayEquals(bytes(pattern(i, 4096), 4096), bytes(cursor.payload().slice(), 4096));
        }
        assertTrue(cursor.next());
        assertEquals(6, cursor.lsn());
        assertEquals(REGION, cursor.length());
        assertTrue(cursor.next());
        assertEquals(7, cursor.lsn(), "the next write goes on from the next LSN, in the new log");
        assertEquals(5 * 8192L, cursor.offset());
        assertFalse(cursor.next());
        group.close();
        group = null;
        assertEquals(4L << 20, RecordLog.capacityOf(dir.resolve("log")));
        group = open(GroupMode.ASYNC, 4L << 20);
        assertEquals(3, group.log().headLsn(), "the partner may lack LSN 3 to 7, after a restart too");
        assertEquals(7, group.log().tailLsn());
    }

    /**
     * Writes go on while the log is replaced, again and again: every one of them is in the final log, once, in LSN
     * order with no gap, flagged WRITTEN, its payload what the volume holds (no write appended to a log after its
     * copy, none flagged in the wrong one).
     */
    /** The daemon's steps of a log resize, taken in one go: start, copy until little is left, finish. */
    private long replaceLog(final RecordLog next, final Path target)
    {
        long resumeAt = group.startLogCopy(next);
        for (int pass = 0; resumeAt >= 0 && pass < 16 && !group.isLogCopyNearlyDone(resumeAt); pass++)
        {
            resumeAt = group.continueLogCopy(next, resumeAt, Long.MAX_VALUE);
        }
        return resumeAt < 0 ? -1 : group.finishLogCopy(next, resumeAt, target, RecordLog::closeReplaced);
    }

    @Test
    void shouldLoseNoWriteThatRacesAReplacementOfTheLog() throws Exception
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        final NbdExport export = group.export(0);
        final int writers = 4;
        final int writesEach = 200;
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final Thread[] threads = new Thread[writers];
        for (int w = 0; w < writers; w++)
        {
            final int writer = w;
            threads[w] = new Thread(() ->
            {
                final ByteBuffer own = BufferUtil.allocateDirectAligned(4096, Slab.ALIGNMENT);
                try
                {
                    for (int n = 0; n < writesEach; n++)
                    {
                        final int block = writer * writesEach + n;
                        for (int b = 0; b < 4096; b++)
                        {
                            own.put(b, (byte)(block * 13 + b));
                        }
                        export.write(block * 4096L, own, 4096, false);
                    }
                }
                catch (final Throwable t)
                {
                    failure.set(t);
                }
            });
            threads[w].start();
        }
        int replaced = 0;
        while (replaced < 6 && Arrays.stream(threads).anyMatch(Thread::isAlive))
        {
            final Path next = dir.resolve("log.resize");
            final RecordLog bigger = RecordLog.open(next, replaced % 2 == 0 ? 16L << 20 : 8L << 20, REGION);
            assertTrue(replaceLog(bigger, dir.resolve("log")) >= 0);
            replaced++;
        }
        for (final Thread t : threads)
        {
            t.join(TimeUnit.SECONDS.toMillis(30));
        }
        assertNull(failure.get());
        assertTrue(replaced >= 2, "the log was replaced while writes went on: " + replaced);

        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        final byte[] volume = Files.readAllBytes(dir.resolve("volume.img"));
        for (long lsn = 1; lsn <= writers * writesEach; lsn++)
        {
            assertTrue(cursor.next(), "LSN " + lsn + " is in the log");
            assertEquals(lsn, cursor.lsn());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + lsn + " flagged");
            assertTrue(cursor.verifyPayload());
            final byte[] payload = bytes(cursor.payload().slice(), 4096);
            final byte[] onVolume = Arrays.copyOfRange(volume, (int)cursor.offset(), (int)cursor.offset() + 4096);
            assertArrayEquals(onVolume, payload, "LSN " + lsn);
        }
        assertFalse(cursor.next());
    }

    /**
     * A front end that submits volume writes itself (NBD over Linux AIO) appends a socket read's worth of writes and
     * submits them only before it next waits. A log resize waits, holding the append lock, for every write in flight
     * to end; if that front end then blocks at the lock for its next append, holding one appended and unsubmitted,
     * each waits for the other. The resize must let go now and then, and say it waits (drainWanted), so that the
     * front end gets in and submits what it holds.
     */
    @Test
    @Timeout(60)
    void shouldLetAFrontEndHoldingUnsubmittedWritesThroughALogResize() throws Exception
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        final NbdExport export = group.export(0);
        final DirectIo first = export.newDirectIo();
        final DirectIo second = export.newDirectIo();
        assertTrue(first.beginWrite(0, pattern(1, 4096), 4096, false), "appended, as if queued and not yet submitted");
        final AtomicReference<Object> resized = new AtomicReference<>();
        final Thread resizer = new Thread(() ->
        {
            try
            {
                resized.set(replaceLog(RecordLog.open(dir.resolve("log.resize"), 16L << 20, REGION),
                    dir.resolve("log")));
            }
            catch (final Throwable t)
            {
                resized.set(t);
            }
        });
        resizer.start();
        awaitTrue("the resize waits for the writes in flight", first::drainWanted);
        // The front end's next append blocks at the append lock while the resize holds it, and gets in when it
        // lets go; told then to submit at once.
        final AtomicReference<Object> secondBegun = new AtomicReference<>();
        final Thread frontEnd = new Thread(() ->
        {
            try
            {
                final boolean begun = second.beginWrite(4L * REGION, BufferUtil.allocateDirectAligned(4096, 4096), 4096,
                    false);
                secondBegun.set(begun && second.drainWanted());
            }
            catch (final Throwable t)
            {
                secondBegun.set(t);
            }
        });
        frontEnd.start();
        frontEnd.join(TimeUnit.SECONDS.toMillis(10));
        final boolean gotIn = !frontEnd.isAlive();
        // The first write submitted and completed (the volume write, then its end) in any case: a resize that
        // never let go is freed by it, and the test ends instead of hanging.
        group.volume(0).write(0, pattern(1, 4096), 4096);
        assertTrue(first.endWrite(4096, null));
        assertTrue(gotIn, "the front end got to append while the resize waited for its unsubmitted write");
        frontEnd.join();
        assertEquals(Boolean.TRUE, secondBegun.get(), "appended, and told to submit at once");
        group.volume(0).write(4L * REGION, pattern(2, 4096), 4096);
        assertTrue(second.endWrite(4096, null));
        resizer.join(TimeUnit.SECONDS.toMillis(30));
        assertTrue(resized.get() instanceof Long && (Long)resized.get() >= 0, "the resize: " + resized.get());
        assertFalse(first.drainWanted());
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        for (int lsn = 1; lsn <= 2; lsn++)
        {
            assertTrue(cursor.next());
            assertEquals(lsn, cursor.lsn());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + lsn + " flagged written");
        }
        assertFalse(group.hasWritesInFlight());
    }

    /**
     * Writes to other bytes of one region go on together; only a write to the same bytes waits, and is counted.
     * Before, any write to the region waited: at queue depth 16 a sequential writer waited on every request, and
     * each wait held its connection's reader until the earlier write reached the disk.
     */
    @Test
    @Timeout(60)
    void shouldMakeOnlyAWriteToTheSameBytesWaitForOneInFlight() throws Exception
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        final NbdExport export = group.export(0);
        final DirectIo first = export.newDirectIo();
        final DirectIo beside = export.newDirectIo();
        final DirectIo same = export.newDirectIo();
        assertTrue(first.beginWrite(0, pattern(1, 4096), 4096, false));
        assertTrue(beside.beginWrite(4096, pattern(2, 4096), 4096, false), "the next block of the same region");
        assertFalse(same.beginWrite(0, pattern(3, 4096), 4096, false), "the same block, while it may not wait");
        assertEquals(0, group.writesWaited.get(), "refused, not waited");

        final AtomicReference<Object> sameBegun = new AtomicReference<>();
        final Thread waiter = new Thread(() ->
        {
            try
            {
                sameBegun.set(same.beginWrite(0, pattern(3, 4096), 4096, true));
            }
            catch (final Throwable t)
            {
                sameBegun.set(t);
            }
        });
        waiter.start();
        awaitTrue("the write to the same bytes counts itself waiting", () -> group.writesWaited.get() == 1);
        group.volume(0).write(4096, pattern(2, 4096), 4096);
        assertTrue(beside.endWrite(4096, null));
        waiter.join(200);
        assertTrue(waiter.isAlive(), "still waiting: the write beside it ended, not the one to its bytes");
        group.volume(0).write(0, pattern(1, 4096), 4096);
        assertTrue(first.endWrite(4096, null));
        waiter.join(TimeUnit.SECONDS.toMillis(10));
        assertEquals(Boolean.TRUE, sameBegun.get(), "appended once the earlier write ended");
        group.volume(0).write(0, pattern(3, 4096), 4096);
        assertTrue(same.endWrite(4096, null));

        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        final long[] offsets = {0, 4096, 0};
        for (int lsn = 1; lsn <= 3; lsn++)
        {
            assertTrue(cursor.next());
            assertEquals(lsn, cursor.lsn());
            assertEquals(offsets[lsn - 1], cursor.offset());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + lsn + " flagged written");
        }
        assertFalse(group.hasWritesInFlight());
        final Map<String, Object> status = new HashMap<>();
        GroupStatus.describe(group, status);
        assertEquals(1L, status.get("writes_waited"), "in the group's status");
    }

    @Test
    void shouldTrackWritesInTheBitmapOnceTheLogIsFullAndNeverLoseThem() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NbdExport export = group.export(0);
        int i = 0;
        while (group.untrackedByLog.get() == 0)
        {
            export.write((i % 64) * (long)REGION, pattern(i, 4096), 4096, false);
            i++;
        }
        final long overflowRegion = ((i - 1) % 64);
        assertTrue(group.dirty(0).get(overflowRegion), "the region of the write the log could not take is dirty");
        assertArrayEquals(bytes(pattern(i - 1, 4096), 4096), fileBytes(overflowRegion * REGION, 4096),
            "the write itself still reached the volume");
        assertTrue(group.rpoBytes() >= group.log().usedBytes() + REGION);
    }

    /**
     * The log's disk refuses a record (here: the file made immutable, which fails its writes with EPERM, as a
     * failing disk fails them with EIO). The write still reaches the volume, its region goes to the bitmap as when
     * the log is full, and it is counted. Before, the exception left the write counted in flight for good, so the
     * next write to the same bytes waited forever.
     */
    @Test
    @Timeout(60)
    void shouldTrackAWriteTheLogsDiskRefusesInTheBitmapAndLetTheNextOneThrough() throws Exception
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        final NbdExport export = group.export(0);
        export.write(0, pattern(1, 4096), 4096, false);
        final Path logFile = group.log().path();
        assumeTrue(chattr("+i", logFile), "chattr +i needs root and a file system that has the flag");
        try
        {
            export.write(0, pattern(2, 4096), 4096, false);
        }
        finally
        {
            assertTrue(chattr("-i", logFile));
        }
        assertArrayEquals(bytes(pattern(2, 4096), 4096), fileBytes(0, 4096), "the write reached the volume");
        assertTrue(group.dirty(0).get(0), "its region is dirty, to be resent");
        assertEquals(1, group.logAppendFailures.get());
        assertTrue(group.logAppendError.contains("Operation not permitted"), group.logAppendError);
        assertFalse(group.hasWritesInFlight(), "the refused write is not in flight any more");

        export.write(0, pattern(3, 4096), 4096, false);
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        assertTrue(cursor.next());
        assertEquals(1, cursor.lsn());
        assertTrue(cursor.next(), "the log takes records again once its disk does");
        assertEquals(2, cursor.lsn());
        assertArrayEquals(bytes(pattern(3, 4096), 4096), bytes(cursor.payload().slice(), 4096));
        assertFalse(cursor.next());
        final Map<String, Object> status = new HashMap<>();
        GroupStatus.describe(group, status);
        assertEquals(1L, status.get("log_append_failures"));
        assertEquals(1L, status.get("writes_tracked_by_bitmap"));
    }

    private static boolean chattr(final String flag, final Path file) throws IOException, InterruptedException
    {
        final Process p = new ProcessBuilder("chattr", flag, file.toString()).redirectErrorStream(true).start();
        p.getInputStream().readAllBytes();
        return p.waitFor() == 0;
    }

    /**
     * A front end that submits volume writes itself stages their records as it begins them and has them written with
     * one pwrite before it submits (beforeSubmit): none is visible before, all are after, in order. Another append
     * (here a worker's write) writes the batch first, so LSN order holds across both paths.
     */
    @Test
    void shouldWriteTheRecordsOfBegunWritesTogetherBeforeTheirSubmission() throws IOException
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        final NbdExport export = group.export(0);
        final DirectIo[] slots = {export.newDirectIo(), export.newDirectIo(), export.newDirectIo()};
        for (int i = 0; i < 2; i++)
        {
            assertTrue(slots[i].beginWrite(i * 8192L, pattern(10 + i, 4096), 4096, false));
        }
        assertEquals(0, group.log().tailLsn(), "staged, not yet written");
        slots[0].beforeSubmit();
        assertEquals(2, group.log().tailLsn(), "both written by one call");
        assertTrue(slots[2].beginWrite(3 * 8192L, pattern(12, 4096), 4096, false));
        export.write(5 * 8192L, pattern(13, 4096), 4096, false); // A worker's write: the staged one goes first.
        assertEquals(4, group.log().tailLsn());
        slots[2].beforeSubmit(); // Nothing left to write.
        for (int i = 0; i < 3; i++)
        {
            final long offset = (i < 2 ? i : 3) * 8192L;
            group.volume(0).write(offset, pattern(10 + i, 4096), 4096);
            assertTrue(slots[i].endWrite(4096, null));
        }
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        final long[] offsets = {0, 8192, 3 * 8192, 5 * 8192};
        for (int lsn = 1; lsn <= 4; lsn++)
        {
            assertTrue(cursor.next());
            assertEquals(lsn, cursor.lsn());
            assertEquals(offsets[lsn - 1], cursor.offset());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "LSN " + lsn + " flagged written");
        }
        assertFalse(cursor.next());
        assertFalse(group.hasWritesInFlight());
    }

    /**
     * A close that gives up waiting for a direct write still in the disk leaves the files to it: before, it unmapped
     * the log under the write, whose end then read the record's flags from the unmapped page and crashed the JVM.
     */
    @Test
    void shouldLeaveItsFilesOpenToAWriteStillInTheDiskAfterItsCloseGaveUpWaiting() throws IOException
    {
        group = open(GroupMode.ASYNC, 8L << 20);
        group.closeWaitNs(TimeUnit.MILLISECONDS.toNanos(20));
        final DirectIo slot = group.export(0).newDirectIo();
        assertTrue(slot.beginWrite(8192, pattern(21, 4096), 4096, false));
        slot.beforeSubmit();
        group.close();
        assertTrue(group.isClosePending(), "the write is still under way");
        group.volume(0).write(8192, pattern(21, 4096), 4096); // The disk ends it: its descriptor is still open.
        assertTrue(slot.endWrite(4096, null));
        assertFalse(group.isClosePending(), "closed by the write's end");
        assertThrows(NbdErrorException.class, () -> slot.beginWrite(0, pattern(22, 4096), 4096, false));
        final Path logFile = group.log().path();
        group = null;
        try (RecordLog reopened = RecordLog.open(logFile, 8L << 20, REGION))
        {
            final RecordLog.Cursor cursor = reopened.newCursor();
            cursor.position(reopened.headPosition());
            assertTrue(cursor.next());
            assertEquals(1, cursor.lsn());
            assertTrue((cursor.flags() & SourceGroup.RECORD_WRITTEN) != 0, "flagged written before the close");
        }
    }

    /**
     * The log's disk refuses a batch of staged records: their writes go on, tracked by the bitmap, and their LSNs go
     * to the next records, so the partner never sees a gap.
     */
    @Test
    void shouldTrackTheWritesOfABatchTheLogsDiskRefusesInTheBitmap() throws Exception
    {
        group = open(GroupMode.SYNC, 8L << 20);
        final NbdExport export = group.export(0);
        final DirectIo first = export.newDirectIo();
        final DirectIo second = export.newDirectIo();
        assertTrue(first.beginWrite(0, pattern(1, 4096), 4096, false));
        assertTrue(second.beginWrite(2L * REGION, pattern(2, 4096), 4096, false));
        final Path logFile = group.log().path();
        assumeTrue(chattr("+i", logFile), "chattr +i needs root and a file system that has the flag");
        try
        {
            first.beforeSubmit();
        }
        finally
        {
            assertTrue(chattr("-i", logFile));
        }
        assertEquals(2, group.logAppendFailures.get());
        assertTrue(group.dirty(0).get(0) && group.dirty(0).get(2), "both regions to be resent");
        group.volume(0).write(0, pattern(1, 4096), 4096);
        assertTrue(first.endWrite(4096, null), "no record, so no partner's ACK to wait for");
        group.volume(0).write(2L * REGION, pattern(2, 4096), 4096);
        assertTrue(second.endWrite(4096, null));
        assertFalse(group.hasWritesInFlight());

        assertTrue(first.beginWrite(4L * REGION, pattern(3, 4096), 4096, false));
        first.beforeSubmit();
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        assertTrue(cursor.next());
        assertEquals(1, cursor.lsn(), "the refused records' LSNs are taken again");
        assertEquals(4L * REGION, cursor.offset());
        assertFalse(cursor.next());
    }

    @Test
    void shouldResendADirtyRegionAsOneRecordAndClearItsBit() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        group.export(0).write(2L * REGION + 4096, pattern(7, 4096), 4096, false);
        group.dirty(0).set(2);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        assertTrue(group.resyncRegion(0, 2, regionBuffer));
        assertFalse(group.dirty(0).get(2));
        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        assertTrue(cursor.next());
        assertTrue(cursor.next());
        assertEquals(2, cursor.lsn());
        assertEquals(2L * REGION, cursor.offset());
        assertEquals(REGION, cursor.length());
        assertTrue((cursor.flags() & SourceGroup.RECORD_RESYNC) != 0);
        final byte[] logged = new byte[REGION];
        cursor.payload().get(logged);
        assertArrayEquals(fileBytes(2L * REGION, REGION), logged, "the record holds the region as it is now");
    }

    /**
     * A client's WRITE_ZEROES is logged as records of the length of their zeros (ZeroRecord), a region at most each,
     * and its volume written; a resync sends an empty region so too, a region of data as data. Each took its whole
     * length in the log (and on the link) before.
     */
    @Test
    void shouldLogZerosAsTheirLengthAndWriteThemToTheVolume() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NbdExport export = group.export(0);
        export.write(0, pattern(1, REGION), REGION, false);
        export.write(REGION, pattern(2, REGION), REGION, false);
        export.writeZeroes(4096, REGION + 8192, false);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        group.dirty(0).set(0);
        group.dirty(0).set(3);
        assertTrue(group.resyncRegion(0, 0, regionBuffer));
        assertTrue(group.resyncRegion(0, 3, regionBuffer));

        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        assertTrue(cursor.next());
        assertTrue(cursor.next());
        assertZeroRecord(cursor, 3, 4096, REGION - 4096, 0); // One record for each region the zeros touch.
        assertZeroRecord(cursor, 4, REGION, 12288, 0);
        assertTrue(cursor.next());
        assertEquals(0, cursor.flags() & RecordFlags.ZEROES, "region 0 holds 4 KiB of data");
        assertEquals(REGION, cursor.length());
        assertZeroRecord(cursor, 6, 3L * REGION, REGION, SourceGroup.RECORD_RESYNC);
        assertFalse(cursor.next());

        assertArrayEquals(new byte[REGION + 8192], fileBytes(4096, REGION + 8192));
        assertArrayEquals(Arrays.copyOf(bytes(pattern(1, REGION), REGION), 4096), fileBytes(0, 4096));
        assertArrayEquals(Arrays.copyOfRange(bytes(pattern(2, REGION), REGION), 8192 + 4096, REGION),
            fileBytes(REGION + 8192 + 4096, REGION - 8192 - 4096));
        assertEquals(2L * REGION + 8192, group.zeroBytesLogged.get());
    }

    /** A shipper for session 1 of an async group, started, that sends to {@code partner}. */
    private Shipper startedShipper(final NullFrameConnection partner)
    {
        final Shipper shipper =
            new Shipper(group, partner, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        return shipper;
    }

    /**
     * A TRIM gives its range back where the volume deallocates (a sparse file here): a hole here and a zero record
     * for the partner per region it touches, in write order, its ragged ends included (the few KiB of a file
     * system's online discard). So does a WRITE_ZEROES the client lets us deallocate. A region that is a hole
     * already sends nothing. On a volume that does not deallocate (every block written) a TRIM changes nothing and
     * sends nothing.
     */
    @Test
    void shouldDeallocateATrimmedRangeAndReplicateItAsZeroRecords() throws IOException
    {
        final byte[] data = sparseVolumeWithDataInRegionsOneToFour();
        group = open(GroupMode.ASYNC, 1L << 20);
        group.export(0).trim(REGION + 4096, 2L * REGION);

        final RecordLog.Cursor cursor = group.log().newCursor();
        cursor.position(group.log().headPosition());
        assertZeroRecord(cursor, 1, REGION + 4096, REGION - 4096, 0);
        assertZeroRecord(cursor, 2, 2L * REGION, REGION, 0);
        assertZeroRecord(cursor, 3, 3L * REGION, 4096, 0);
        assertFalse(cursor.next());
        group.export(0).writeZeroes(3L * REGION, REGION + 4096, false, true);
        assertZeroRecord(cursor, 4, 3L * REGION, REGION, 0);
        assertZeroRecord(cursor, 5, 4L * REGION, 4096, 0);
        final byte[] expected = data.clone();
        Arrays.fill(expected, 4096, 3 * REGION + 4096, (byte)0);
        assertArrayEquals(expected, fileBytes(REGION, 4 * REGION));
        assertEquals(List.of(List.of(0L, (long)REGION), List.of(REGION + 4096L, 4L * REGION + 4096)),
            io.blockmover.FileHoles.of(dir.resolve("volume.img"), 5L * REGION),
            "region 0, and all but the first 4 KiB of region 1 through the first 4 KiB of region 4 deallocated");
        assertEquals(2L * REGION, group.trimmedBytes.get());

        group.export(0).trim(0, 4L * REGION); // Regions 0, 2 and 3 are holes already: only region 1 goes.
        assertZeroRecord(cursor, 6, REGION, REGION, 0);
        assertFalse(cursor.next());
        assertEquals(3L * REGION, group.trimmedBytes.get());
    }

    /** Writes random data to regions 1 to 4 of a sparse volume file; region 0 and those after 4 are holes. */
    private byte[] sparseVolumeWithDataInRegionsOneToFour() throws IOException
    {
        final byte[] data = new byte[4 * REGION];
        new java.util.Random(12).nextBytes(data);
        try (java.io.RandomAccessFile file = new java.io.RandomAccessFile(dir.resolve("volume.img").toFile(), "rw"))
        {
            file.seek(REGION);
            file.write(data);
            file.setLength(VOLUME_SIZE);
        }
        return data;
    }

    /**
     * A sync group's TRIM or WRITE_ZEROES of many regions appends every region's record before it waits, and then
     * waits once, for the partner's ACK of the last: it waited for each region's ACK in turn, a round trip per
     * MiB (an fstrim of a thin volume's free space spans thousands of regions, and a metro link's round trip is a
     * millisecond or more).
     */
    @Test
    void shouldWaitForThePartnerOnceForATrimOrWriteZeroesOfManyRegions() throws Exception
    {
        sparseVolumeWithDataInRegionsOneToFour();
        final NbdExport export = openSyncWithOneDurableWrite();

        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final Thread trim = new Thread(() ->
        {
            try
            {
                export.trim(REGION, 4L * REGION);
                export.writeZeroes(8L * REGION, 3L * REGION, false);
            }
            catch (final Throwable t)
            {
                failure.set(t);
            }
        }, "trim");
        trim.start();
        awaitTrue("the TRIM's four records appended before its wait", () -> group.log().tailLsn() == 5);
        assertTrue(trim.isAlive(), "waiting for the partner's ACK");
        group.partnerProgress(5, 5);
        awaitTrue("the WRITE_ZEROES's three records appended before its wait", () -> group.log().tailLsn() == 8);
        assertTrue(trim.isAlive(), "waiting for the partner's ACK");
        group.partnerProgress(8, 8);
        trim.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(trim.isAlive(), "acknowledged");
        assertNull(failure.get());
        assertEquals(4L * REGION, group.trimmedBytes.get());
    }

    @Test
    void shouldChangeNothingForATrimOfAVolumeThatDoesNotDeallocate() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20); // Every block written.
        group.export(0).trim(0, 4L * REGION);
        assertFalse(group.log().newCursor().next());
        assertEquals(0, group.trimmedBytes.get());
    }

    /** Moves the cursor to the next record and checks that it is a zero record of these. */
    private static void assertZeroRecord(final RecordLog.Cursor cursor, final long lsn, final long offset,
        final int length, final int flags)
    {
        assertTrue(cursor.next());
        assertEquals(lsn, cursor.lsn());
        assertEquals(offset, cursor.offset());
        assertEquals(RecordFlags.ZEROES | flags, cursor.flags() & (RecordFlags.ZEROES | SourceGroup.RECORD_RESYNC));
        assertEquals(ZeroRecord.PAYLOAD_LENGTH, cursor.length());
        assertTrue(cursor.verifyPayload());
        assertEquals(length, ZeroRecord.decode(cursor.payload()));
    }

    /**
     * A partner that offered to take zero records gets them as they are; any other (an older version) gets the
     * zeros they stand for, as a record of data under the same LSN.
     */
    @Test
    void shouldSendZeroRecordsOnlyToAPartnerThatTakesThemAndTheirZerosToAnyOther() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        group.export(0).writeZeroes(2L * REGION, REGION, false);

        final NackingPartner older = new NackingPartner();
        Shipper shipper = startedShipper(older);
        shipper.doWork();
        assertEquals("[1 crc-ok]", describeSent(older.sent));
        assertEquals(0, older.sent.get(0)[1] & RecordFlags.ZEROES);
        assertArrayEquals(new byte[REGION], older.payloads.get(0));
        shipper.onClose();

        final NackingPartner newer = new NackingPartner();
        shipper = new Shipper(group, newer, 2, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.sendZeroRecords();
        shipper.onStart();
        shipper.doWork();
        assertEquals("[1 crc-ok]", describeSent(newer.sent));
        assertEquals(RecordFlags.ZEROES, newer.sent.get(0)[1] & RecordFlags.ZEROES);
        assertEquals(REGION, ZeroRecord.decode(ByteBuffer.wrap(newer.payloads.get(0))));
        shipper.onClose();
    }

    /**
     * A zero record damaged in this host's own log no longer says its length: the partner's NACK mends it into a
     * record of 4 KiB of zeros and every region it may have covered is resent. To a partner of an older version
     * the damaged record still goes with a CRC that fails, so that it asks for it again.
     */
    @Test
    void shouldMendAZeroRecordDamagedInItsOwnLogAndResendEveryRegionItMayHaveCovered() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NackingPartner older = new NackingPartner();
        final Shipper shipper = startedShipper(older);
        group.export(0).writeZeroes(REGION + 8192, REGION - 8192, false);
        final RecordLog.Cursor cursor = group.log().newCursor();
        assertTrue(cursor.next());
        final ByteBuffer inLog = cursor.payload();
        inLog.put(inLog.position() + 2, (byte)(inLog.get(inLog.position() + 2) ^ 1));
        shipper.doWork();
        assertEquals("[1 crc-bad]", describeSent(older.sent));

        older.sent.clear();
        older.payloads.clear();
        older.nack(1);
        shipper.doWork();
        assertEquals("[1 unclean crc-ok]", describeSent(older.sent));
        assertArrayEquals(new byte[4096], older.payloads.get(0));
        assertEquals(1, group.recordsMended.get());
        assertEquals(2, group.dirtyRegions(), "regions 1 and 2: every one a record from its offset may cover");
        assertTrue(group.dirty(0).get(1) && group.dirty(0).get(2));
        shipper.onClose();
    }

    /** A zero record whose volume write may not have happened is replayed as the zeros it stands for. */
    @Test
    void shouldReplayAZeroRecordWhoseVolumeWriteMayNotHaveHappened() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        group.export(0).write(REGION, pattern(4, REGION), REGION, false);
        final ByteBuffer payload = ZeroRecord.encode(ByteBuffer.allocate(ZeroRecord.PAYLOAD_LENGTH), 8192);
        assertTrue(group.log().tryAppend(2, 0, REGION + 4096, RecordFlags.ZEROES, payload, 0, payload.capacity()) >= 0);
        group.close();
        group = open(GroupMode.ASYNC, 1L << 20);
        assertEquals(1, group.replayUnwritten());
        assertArrayEquals(new byte[8192], fileBytes(REGION + 4096, 8192));
        assertArrayEquals(Arrays.copyOf(bytes(pattern(4, REGION), REGION), 4096), fileBytes(REGION, 4096));
        assertEquals(0, group.replayUnwritten(), "replayed once, then marked written");
    }

    /**
     * A region that cannot be read (here: past the end of a file truncated under the group) holds the resync until
     * a retry, 2 s later, reads it; it used to stop the resync for good, until the daemon restarted.
     */
    @Test
    void shouldRetryAResyncReadThatFailedAndResendTheRegionOnceItReads() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        group.linked(() -> { });
        group.dirty(0).set(3);
        final long[] now = {0};
        final Resyncer resyncer = new Resyncer(group, () -> now[0]);
        final Path volumeFile = dir.resolve("volume.img");
        try (java.nio.channels.FileChannel channel = java.nio.channels.FileChannel.open(volumeFile,
            java.nio.file.StandardOpenOption.WRITE))
        {
            channel.truncate(3L * REGION);
        }
        assertEquals(0, resyncer.doWork());
        assertTrue(resyncer.failure().contains("cannot read") && resyncer.failure().contains("tried again in 2 s"),
            resyncer.failure());
        assertEquals(1, resyncer.failures());
        assertTrue(group.dirty(0).get(3), "the region stays dirty");

        now[0] += 1_000_000_000L;
        assertEquals(0, resyncer.doWork(), "not yet due");
        try (java.io.RandomAccessFile file = new java.io.RandomAccessFile(volumeFile.toFile(), "rw"))
        {
            file.setLength(VOLUME_SIZE);
        }
        now[0] += 1_500_000_000L;
        assertEquals(1, resyncer.doWork());
        assertNull(resyncer.failure());
        assertFalse(group.dirty(0).get(3), "resent once it read");
    }

    /**
     * A region whose record cannot be written into the log (here a real ENOSPC: a sparse log on a 192 KiB tmpfs)
     * holds the resync until a retry, as a read error does; the region stays dirty and is sent once the log takes
     * it. The unchecked error used to escape doWork, and the agent runner called it again at once, logging the
     * error on every duty cycle.
     */
    @Test
    void shouldBackOffAndRetryAResyncWhoseRecordTheLogCannotTake() throws Exception
    {
        final SmallTmpfs small = SmallTmpfs.mount(dir.resolve("small"), "192k");
        try
        {
            final long logSize = 1L << 20;
            writeDataVolume();
            group = open(GroupMode.SYNC, logSize, RecordLog.open(small.dir().resolve("log"), logSize, REGION,
                (int)logSize));
            group.linked(() -> { });
            for (int r = 0; r < 4; r++)
            {
                group.dirty(0).set(r);
            }
            final long[] now = {0};
            final Resyncer resyncer = new Resyncer(group, () -> now[0]);
            int sent = 0;
            while (resyncer.failure() == null && sent < 4)
            {
                sent += resyncer.doWork();
            }
            assertTrue(sent < 4, "the 192 KiB file system took every record");
            assertTrue(resyncer.failure().contains("cannot log region " + sent) &&
                resyncer.failure().contains("No space left") && resyncer.failure().contains("tried again in 2 s"),
                resyncer.failure());
            assertEquals(1, resyncer.failures());
            assertTrue(group.dirty(0).get(sent), "the region stays dirty");
            now[0] += 1_000_000_000L;
            assertEquals(0, resyncer.doWork(), "not yet due");
            assertEquals(1, resyncer.failures());

            small.resize("4m");
            now[0] += 1_500_000_000L;
            while (sent < 4)
            {
                assertEquals(1, resyncer.doWork());
                assertNull(resyncer.failure());
                sent++;
            }
            assertEquals(0, group.dirtyRegions());
            assertEquals(4, group.publishedLsn() - group.log().headLsn() + 1, "every region logged once");
        }
        finally
        {
            if (group != null)
            {
                group.close();
                group = null;
            }
            small.close();
        }
    }

    /**
     * A seeded group's bitmap is clean from the start, yet regions not compared yet may differ: its heartbeats and
     * records must not tell the destination it holds a consistent prefix (a test mount or failover would trust it).
     */
    @Test
    void shouldNotCallThePartnerConsistentWhileASeededSyncCompares() throws IOException
    {
        // Async: a sync write would wait for an acknowledgement no partner sends here.
        group = open(GroupMode.ASYNC, 1L << 20);
        final long[] now = {0};
        final FrameHeader sent = new FrameHeader();
        final NullFrameConnection connection = new NullFrameConnection()
        {
            @Override
            public boolean startSend(final FrameHeader header, final ByteBuffer payload)
            {
                sent.byteBuffer().clear();
                sent.byteBuffer().put(header.byteBuffer().duplicate().clear()
                    .limit(io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH));
                return true;
            }
        };
        final Shipper shipper =
            new Shipper(group, connection, 1, 0, false, () -> now[0], 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        group.config().seeding = true;
        now[0] += 2000;
        shipper.doWork();
        assertEquals(FrameType.HEARTBEAT, sent.type());
        assertEquals(0, sent.aux() & GroupReceiver.HEARTBEAT_CLEAN, "seeding: not clean");
        group.export(0).write(0, pattern(3, 4096), 4096, false);
        shipper.doWork();
        assertEquals(FrameType.RECORD, sent.type());
        assertTrue((sent.aux() & GroupReceiver.RECORD_UNCLEAN) != 0, "seeding: a record is unclean");

        group.config().seeding = false;
        now[0] += 2000;
        shipper.doWork();
        assertEquals(FrameType.HEARTBEAT, sent.type());
        assertEquals(GroupReceiver.HEARTBEAT_CLEAN, sent.aux() & GroupReceiver.HEARTBEAT_CLEAN, "compared: clean");
        shipper.onClose();
    }

    /**
     * The partner got a record damaged and asks for it again (NACK): the shipper sends the log again from that
     * record, and the first record of a restarted sequence says so again, or the partner would take it for a gap.
     * A NACK for a record the partner already acknowledged, or one never sent, ends the session.
     */
    @Test
    void shouldSendTheLogAgainFromARecordThePartnerGotDamaged() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NackingPartner connection = new NackingPartner();
        final List<long[]> sent = connection.sent;
        final Shipper shipper =
            new Shipper(group, connection, 1, 0, true, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        for (int i = 0; i < 3; i++)
        {
            group.export(0).write(4096L * i, pattern(i + 1, 4096), 4096, false);
        }
        shipper.doWork();
        assertEquals("[1 restart, 2, 3]", describe(sent));

        sent.clear();
        connection.nack(1);
        shipper.doWork();
        assertEquals("[1 restart, 2, 3]", describe(sent), "the log again from LSN 1, which restarts the sequence");
        assertEquals(1, group.recordsResent.get());

        sent.clear();
        connection.nack(3);
        shipper.doWork();
        assertEquals("[3]", describe(sent));

        connection.nack(9);
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork,
            "LSN 9 was never sent");
        assertTrue(shipper.status().message().contains("LSN 9"), shipper.status().message());
        shipper.onClose();
    }

    /**
     * A partner that ends the session with BUSY (a move to a new log) takes the next OPEN within milliseconds: the
     * session's end says so, and the group reconnects in 0.1 s rather than after the half-second of a lost link.
     */
    @Test
    void shouldTellAPartnerBusyForAMomentFromALostOne() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final SessionStatus busy = sessionEndedBy(io.blockmover.ErrorCode.BUSY,
            "moving to a new log of its size; reconnect shortly");
        assertEquals(io.blockmover.ErrorCode.BUSY, busy.code());
        assertEquals("the partner reported: moving to a new log of its size; reconnect shortly", busy.message());
        assertEquals(io.blockmover.ErrorCode.PEER_UNREACHABLE,
            sessionEndedBy(io.blockmover.ErrorCode.IO_ERROR, "destination g cannot take more").code());
    }

    /**
     * @return the status of a session whose partner sent an ERROR frame with {@code code}.
     */
    private SessionStatus sessionEndedBy(final io.blockmover.ErrorCode code, final String message)
    {
        final NackingPartner partner = new NackingPartner();
        final Shipper shipper = new Shipper(group, partner, 1, 0, true, () -> 0, 1000, Long.MAX_VALUE,
            Long.MAX_VALUE);
        shipper.onStart();
        partner.error(code, message);
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork);
        shipper.onClose();
        return shipper.status();
    }

    /**
     * A record damaged in the source's own log (not on the link) used to fail every NACK of a session, and then
     * every session, forever. Its own copy is now checked when the partner asks for it again, mended from the
     * volume, and its region resynced.
     */
    @Test
    void shouldMendARecordDamagedInItsOwnLogFromTheVolumeAndResyncItsRegion() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NackingPartner connection = new NackingPartner();
        final List<long[]> sent = connection.sent;
        final List<byte[]> payloads = connection.payloads;
        final Shipper shipper = startedShipper(connection);
        for (int i = 0; i < 3; i++)
        {
            group.export(0).write((long)REGION * i, pattern(i + 1, 4096), 4096, false); // A region each.
        }
        shipper.doWork();
        assertEquals(3, sent.size());

        final RecordLog.Cursor cursor = group.log().newCursor();
        assertTrue(cursor.next());
        assertTrue(cursor.next());
        final ByteBuffer inLog = cursor.payload();
        inLog.put(inLog.position() + 100, (byte)(inLog.get(inLog.position() + 100) ^ 1));

        sent.clear();
        payloads.clear();
        connection.nack(2);
        shipper.doWork();
        assertEquals("[2 unclean crc-ok, 3 unclean crc-ok]", describeSent(sent),
            "the mended record and the one after it, as not a consistent prefix until the region is resent");
        assertArrayEquals(bytes(pattern(2, 4096), 4096), payloads.get(0), "mended with the volume's bytes");
        assertEquals(1, group.recordsMended.get());
        assertEquals(1, group.recordsResent.get());
        assertEquals(1, group.dirtyRegions());
        assertTrue(group.dirty(0).get(1), "the damaged record's region is resynced");
        shipper.onClose();
    }

    /**
     * A VERIFY record damaged in the source's own log cannot be mended from the volume: its digests belong to a
     * past point of the history. It used to be sent damaged again and again, and the group never replicated again.
     * It is now voided (zeros, job id 0: the partner passes over it) and its region is compared again, later.
     */
    @Test
    void shouldVoidAVerifyRecordDamagedInItsOwnLogAndCompareItsRegionAgain() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final NackingPartner connection = new NackingPartner();
        final Shipper shipper = startedShipper(connection);
        final SourceVerifier verifier = new SourceVerifier(group);
        group.verifier(verifier);
        verifier.start(81);
        final ByteBuffer job81 = VerifyResults.payload(81, VerifyRecord.STATUS_COMPARED);
        for (int i = 0; i < 3; i++)
        {
            assertEquals(1, verifier.doWork()); // Regions 0, 1 and 2: LSNs 1, 2 and 3.
        }
        shipper.doWork();
        assertEquals(3, connection.sent.size());
        verifier.onResult(VerifyResults.header(1, 0, 0, 0), job81);

        final RecordLog.Cursor cursor = group.log().newCursor();
        assertTrue(cursor.next() && cursor.next());
        final ByteBuffer inLog = cursor.payload();
        final int length = inLog.remaining();
        inLog.put(inLog.position() + VerifyRecord.DIGESTS_OFFSET, (byte)~inLog.get(inLog.position() +
            VerifyRecord.DIGESTS_OFFSET));
        connection.sent.clear();
        connection.payloads.clear();
        connection.nack(2);
        shipper.doWork();
        assertEquals("[2 crc-ok, 3 crc-ok]", describeSent(connection.sent), "sent again, whole");
        assertArrayEquals(new byte[length], connection.payloads.get(0), "voided: job id 0, nothing to compare");
        assertEquals(1, group.recordsMended.get());
        assertEquals(0, group.dirtyRegions(), "digests only: no region to resend");

        verifier.onResult(VerifyResults.header(3, 0, 2L * REGION, 0), job81);
        assertEquals(0, verifier.answeredThrough(), "region 1 is still to be compared");
        assertEquals(1, verifier.doWork(), "region 1 logged again");
        shipper.doWork();
        assertEquals(4, connection.sent.get(connection.sent.size() - 1)[0]);
        verifier.onResult(VerifyResults.header(4, 0, 1L * REGION, 0), job81);
        assertEquals(3, verifier.compared());
        assertEquals(2, verifier.answeredThrough());
        assertEquals(0, verifier.outstanding());
        assertEquals(0, verifier.staleResults());
        shipper.onClose();
    }

    private static String describeSent(final List<long[]> sent)
    {
        final StringBuilder b = new StringBuilder("[");
        for (final long[] record : sent)
        {
            b.append(b.length() > 1 ? ", " : "").append(record[0])
                .append((record[1] & GroupReceiver.RECORD_UNCLEAN) != 0 ? " unclean" : "")
                .append(record[2] != 0 ? " crc-ok" : " crc-bad");
        }
        return b.append(']').toString();
    }

    /**
     * The activity log: every write's region is hot before the write goes on; past the limit, a checkpoint clears
     * the regions whose writes the partner holds durably once the volume is forced, and keeps the ones written
     * since it began.
     */
    @Test
    void shouldKeepTheRegionsBeingWrittenHotAndClearTheSettledOnesPastTheLimit() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        for (int i = 0; i < 4; i++)
        {
            group.export(0).write((long)REGION * i, pattern(i + 1, 4096), 4096, false);
        }
        assertEquals(4, group.activityRegions());
        assertEquals(0, group.checkpointActivity(4), "within the limit");
        assertEquals(1, group.checkpointActivity(2), "begins at LSN 4");
        group.export(0).write(REGION, pattern(9, 4096), 4096, false); // LSN 5, after it began
        assertEquals(0, group.checkpointActivity(2), "the partner does not hold LSN 4 durably yet");
        group.partnerProgress(4, 4);
        assertEquals(1, group.checkpointActivity(2));
        assertEquals(1, group.activityRegions(), "region 1, written since, stays");
        assertTrue(group.checkpointActivity(2) == 0, "nothing under way, within the limit");
    }

    /**
     * A crash of the host (not only the daemon): the regions of the activity log are dirty after the restart, and
     * a partner that holds more or less than the emptied log continues without every region being resent, unless
     * it lost what it held when the activity log last shrank.
     */
    @Test
    void shouldResendTheActivityLogsRegionsAfterAHostCrashNotEveryRegion() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        for (int i = 0; i < 3; i++)
        {
            group.export(0).write((long)REGION * (i + 2), pattern(i + 1, 4096), 4096, false);
        }
        group.partnerProgress(3, 3);
        assertEquals(1, group.checkpointActivity(0));
        assertEquals(1, group.checkpointActivity(0), "settles LSN 3: every region cleared");
        assertEquals(0, group.activityRegions());
        group.export(0).write(REGION * 7L, pattern(7, 4096), 4096, false); // LSN 4
        group.export(0).write(REGION * 9L, pattern(8, 4096), 4096, false); // LSN 5
        group.close();

        group = open(GroupMode.SYNC, 1L << 20);
        assertEquals(0, group.dirtyRegions());
        assertEquals(2, group.recoverAfterHostCrash(), "regions 7 and 9");
        assertTrue(group.dirty(0).get(7) && group.dirty(0).get(9));
        assertFalse(group.restartAfterHostCrash(2), "the partner lost LSN 3, which it held durably when it settled");
        assertTrue(group.restartAfterHostCrash(5), "the partner holds more than this log now: the two regions do");
        assertEquals(2, group.dirtyRegions());
        assertTrue(group.durableLsn() >= 5);
        group.sessionStarted();
        assertFalse(group.restartAfterHostCrash(5), "only until a session started");
    }

    /**
     * A resync clears a region's dirty bit as the region's record enters the log, and the bitmap may reach the disk
     * before the partner holds the record. A crash of the host loses the log, so the activity log must hold the
     * region: it used not to, and the region was never sent again.
     */
    @Test
    void shouldResendARegionTheResyncLoggedWhenTheHostCrashedBeforeThePartnerHeldIt() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        group.dirty(0).set(2);
        assertTrue(group.resyncRegion(0, 2, BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT)));
        assertFalse(group.dirty(0).get(2));
        group.forceBitmaps();
        group.close();

        group = open(GroupMode.SYNC, 1L << 20);
        assertFalse(group.dirty(0).get(2), "the bit was cleared on disk too");
        assertTrue(group.recoverAfterHostCrash() >= 1);
        assertTrue(group.restartAfterHostCrash(0), "the partner holds nothing: it never got the region");
        assertTrue(group.dirty(0).get(2), "the region is sent again");
    }

    /**
     * The regions a resync made hot need not stay so once it is done and the partner holds them: a checkpoint
     * clears them although the hot set is within its limit (after an initial sync it would hold every region).
     */
    @Test
    void shouldLetGoOfTheRegionsAFinishedResyncMadeHotOnceThePartnerHoldsThem() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        group.dirty(0).set(2);
        group.dirty(0).set(3);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        assertTrue(group.resyncRegion(0, 2, regionBuffer));
        assertEquals(0, group.checkpointActivity(Long.MAX_VALUE), "region 3 is still to be sent");
        assertTrue(group.resyncRegion(0, 3, regionBuffer));
        assertTrue(group.activityRegions() >= 2);
        assertEquals(1, group.checkpointActivity(Long.MAX_VALUE), "the resync is done: begins at LSN 2");
        assertEquals(0, group.checkpointActivity(Long.MAX_VALUE), "the partner does not hold LSN 2 durably yet");
        group.partnerProgress(2, 2);
        assertEquals(1, group.checkpointActivity(Long.MAX_VALUE));
        assertEquals(0, group.activityRegions());
        assertEquals(0, group.checkpointActivity(Long.MAX_VALUE), "nothing more to let go of");
    }

    /**
     * A sync partner forces after every batch only while the source's clients flush: the records sent within
     * {@link SourceGroup#FLUSHING_WINDOW_NS} of a FLUSH say so (RecordFlags.FLUSHING), and so does a FUA write's own
     * record, which goes out before its flush; the others do not. The window is real time: an attempt slower than
     * it (a loaded machine) proves nothing about the mark and is tried again.
     */
    @Test
    void shouldTellThePartnerWhichRecordsItsClientsFlushesMaySoonWaitFor() throws Exception
    {
        // Async: no partner to wait for here. The marks are the same, and only a sync partner acts on them.
        group = open(GroupMode.ASYNC, 1L << 20);
        final NackingPartner partner = new NackingPartner();
        final Shipper shipper = new Shipper(group, partner, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE,
            Long.MAX_VALUE);
        shipper.onStart();
        final NbdExport export = group.export(0);
        final int[] seed = {0};
        final ThrowingRunnable write = () -> export.write(4096L * (seed[0] % 64), pattern(++seed[0], 4096), 4096,
            false);

        assertFalse(markedRecordShipped(shipper, partner, write), "no FLUSH yet");
        assertTrue(markedWithinTheWindow(shipper, partner, () ->
        {
            export.flush();
            write.run();
        }), "a write just after a FLUSH");
        awaitTrue("the FLUSH's window to pass", () -> !group.clientsFlushing());
        assertFalse(markedRecordShipped(shipper, partner, write), "long after the FLUSH");
        assertTrue(markedWithinTheWindow(shipper, partner, () -> export.write(0, pattern(99, 4096), 4096, true)),
            "a FUA write's own record");
        shipper.onClose();
    }

    private interface ThrowingRunnable
    {
        void run() throws IOException;
    }

    /**
     * @return whether the one record that {@code writes} appends is shipped with the FLUSHING mark.
     */
    private static boolean markedRecordShipped(final Shipper shipper, final NackingPartner partner,
        final ThrowingRunnable writes) throws IOException
    {
        final int before = partner.sent.size();
        writes.run();
        shipper.doWork();
        assertEquals(before + 1, partner.sent.size(), "one record shipped");
        return (partner.sent.get(before)[1] & io.blockmover.replication.log.RecordFlags.FLUSHING) != 0;
    }

    /**
     * @return {@link #markedRecordShipped} of the first attempt that ships within the flushing window of its start.
     */
    private static boolean markedWithinTheWindow(final Shipper shipper, final NackingPartner partner,
        final ThrowingRunnable writes) throws IOException
    {
        for (int attempt = 0; attempt < 100; attempt++)
        {
            final long startNs = System.nanoTime();
            final boolean marked = markedRecordShipped(shipper, partner, writes);
            if (System.nanoTime() - startNs < SourceGroup.FLUSHING_WINDOW_NS)
            {
                return marked;
            }
        }
        throw new AssertionError("no attempt shipped within " + SourceGroup.FLUSHING_WINDOW_NS + " ns of its start");
    }

    /**
     * The partner as a shipper sees it: takes every frame, keeps each RECORD's LSN, aux flags, whether its payload
     * matched its CRC, and its bytes, and says NACK when told to.
     */
    /**
     * Takes what the shipper sends, as a socket would: whole while it has room, then one frame held by reference
     * (its payload view, not a copy) until there is room again; answers with the frames it is told to.
     */
    private static final class NackingPartner extends NullFrameConnection
    {
        final List<long[]> sent = new java.util.ArrayList<>();
        final List<byte[]> payloads = new java.util.ArrayList<>();
        private final java.util.ArrayDeque<FrameHeader> replies = new java.util.ArrayDeque<>();
        private final java.util.Map<FrameHeader, byte[]> replyPayloads = new java.util.IdentityHashMap<>();
        private byte[] replyPayload;
        private final FrameHeader heldHeader = new FrameHeader();
        private ByteBuffer heldPayload;
        /** Frames the socket takes whole before it holds one. */
        int roomForFrames = Integer.MAX_VALUE;
        /** Takes nothing at all: not even one frame starts. */
        boolean socketFull;

        void nack(final long lsn)
        {
            replies.add(new FrameHeader().reset(FrameType.NACK).sessionId(1).sequence(lsn).seal());
        }

        void durable(final long lsn)
        {
            replies.add(new FrameHeader().reset(FrameType.DURABLE).sessionId(1).sequence(lsn).seal());
        }

        void error(final io.blockmover.ErrorCode code, final String message)
        {
            final byte[] payload = io.blockmover.protocol.ErrorPayload.encode(code, message);
            final FrameHeader header = new FrameHeader().reset(FrameType.ERROR).sessionId(1)
                .controlPayload(ByteBuffer.wrap(payload)).seal();
            replies.add(header);
            replyPayloads.put(header, payload);
        }

        @Override
        public boolean startSend(final FrameHeader header, final ByteBuffer payload)
        {
            if (socketFull || heldPayload != null)
            {
                throw new IllegalStateException("a frame started while the socket is full");
            }
            if (roomForFrames == 0 && header.type() == FrameType.RECORD)
            {
                copy(header, heldHeader);
                heldPayload = payload;
                return false;
            }
            roomForFrames = roomForFrames == Integer.MAX_VALUE ? roomForFrames : roomForFrames - 1;
            take(header, payload);
            return true;
        }

        private void take(final FrameHeader header, final ByteBuffer payload)
        {
            if (header.type() == FrameType.RECORD)
            {
                final java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
                crc.update(payload.duplicate());
                final boolean crcOk = (int)crc.getValue() == header.payloadCrc();
                sent.add(new long[] {header.sequence(), header.aux(), crcOk ? 1 : 0});
                final byte[] bytes = new byte[payload.remaining()];
                payload.duplicate().get(bytes);
                payloads.add(bytes);
            }
        }

        @Override
        public boolean flush()
        {
            if (socketFull)
            {
                return false;
            }
            if (heldPayload != null)
            {
                if (roomForFrames == 0)
                {
                    return false;
                }
                take(heldHeader, heldPayload);
                heldPayload = null;
            }
            return true;
        }

        @Override
        public boolean isSendPending()
        {
            return socketFull || heldPayload != null;
        }

        @Override
        public boolean receiveHeader(final FrameHeader header)
        {
            final FrameHeader reply = replies.poll();
            if (reply == null)
            {
                return false;
            }
            copy(reply, header);
            replyPayload = replyPayloads.remove(reply);
            return true;
        }

        private static void copy(final FrameHeader from, final FrameHeader to)
        {
            to.byteBuffer().clear();
            to.byteBuffer().put(from.byteBuffer().duplicate().clear()
                .limit(io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH));
        }

        @Override
        public boolean receivePayload(final ByteBuffer dst)
        {
            if (replyPayload != null)
            {
                dst.put(replyPayload, 0, Math.min(replyPayload.length, dst.remaining()));
                replyPayload = null;
            }
            return !dst.hasRemaining();
        }
    }

    /**
     * A NACK while the socket still holds a record frame: the rewind must not move that frame's payload view (the
     * send cursor's). The first fix of the rewind below read ahead with the send cursor, and the frame left with
     * another record's bytes under its CRC (FaultIT: every session then ended with "bad magic 0x0").
     */
    @Test
    void shouldLeaveTheFrameTheSocketHoldsAloneWhenANackRewinds() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        writeSmall(1, 3);
        final NackingPartner partner = new NackingPartner();
        partner.roomForFrames = 2;
        final Shipper shipper =
            new Shipper(group, partner, 2, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        shipper.doWork();
        assertEquals("[1 crc-ok, 2 crc-ok]", describeSent(partner.sent), "3 waits in the socket");

        partner.nack(2);
        shipper.doWork();
        partner.roomForFrames = Integer.MAX_VALUE;
        shipper.doWork();
        assertEquals("[1 crc-ok, 2 crc-ok, 3 crc-ok, 2 crc-ok, 3 crc-ok]", describeSent(partner.sent));
        shipper.onClose();
    }

    /**
     * A new session's shipper released what the partner already held before its send cursor had passed those
     * records: the cursor started at the head and skipped them as it sent. With the socket full in between, a
     * writer short of room reused the space, and the cursor then read a later lap's bytes: records out of order,
     * or a payload taken for a length (FaultIT on CI: the session ended with "IllegalArgumentException: newLimit
     * &lt; 0").
     */
    @Test
    void shouldStartSendingAfterWhatThePartnerHoldsEvenOnceItsSpaceIsReused() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final long last = fillLogWithSmallWrites();
        final NackingPartner partner = new NackingPartner();
        partner.socketFull = true;
        final Shipper shipper =
            new Shipper(group, partner, 2, last - 2, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        shipper.doWork();
        assertSendsFromAfterReuse(shipper, partner, last - 1);
    }

    /**
     * The same for a NACK: the log went again from its head, skipping what the partner held, and a DURABLE in the
     * same batch released those records before the cursor had passed them.
     */
    @Test
    void shouldSendAgainFromADamagedRecordEvenOnceTheSpaceBeforeItIsReused() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final long last = fillLogWithSmallWrites();
        final NackingPartner partner = new NackingPartner();
        final Shipper shipper =
            new Shipper(group, partner, 2, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        shipper.doWork();
        assertEquals(lsnRange(1, last), describe(partner.sent));

        partner.sent.clear();
        partner.socketFull = true;
        partner.nack(last - 1);
        partner.durable(last - 2);
        shipper.doWork();
        assertSendsFromAfterReuse(shipper, partner, last - 1);
    }

    /**
     * With the socket full and the records before {@code first} released: writes reuse their space, and once the
     * socket has room the shipper sends from {@code first} on, in order.
     */
    private void assertSendsFromAfterReuse(final Shipper shipper, final NackingPartner partner, final long first)
        throws IOException
    {
        final long last = group.publishedLsn();
        assertEquals(first, group.log().headLsn(), "what the partner holds is released");
        writeSmall(last + 1, 8);
        assertEquals(last + 8, group.publishedLsn(), "the writes reused the released space");
        partner.socketFull = false;
        shipper.doWork();
        assertEquals(lsnRange(first, last + 8), describe(partner.sent));
        shipper.onClose();
    }

    /**
     * @return the LSN of the last of the 4 KiB writes that filled the log (none went to the bitmap).
     */
    private long fillLogWithSmallWrites() throws IOException
    {
        final int recordLength = io.blockmover.replication.log.RecordLogDescriptor.recordLength(4096);
        long lsn = 0;
        while (group.log().freeBytes() >= 2L * recordLength)
        {
            writeSmall(++lsn, 1);
        }
        assertEquals(lsn, group.publishedLsn());
        return lsn;
    }

    private void writeSmall(final long firstSeed, final int count) throws IOException
    {
        for (long seed = firstSeed; seed < firstSeed + count; seed++)
        {
            group.export(0).write(4096L * (seed % (VOLUME_SIZE / 4096)), pattern((int)seed, 4096), 4096, false);
        }
    }

    private static String lsnRange(final long first, final long last)
    {
        final StringBuilder b = new StringBuilder("[");
        for (long lsn = first; lsn <= last; lsn++)
        {
            b.append(lsn > first ? ", " : "").append(lsn);
        }
        return b.append(']').toString();
    }

    private static String describe(final List<long[]> sent)
    {
        final StringBuilder b = new StringBuilder("[");
        for (final long[] record : sent)
        {
            b.append(b.length() > 1 ? ", " : "").append(record[0])
                .append((record[1] & GroupReceiver.RECORD_RESTART) != 0 ? " restart" : "");
        }
        return b.append(']').toString();
    }

    /**
     * With a frame stuck in a full socket, records published behind it are no reason to stay awake: the shipper
     * must wait for the socket to become writable, not spin on writes that cannot progress.
     */
    @Test
    void shouldLetTheShipperSleepWhileTheSocketHoldsUpAFrame() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final boolean[] socketFull = {false};
        final NullFrameConnection connection = new NullFrameConnection()
        {
            @Override
            public boolean startSend(final FrameHeader header, final ByteBuffer payload)
            {
                return !socketFull[0];
            }

            @Override
            public boolean flush()
            {
                return !socketFull[0];
            }

            @Override
            public boolean isSendPending()
            {
                return socketFull[0];
            }
        };
        final Shipper shipper =
            new Shipper(group, connection, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        group.export(0).write(0, pattern(1, 4096), 4096, false);
        assertTrue(shipper.hasWork(), "a record to send");
        socketFull[0] = true;
        shipper.doWork();
        group.export(0).write(4096, pattern(2, 4096), 4096, false);
        assertFalse(shipper.hasWork(), "the socket holds up the send: wait for it, do not spin");
        socketFull[0] = false;
        assertTrue(shipper.hasWork(), "writable again, with records to send");
        shipper.onClose();
    }

    /**
     * At queue depth 1 a sync write's record leaves on the writer's own thread, before its volume write: waking the
     * sleeping shipper to send it put the ACK's round trip behind the volume write on a shared core. While records
     * are in flight the shipper sends, so that it batches them.
     */
    @Test
    void shouldSendASyncWritesRecordOnTheWritersThreadOnlyWhileNothingIsInFlight() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final List<String> sent = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
        final NullFrameConnection connection = new NullFrameConnection()
        {
            @Override
            public boolean sendsFromAnyThread()
            {
                return true;
            }

            @Override
            public boolean startSend(final FrameHeader header, final ByteBuffer payload)
            {
                if (header.type() == FrameType.RECORD)
                {
                    sent.add(header.sequence() + "@" + Thread.currentThread().getName());
                }
                return true;
            }
        };
        final Shipper shipper = sleepingShipperOfCurrentPartner(connection);
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final Thread first = writer("writer-1", 0, failure);
        awaitTrue("the writer sent a record", () -> !sent.isEmpty());
        assertEquals("[1@writer-1]", sent.toString(), "sent by the writer, the shipper asleep");
        assertTrue(first.isAlive(), "and waiting for its ACK");

        final Thread second = writer("writer-2", 4096, failure);
        second.join(200);
        assertEquals("[1@writer-1]", sent.toString(), "record 1 is in flight: the shipper sends record 2");
        assertTrue(shipper.hasWork());
        shipper.sleeping(false);
        shipper.doWork();
        assertEquals("[1@writer-1, 2@" + Thread.currentThread().getName() + "]", sent.toString());

        group.partnerProgress(2, 0);
        first.join(TimeUnit.SECONDS.toMillis(5));
        second.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(first.isAlive() || second.isAlive(), "both acknowledged");
        assertEquals(null, failure.get());
        shipper.onClose();
    }

    /**
     * A writer that finds the connection broken while sending its own record must not hide it: the shipper ends
     * the session with that reason at its next duty cycle, and the write goes on without the partner.
     */
    @Test
    void shouldEndTheSessionWithTheReasonAWritersOwnSendFailed() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final NullFrameConnection connection = new NullFrameConnection()
        {
            @Override
            public boolean sendsFromAnyThread()
            {
                return true;
            }

            @Override
            public boolean flush()
            {
                // Unchecked here (NullFrameConnection's flush declares nothing); the shipper takes either kind.
                throw new java.io.UncheckedIOException(new IOException("Broken pipe"));
            }
        };
        final Shipper shipper = sleepingShipperOfCurrentPartner(connection);
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final Thread writer = writer("writer-1", 0, failure);
        writer.join(200);
        assertTrue(writer.isAlive(), "waits for the partner");
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork);
        assertTrue(shipper.status().message().contains("Broken pipe"), shipper.status().message());
        shipper.onClose();
        writer.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(writer.isAlive(), "the partner is gone: the write goes on, tracked by the log");
        assertNull(failure.get());
    }

    /**
     * An exception that is not I/O, thrown in the shipper's own duty cycle, is a bug: it ends the session as
     * INTERNAL, named by its class, so the conductor counts and logs it once and the next session begins. It used
     * to reach the agent runner, which logged it and ran the next duty cycle into it again, for as long as it
     * lasted. An unchecked I/O exception (a connection's) ends the session as the partner's loss, as a checked one.
     */
    @Test
    void shouldEndTheSessionOnABugInItsDutyCycleNotRunIntoItAgain() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final RuntimeException[] fault = {new IllegalStateException("a bug")};
        final NullFrameConnection connection = new NullFrameConnection()
        {
            @Override
            public boolean flush()
            {
                throw fault[0];
            }
        };
        Shipper shipper = new Shipper(group, connection, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork);
        assertEquals(io.blockmover.ErrorCode.INTERNAL, shipper.status().code());
        assertEquals("java.lang.IllegalStateException: a bug", shipper.status().message());
        shipper.onClose();

        fault[0] = new java.io.UncheckedIOException(new IOException("Broken pipe"));
        shipper = new Shipper(group, connection, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork);
        assertEquals(io.blockmover.ErrorCode.PEER_UNREACHABLE, shipper.status().code());
        assertTrue(shipper.status().message().contains("Broken pipe"), shipper.status().message());
        shipper.onClose();
    }

    /**
     * @return a started shipper over the connection, asleep as between frames, its partner current.
     */
    private Shipper sleepingShipperOfCurrentPartner(final NullFrameConnection connection)
    {
        final Shipper shipper =
            new Shipper(group, connection, 1, 0, false, () -> 0, 1000, Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        group.updateCurrent(1L << 30);
        shipper.sleeping(true);
        return shipper;
    }

    private Thread writer(final String name, final long offset, final AtomicReference<Throwable> failure)
    {
        final ByteBuffer data = pattern((int)(offset / 4096) + 1, 4096);
        final Thread thread = new Thread(() ->
        {
            try
            {
                group.export(0).write(offset, data, 4096, false);
            }
            catch (final Throwable t)
            {
                failure.set(t);
            }
        }, name);
        thread.start();
        return thread;
    }

    /**
     * Marks every region dirty and resyncs them in order until the log refuses one (no partner releases anything).
     *
     * @return the first region refused.
     */
    private int resyncEveryRegionUntilRefused(final ByteBuffer regionBuffer) throws IOException
    {
        for (int r = 0; r < REGIONS; r++)
        {
            group.dirty(0).set(r);
        }
        int region = 0;
        while (group.resyncRegion(0, region, regionBuffer))
        {
            region++;
        }
        return region;
    }

    /**
     * A session that ends after the partner took a log's worth of resync records, but before its DURABLE came,
     * leaves the log full. The next session's OPENED says the partner holds them all (forced there first): the new
     * shipper must release them, since nothing else will; the resync waits for room and sends nothing that could
     * bring a DURABLE. It used to take the partner's LSN as durable for the group but not for its own release,
     * and the initial sync stalled for good (GroupIT under load, where a 2 s peer.timeout ends sessions).
     */
    @Test
    void shouldReleaseWhatThePartnerHeldFromAnEarlierSessionSoAResyncWaitingForRoomGoesOn() throws IOException
    {
        writeDataVolume();
        group = open(GroupMode.SYNC, 1L << 20);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        final int region = resyncEveryRegionUntilRefused(regionBuffer);
        assertTrue(region > 0 && region < REGIONS, "the log filled after " + region + " regions");
        final long held = group.publishedLsn();

        final Shipper shipper = new Shipper(group, new NullFrameConnection(), 2, held, false, () -> 0, 1000,
            Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        shipper.doWork();
        assertEquals(0, group.log().usedBytes(), "the records the partner holds are released");
        final long forced = group.log().forcedPosition();
        assertTrue(group.resyncRegion(0, region, regionBuffer), "room again for the resync");
        // The room came from persisting the head alone: the records the partner holds were never forced here.
        assertEquals(forced, group.log().forcedPosition(), "reclaiming room forced the partner's records");
        shipper.onClose();
    }

    /**
     * A resync leaves half the log to client writes. It used to fill the log to within two regions: a steady writer's
     * records then found no room and fell back to the bitmaps, dirtying again the regions just sent, and under such a
     * writer the resync never finished (GroupIT on CI, with a 16 MiB log).
     */
    @Test
    void shouldLeaveHalfTheLogToClientWritesWhileResyncing() throws IOException
    {
        writeDataVolume();
        group = open(GroupMode.SYNC, 1L << 20);
        final ByteBuffer regionBuffer = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        final int region = resyncEveryRegionUntilRefused(regionBuffer);
        assertTrue(region > 0, "the resync appended nothing");
        final long free = group.log().freeBytes();
        assertTrue(free >= group.log().capacity() / 2, "the resync left " + free + " bytes of " +
            group.log().capacity() + " after " + region + " regions");

        final NbdExport export = group.export(0);
        final int writes = (int)(group.log().capacity() * 3 / 8 / (4096 + 128));
        for (int i = 0; i < writes; i++)
        {
            export.write((long)(region + i % (REGIONS - region)) * REGION, pattern(i, 4096), 4096, false);
        }
        assertEquals(0, group.untrackedByLog.get(), "client writes that fell back to the bitmaps");
    }

    /**
     * A partner that dropped records damaged in its log, yet holds at least what precedes this log's head, gets them
     * again from this log. An earlier session heard they were durable there; they are not any more: the shipper
     * must keep them until they are resent and durable again, and a FLUSH must wait for that. It used to start from
     * the group's durable LSN and release them at once, so a break before the resend made the next session resend
     * every region, and a FLUSH meanwhile counted records the partner no longer held.
     */
    @Test
    void shouldKeepRecordsThePartnerDroppedUntilTheyAreDurableThereAgain() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        for (int i = 1; i <= 4; i++)
        {
            group.export(0).write((long)REGION * i, pattern(i, 4096), 4096, false);
        }
        group.partnerProgress(4, 4); // An earlier session's DURABLE 4, before its shipper released anything.

        final Shipper shipper = new Shipper(group, new NullFrameConnection(), 2, 1, false, () -> 0, 1000,
            Long.MAX_VALUE, Long.MAX_VALUE);
        shipper.onStart();
        shipper.doWork();
        assertEquals(2, group.log().headLsn(), "LSN 1 released, 2 to 4 kept to be resent");
        assertEquals(1, group.durableLsn(), "the partner holds LSN 1 only");
        assertFalse(group.isInSync());
        shipper.onClose();
    }

    /**
     * Housekeeping makes released log space reusable (a device flush) only when it is due: below half free, or a
     * second after the head was last persisted. On every tick, ten flushes a second stalled this host's disk.
     */
    @Test
    void shouldReclaimLogSpaceFromHousekeepingOnlyWhenDue() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final RecordLog log = group.log();
        int lsn = 0;
        while (log.freeBytes() >= log.capacity() / 4)
        {
            group.export(0).write(4096L * (lsn++ % 64), pattern(lsn, 4096), 4096, false);
        }
        releaseEveryRecord();
        assertTrue(group.reclaimLogSpaceWhenDue(), "less than half the log free: at once");
        assertEquals(log.capacity(), log.freeBytes());

        for (int i = 0; i < 4; i++)
        {
            group.export(0).write(4096L * i, pattern(i, 4096), 4096, false);
        }
        releaseEveryRecord();
        final long free = log.freeBytes();
        assertFalse(group.reclaimLogSpaceWhenDue(), "more than half free, persisted just now: not yet");
        assertEquals(free, log.freeBytes());
        awaitTrue("a second after the last time", group::reclaimLogSpaceWhenDue);
        assertEquals(log.capacity(), log.freeBytes());
        group.export(0).write(0, pattern(9, 4096), 4096, false);
        releaseEveryRecord();
        assertFalse(group.reclaimLogSpaceWhenDue());
        assertTrue(group.reclaimLogSpace(), "an append out of room reclaims whenever there is released space");
    }

    private void releaseEveryRecord()
    {
        final RecordLog.Cursor records = group.log().newCursor();
        long last = -1;
        while (records.next())
        {
            last = records.position();
        }
        group.log().release(last);
    }

    /**
     * @return a shipper over a connection that never answers, on the given clock, started.
     */
    private Shipper startedShipperWithAckTimeout(final long[] now, final long ackTimeoutNs)
    {
        final Shipper shipper = new Shipper(group, new NullFrameConnection(), 1, 0, false, () -> now[0], 1000,
            Long.MAX_VALUE, ackTimeoutNs);
        shipper.onStart();
        return shipper;
    }

    /**
     * A sync partner that stays alive yet acknowledges nothing (its log full, its disk failing) would hold a sync
     * write for ever: after ack.timeout the shipper drops it, and the write goes on. Time without records to
     * acknowledge does not count.
     */
    @Test
    void shouldDropASyncPartnerThatAcknowledgesNothingAndReleaseTheWriteItHeld() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final long[] now = {0};
        final Shipper shipper = startedShipperWithAckTimeout(now, 5_000);
        now[0] += 10_000;
        shipper.doWork();
        assertTrue(shipper.status().isRunning(), "nothing sent, nothing to acknowledge");
        assertTrue(group.isPartnerCurrent(), "linked with nothing outstanding: sync writes wait for the partner");

        final AtomicReference<Throwable> failed = new AtomicReference<>();
        final Thread writer = new Thread(() ->
        {
            try
            {
                group.export(0).write(0, pattern(1, 4096), 4096, false);
            }
            catch (final Throwable ex)
            {
                failed.set(ex);
            }
        });
        writer.start();
        while (group.publishedLsn() < 1)
        {
            Thread.onSpinWait();
        }
        shipper.doWork();
        now[0] += 4_000;
        shipper.doWork();
        assertTrue(shipper.status().isRunning(), "within the timeout");
        writer.join(200);
        assertTrue(writer.isAlive(), "the sync write waits for the partner's ACK");
        now[0] += 2_000;
        assertThrows(org.agrona.concurrent.AgentTerminationException.class, shipper::doWork);
        assertTrue(shipper.status().message().contains("acknowledged nothing"), shipper.status().message());
        shipper.onClose();
        writer.join(10_000);
        assertFalse(writer.isAlive(), "the write goes on once the partner is dropped");
        assertNull(failed.get());
    }

    /**
     * An async group's writes never wait for the partner, and over a slow link one large record may take longer
     * than ack.timeout to arrive: its partner is not dropped for slow acknowledgements.
     */
    @Test
    void shouldNotDropAnAsyncPartnerForSlowAcknowledgements() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        final long[] now = {0};
        final Shipper shipper = startedShipperWithAckTimeout(now, 5_000);
        group.export(0).write(0, pattern(1, 4096), 4096, false);
        shipper.doWork();
        now[0] += 60_000;
        shipper.doWork();
        assertTrue(shipper.status().isRunning(), shipper.status().message());
        shipper.onClose();
    }

    @Test
    void shouldReplayALoggedWriteWhoseVolumeWriteMayNotHaveHappened() throws IOException
    {
        group = open(GroupMode.ASYNC, 1L << 20);
        // A record appended as the front end does, but the daemon died before writing the volume.
        final long position = group.log().tryAppend(1, 0, 12288, 0, pattern(3, 4096), 0, 4096);
        assertTrue(position >= 0);
        group.close();
        group = null;
        assertArrayEquals(new byte[4096], fileBytes(12288, 4096));
        group = open(GroupMode.ASYNC, 1L << 20);
        assertEquals(1, group.replayUnwritten());
        assertArrayEquals(bytes(pattern(3, 4096), 4096), fileBytes(12288, 4096));
        assertEquals(0, group.replayUnwritten(), "replayed once, then marked written");
    }

    /**
     * The partner dropped records damaged in its log and holds less than this log's head (this side released
     * them): the regions it names and those of the records still here are resent, not every region.
     */
    @Test
    void shouldResendTheRegionsThePartnerDroppedAndThisLogsNotEveryRegion() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        for (int i = 1; i <= 3; i++)
        {
            group.export(0).write((long)REGION * i, pattern(i, 4096), 4096, false);
        }
        final RecordLog.Cursor records = group.log().newCursor();
        assertTrue(records.next() && records.next());
        group.log().release(records.position()); // LSNs 1 and 2: the partner held them durably
        assertFalse(group.restartAfterPartnerDropped(0, List.of(List.of(0, 1, 64))), "past the volume's regions");
        assertFalse(group.restartAfterPartnerDropped(0, List.of(List.of(1, 0, 0))), "no volume 1");
        assertEquals(0, group.dirtyRegions());

        assertTrue(group.restartAfterPartnerDropped(0, List.of(List.of(0, 1, 2))));
        assertEquals(3, group.dirtyRegions(), "1 and 2 it names, 3 still in this log");
        assertTrue(group.dirty(0).get(1) && group.dirty(0).get(2) && group.dirty(0).get(3));
        assertTrue(group.log().isEmpty(), "the sequence continues after both sides' highest");
        assertEquals(3, group.durableLsn());
    }

    /**
     * Closing a group (delete, switch, shutdown) while a client's sync write waits for the partner: the write fails
     * with ESHUTDOWN before the log and bitmaps are unmapped (close waits for it), and later ones are refused.
     */
    @Test
    void shouldFailAWaitingWriteAndRefuseNewOnesWhenClosed() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final NbdExport export = group.export(0);
        group.linked(() -> { });
        group.updateCurrent(1L << 30);
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final Thread writer = new Thread(() ->
        {
            try
            {
                export.write(4096, BufferUtil.allocateDirectAligned(4096, Slab.ALIGNMENT), 4096, false);
            }
            catch (final Throwable t)
            {
                failure.set(t);
            }
        });
        writer.start();
        writer.join(300);
        assertTrue(writer.isAlive(), "a sync write waits for the partner's ACK");
        group.close();
        writer.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(writer.isAlive());
        assertTrue(failure.get() instanceof NbdErrorException e && e.errorCode() == NbdProtocol.NBD_ESHUTDOWN,
            String.valueOf(failure.get()));
        final NbdErrorException refused = assertThrows(NbdErrorException.class,
            () -> export.write(0, pattern(1, 4096), 4096, false));
        assertEquals(NbdProtocol.NBD_ESHUTDOWN, refused.errorCode());
        assertThrows(NbdErrorException.class, export::flush);
    }

    /**
     * A sync group whose first write (LSN 1, not forced here) the partner holds durably, linked and current.
     *
     * @return its export.
     */
    private NbdExport openSyncWithOneDurableWrite() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final NbdExport export = group.export(0);
        export.write(0, pattern(1, 4096), 4096, false);
        group.linked(() -> { });
        group.partnerProgress(1, 1);
        group.updateCurrent(1L << 30);
        assertTrue(group.isPartnerCurrent());
        return export;
    }

    /**
     * A sync FLUSH is durable once this host's volume is forced and the partner's log holds every record durably.
     * When the partner's DURABLE came before the FLUSH (it forces after every batch, unasked), this host's log
     * has nothing to add: it used to be forced anyway, a second device flush beside the volume's on most FLUSHes
     * at queue depth 1. With the partner away, the log is what survives, and a FLUSH forces it.
     */
    @Test
    void shouldForceTheLogOnAFlushOnlyWhenThePartnerDoesNotHoldItsRecordsDurably() throws Exception
    {
        final NbdExport export = openSyncWithOneDurableWrite();
        final long forced = group.log().forcedPosition();
        assertTrue(group.log().tailPosition() > forced, "the record is not forced yet");
        export.flush();
        assertEquals(forced, group.log().forcedPosition(), "the partner holds LSN 1 durably: no log force");

        group.unlinked();
        export.write(4096, pattern(2, 4096), 4096, false);
        export.flush();
        assertEquals(group.log().tailPosition(), group.log().forcedPosition(), "partner away: the log is forced");
    }

    @Test
    void shouldMakeSyncWritesWaitForThePartnerOnlyWhileItIsCurrent() throws Exception
    {
        final NbdExport export = openSyncWithOneDurableWrite();

        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final ByteBuffer own = BufferUtil.allocateDirectAligned(4096, Slab.ALIGNMENT);
        final Thread writer = new Thread(() ->
        {
            try
            {
                export.write(4096, own, 4096, false);
            }
            catch (final Throwable t)
            {
                failure.set(t);
            }
        });
        writer.start();
        writer.join(300);
        assertTrue(writer.isAlive(), "a sync write waits for the partner's ACK");
        group.partnerProgress(2, 1);
        writer.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(writer.isAlive(), "the ACK released it");

        final Thread degraded = new Thread(() ->
        {
            try
            {
                export.write(8192, own, 4096, false);
            }
            catch (final Throwable t)
            {
                failure.set(t);
            }
        });
        group.unlinked();
        degraded.start();
        degraded.join(TimeUnit.SECONDS.toMillis(5));
        assertFalse(degraded.isAlive(), "with the partner gone, writes go on (tracked by the log)");
        assertEquals(null, failure.get());
    }

    /**
     * A sync write through writeDeferrable leaves its acknowledgement to the partner's ACK instead of holding the
     * NBD worker: completed exactly once, by the ACK that covers it, by the partner going away (acknowledged, as a
     * waiting write would be), or by the group closing (failed). An async write, or one the partner need not
     * wait for, is done on return.
     */
    @Test
    void shouldCompleteADeferredSyncWriteOnItsAckOrWhenWaitingEnds() throws Exception
    {
        group = open(GroupMode.SYNC, 1L << 20);
        final NbdExport export = group.export(0);
        final List<Integer> outcomes = new java.util.concurrent.CopyOnWriteArrayList<>();
        assertTrue(export.writeDeferrable(0, pattern(1, 4096), 4096, false, outcomes::add),
            "no partner yet: nothing to wait for");
        group.linked(() -> { });
        group.partnerProgress(1, 1);
        group.updateCurrent(1L << 30);
        assertTrue(group.isPartnerCurrent());

        final long acksBefore = group.partnerAckNs.getTotalCount();
        assertFalse(export.writeDeferrable(4096, pattern(2, 4096), 4096, false, outcomes::add), "LSN 2 deferred");
        assertArrayEquals(bytes(pattern(2, 4096), 4096), fileBytes(4096, 4096), "written locally before deferring");
        assertFalse(export.writeDeferrable(8192, pattern(3, 4096), 4096, false, outcomes::add), "LSN 3 deferred");
        group.partnerProgress(1, 1);
        assertEquals(List.of(), outcomes, "no ACK covers them yet");
        group.partnerProgress(2, 1);
        assertEquals(List.of(0), outcomes, "the ACK for LSN 2 completes that write only");
        group.partnerProgress(3, 2);
        group.partnerProgress(3, 3);
        assertEquals(List.of(0, 0), outcomes, "each write completed once");
        assertEquals(acksBefore + 2, group.partnerAckNs.getTotalCount(), "their partner-ACK latency is counted");

        outcomes.clear();
        assertFalse(export.writeDeferrable(12288, pattern(4, 4096), 4096, false, outcomes::add));
        group.unlinked();
        assertEquals(List.of(0), outcomes, "the partner is gone: the write is acknowledged, tracked by the log");
        assertTrue(export.writeDeferrable(16384, pattern(5, 4096), 4096, false, outcomes::add),
            "and later writes do not wait");

        group.linked(() -> { });
        group.partnerProgress(5, 5);
        group.updateCurrent(1L << 30);
        outcomes.clear();
        assertFalse(export.writeDeferrable(20480, pattern(6, 4096), 4096, false, outcomes::add));
        group.close();
        group = null;
        assertEquals(List.of(NbdProtocol.NBD_ESHUTDOWN), outcomes, "a closing group fails what still waits");
    }

    /**
     * More sync writes wait for the partner at once than 16 connections at queue depth 16 make (256): each is
     * left to the ACK, none holds its caller. With 256 deferred slots, the 257th waited on its thread (an NBD
     * connection's reaper, whose other completions then waited with it) until the ACK came, and here until the
     * test timed out.
     */
    @Test
    void shouldDeferTheSyncWritesOfMoreThanSixteenConnectionsAtQueueDepthSixteen() throws Exception
    {
        group = open(GroupMode.SYNC, 4L << 20);
        final NbdExport export = group.export(0);
        group.linked(() -> { });
        group.partnerProgress(0, 0);
        group.updateCurrent(1L << 30);
        assertTrue(group.isPartnerCurrent());
        final int writes = 20 * 16;
        final List<Integer> outcomes = new java.util.concurrent.CopyOnWriteArrayList<>();
        final java.util.concurrent.ExecutorService writer = java.util.concurrent.Executors.newSingleThreadExecutor();
        try
        {
            final java.util.concurrent.Future<Integer> deferred = writer.submit(() ->
            {
                int n = 0;
                for (int i = 0; i < writes; i++)
                {
                    if (!export.writeDeferrable(4096L * (i % (VOLUME_SIZE / 4096)), pattern(i, 4096), 4096, false,
                        outcomes::add))
                    {
                        n++;
                    }
                }
                return n;
            });
            assertEquals(writes, deferred.get(20, TimeUnit.SECONDS), "every write left to the ACK");
            assertEquals(List.of(), outcomes, "none completed before its ACK");
            group.partnerProgress(group.log().tailLsn(), group.log().tailLsn());
            assertEquals(writes, outcomes.size(), "the ACK completed every one");
            assertTrue(outcomes.stream().allMatch((e) -> e == 0), outcomes.toString());
        }
        finally
        {
            group.partnerProgress(Long.MAX_VALUE - 1, Long.MAX_VALUE - 1);
            writer.shutdownNow();
        }
    }

    @Test
    void shouldRefuseWritesWhileFrozenForASwitch() throws IOException
    {
        group = open(GroupMode.SYNC, 1L << 20);
        group.freeze(true);
        final NbdErrorException ex = assertThrows(NbdErrorException.class,
            () -> group.export(0).write(0, pattern(1, 4096), 4096, false));
        assertTrue(ex.getMessage().contains("switching roles"), ex.getMessage());
        assertEquals(0, group.log().usedBytes(), "nothing was logged");
        group.freeze(false);
        group.export(0).write(0, pattern(1, 4096), 4096, false);
    }

    @Test
    void shouldNotAllocateOnTheWritePath() throws IOException
    {
        group = open(GroupMode.ASYNC, 64L << 20);
        final NbdExport export = group.export(0);
        final ByteBuffer data = pattern(5, 4096);
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        for (int i = 0; i < 5_000; i++)
        {
            export.write((i % 1024) * 4096L, data, 4096, false);
        }
        final int writes = 20_000;
        final long before = threads.getCurrentThreadAllocatedBytes();
        for (int i = 0; i < writes; i++)
        {
            export.write((i % 1024) * 4096L, data, 4096, false);
        }
        final long allocated = threads.getCurrentThreadAllocatedBytes() - before;
        // A few one-off kilobytes (lazy JDK internals) are tolerated; one object per write (16+ bytes) is not.
        assertTrue(allocated < writes / 2, "allocated " + allocated + " bytes over " + writes + " writes");
    }
}
