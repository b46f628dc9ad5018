package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.agrona.concurrent.SystemNanoClock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;
import io.blockmover.replication.log.RecordLog;

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

    @BeforeEach
    void open() throws IOException
    {
        final Path file = Files.write(dir.resolve("volume"), new byte[SIZE]);
        final GroupConfig config = new GroupConfig("g", GroupConfig.ROLE_DESTINATION, "site-a", GroupMode.SYNC, false,
            List.of(new GroupConfig.VolumePair("/src", file.toString(), SIZE)), 4L << 20, REGION, 0);
        log = RecordLog.open(dir.resolve("log"), 4L << 20, REGION);
        log.reset(1);
        group = new DestinationGroup(config, new Volume[] {Volume.open(file, true)}, log, new SystemNanoClock(),
            1L << 20, 1_000_000L);
    }

    @AfterEach
    void close()
    {
        group.close();
    }

    private void apply(final long offset, final int flags)
    {
        assertTrue(log.tryAppend(++lsn, 0, offset, flags, payload, 0, payload.capacity()) >= 0);
        while (group.appliedLsn() < lsn)
        {
            group.doWork();
        }
        assertNull(group.failure());
    }

    @Test
    void shouldBeConsistentOnlyWhenTheSourceConfirmedAndNoResyncCameAfter()
    {
        apply(0, 0);
        assertFalse(group.isConsistent(), "nothing confirmed since start");
        group.sourceState(1, true);
        assertTrue(group.isConsistent());

        apply(REGION, SourceGroup.RECORD_RESYNC);
        assertFalse(group.isConsistent(), "a resync record after the confirmation: regions are mixed");
        group.sourceState(2, true);
        assertTrue(group.isConsistent(), "the resync finished at LSN 2");

        group.sourceState(3, false);
        assertFalse(group.isConsistent(), "the source has regions to resync (a record came flagged unclean)");
        group.sourceState(5, true);
        apply(0, 0);
        apply(0, 0);
        assertFalse(group.isConsistent(), "confirmed at LSN 5 but applied only " + group.appliedLsn());
        apply(0, 0);
        assertTrue(group.isConsistent());
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
}
