package io.blockmover.replication;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicIntegerArray;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The activity log against real files: what it persists before a write goes on, and what a checkpoint may clear.
 */
class ActivityLogTest
{
    private static final int REGION = 1 << 20;
    private static final long[] REGIONS = {16, 8};

    @TempDir
    Path dir;

    @Test
    void shouldPersistAMarkBeforeItReturnsAndSayWhetherItExistedBefore()
    {
        try (ActivityLog log = ActivityLog.open(dir, REGIONS, REGION))
        {
            assertFalse(log.existed(), "new: it cannot speak for what came before");
            assertEquals(0, log.hotRegions());
            log.release(log.mark(0, 3, 4));
            log.release(log.mark(1, 7, 7));
            log.release(log.mark(0, 4, 4));
            assertEquals(3, log.hotRegions());
        }
        // What a crash right after the marks leaves: the files as written (close forces nothing new here).
        try (ActivityLog log = ActivityLog.open(dir, REGIONS, REGION))
        {
            assertTrue(log.existed());
            assertTrue(log.hot(0).get(3) && log.hot(0).get(4) && log.hot(1).get(7));
            assertEquals(3, log.hotRegions());
            assertEquals(0, log.settledLsn());
        }
        ActivityLog.delete(dir, REGIONS.length);
        try (ActivityLog log = ActivityLog.open(dir, REGIONS, REGION))
        {
            assertFalse(log.existed(), "deleted: a new history");
            assertEquals(0, log.hotRegions());
        }
    }

    @Test
    void shouldClearOnlyRegionsNeitherWrittenSinceTheCheckpointBeganNorInFlight() throws Exception
    {
        final AtomicIntegerArray[] inflight = {new AtomicIntegerArray((int)REGIONS[0]),
            new AtomicIntegerArray((int)REGIONS[1])};
        try (ActivityLog log = ActivityLog.open(dir, REGIONS, REGION))
        {
            for (int r = 0; r < 6; r++)
            {
                final long stamp = log.mark(0, r, r);
                log.touch(0, r, r);
                log.release(stamp);
            }
            log.beginCheckpoint(); // at LSN 6, say
            final long stamp = log.mark(0, 2, 2);
            log.touch(0, 2, 2); // written after it began: stays
            log.release(stamp);
            inflight[0].set(4, 1); // a write from before it, still on its way to the volume: stays
            assertEquals(4, log.chooseCandidates(inflight));
            inflight[0].set(4, 0);
            final long late = log.mark(0, 5, 5);
            log.touch(0, 5, 5); // chosen, then written before the clear: stays
            log.release(late);
            assertEquals(3, log.endCheckpoint(6));
            assertEquals(6, log.settledLsn());
            assertTrue(log.hot(0).get(2) && log.hot(0).get(4) && log.hot(0).get(5));
            assertEquals(3, log.hotRegions());

            final long held = log.mark(0, 9, 9); // a writer between its mark and its touch
            assertEquals(2, log.chooseCandidates(inflight), "regions 4 and 9: hot, untouched, not in flight");
            assertEquals(-1, log.endCheckpoint(6), "never clears under a writer between mark and touch");
            log.touch(0, 9, 9);
            log.release(held);
        }
        try (ActivityLog log = ActivityLog.open(dir, REGIONS, REGION))
        {
            assertEquals(6, log.settledLsn(), "persisted");
            assertEquals(4, log.hotRegions());
        }
        assertEquals("6", Files.readString(dir.resolve("activity.settled")).trim());
    }
}
