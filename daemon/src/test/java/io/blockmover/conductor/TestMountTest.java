package io.blockmover.conductor;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.frontend.nbd.ExportRegistry;
import io.blockmover.io.Volume;
import io.blockmover.replication.group.DestinationGroup;
import io.blockmover.replication.group.DurableConsistency;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.GroupMode;
import io.blockmover.replication.log.RecordLog;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A test mount waits, without holding the conductor, for the applier to reach what the destination held when it was
 * asked for; it is served then, and given up if the applier stalls or the operator dismounts first. A real applier
 * on a real log and volume, run by hand.
 */
class TestMountTest
{
    private static final int SIZE = 1024 * 1024;
    private static final int REGION = 64 * 1024;

    @TempDir
    Path dir;

    private RecordLog log;
    private DestinationGroup group;
    private GroupConfig config;
    private final ExportRegistry exports = new ExportRegistry();
    private final ByteBuffer payload = ByteBuffer.allocate(4096);
    private long lsn;

    @BeforeEach
    void open() throws IOException
    {
        final Path file = dir.resolve("volume");
        Files.write(file, new byte[SIZE]);
        log = RecordLog.open(dir.resolve("log"), 4L << 20, REGION);
        log.reset(1);
        config = new GroupConfig("g", GroupConfig.ROLE_DESTINATION, "site-a", GroupMode.SYNC, false,
            List.of(new GroupConfig.VolumePair("/src", file.toString(), SIZE)), 4L << 20, REGION, 0);
        group = new DestinationGroup(config, new Volume[] {Volume.open(file, true)}, log, System::nanoTime,
            1L << 20, 1_000_000_000L, new DurableConsistency(dir));
        // One record applied, confirmed clean by the source: a consistent destination.
        append();
        group.forceLog();
        runApplier();
        group.sourceState(lsn, true);
        assertTrue(group.isConsistent());
    }

    @AfterEach
    void close()
    {
        group.close();
    }

    /** A record the receiver appended and did not force. */
    private void append()
    {
        assertTrue(log.tryAppend(++lsn, 0, (lsn % 16) * 4096L, 0, payload, 0, payload.capacity()) >= 0);
    }

    private void runApplier()
    {
        for (int i = 0; i < 4; i++)
        {
            group.doWork();
        }
    }

    /** A dismount waits for the applier to drop an armed hook: run it meanwhile, as its own thread would. */
    private void dismountWhileTheApplierRuns(final TestMount mount) throws InterruptedException
    {
        final AtomicBoolean done = new AtomicBoolean();
        final Thread applier = new Thread(() ->
        {
            while (!done.get())
            {
                group.doWork();
            }
        });
        applier.start();
        try
        {
            mount.dismount();
        }
        finally
        {
            done.set(true);
            applier.join();
        }
        assertNull(group.armedHook());
    }

    private TestMount begin(final long nowNs)
    {
        return TestMount.begin(config, group, dir.resolve("state"), exports, "site-b", log.tailLsn(), nowNs);
    }

    @Test
    void shouldServeTheViewsOnlyOnceTheApplierReachedWhatWasHeld() throws Exception
    {
        append();
        append();
        final TestMount mount = begin(0);
        runApplier();
        assertFalse(mount.tryFinish(1), "served before the applier applied the held records");
        assertNull(exports.find("g-test/src"));
        assertEquals(3, mount.fromLsn());

        group.forceLog();
        runApplier();
        assertTrue(mount.tryFinish(2));
        assertEquals(3, mount.lsn());
        assertNotNull(exports.find("g-test/src"));
        dismountWhileTheApplierRuns(mount);
        assertNull(exports.find("g-test/src"));
        assertFalse(Files.exists(dir.resolve("state").resolve(TestMount.DIR_NAME)));
    }

    @Test
    void shouldGiveUpWhenTheApplierAppliesNothingForTheStallTime()
    {
        append();
        final TestMount mount = begin(0);
        runApplier();
        assertFalse(mount.tryFinish(TestMount.STALL_NS - 1));
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> mount.tryFinish(TestMount.STALL_NS + 1));
        assertEquals(ErrorCode.BUSY, ex.code());
        assertTrue(ex.getMessage().contains("applied nothing of its log for 30 s") &&
            ex.getMessage().contains("applied LSN 1 of the 2"), ex.getMessage());
        assertFalse(Files.exists(dir.resolve("state").resolve(TestMount.DIR_NAME)), "the views' files stay");

        // Given up, the view is never armed: records applied later are not preserved for it.
        group.forceLog();
        runApplier();
        assertNull(group.armedHook());
    }

    @Test
    void shouldCountAnyProgressOfTheApplierAgainstTheStall()
    {
        append();
        log.forceRecords();
        append();
        final TestMount mount = begin(0);
        // The first of the two records was durable: applied just before the stall time, the clock starts again.
        runApplier();
        assertEquals(2, group.appliedLsn());
        assertFalse(mount.tryFinish(TestMount.STALL_NS - 1));
        assertFalse(mount.tryFinish(2 * TestMount.STALL_NS - 2));
        assertThrows(BlockmoverException.class, () -> mount.tryFinish(2 * TestMount.STALL_NS));
    }

    @Test
    void shouldNeverArmAViewDismountedBeforeItWasServed()
    {
        append();
        final TestMount mount = begin(0);
        runApplier();
        mount.dismount();
        group.forceLog();
        runApplier();
        assertEquals(2, group.appliedLsn());
        assertNull(group.armedHook(), "a dismounted view armed");
        assertFalse(Files.exists(dir.resolve("state").resolve(TestMount.DIR_NAME)));
    }
}
