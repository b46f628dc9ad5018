package io.blockmover.it;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.GroupChecks.lsn;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A failover ('group switch --force') on a destination whose log holds records it has not applied yet: the source
 * died before the destination's next force, and a destination applies only what its log made durable. site-b
 * forces its log 20 s after the first record it has not forced (flush.interval; 200 ms by default), so that the
 * records written just before the source dies stay unforced, and unapplied, until the failover forces them (its
 * applier would force them itself 40 s after the last force; the test takes a few seconds). Before, the failover
 * forced the log and answered BUSY ("still applying its log: retry in a moment") because the applier had not caught
 * up within the same step; a person at a terminal in a disaster had to retry by hand.
 */
@Timeout(180)
class FailoverIT
{
    private static final long SIZE = 64L * MIB;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("failover", "--set", "connect.timeout=1s", "--set", "peer.timeout=2s",
            "--set", "heartbeat.interval=500ms", "--set", "reconnect.max.interval=1s",
            "--set-b", "flush.interval=20s");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    @Test
    void shouldApplyWhatTheLogHoldsAndThenFailOverInOneRequest() throws Exception
    {
        final String name = "unforced";
        final Path source = Volumes.zeros(testbed.dir.resolve(name + "-src.img"), SIZE);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), SIZE);
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "async", "--log-size",
            "256m", "--volume", source + "=" + destination);
        // The initial sync ends, and the destination is consistent, once the force the source asks for came.
        Testbed.await("the group to replicate, site-b consistent", 60, () -> "replicating".equals(GroupChecks.state(
            testbed.group("site-a", name))) && Boolean.TRUE.equals(testbed.group("site-b", name).get("consistent")));
        // Under a quarter of the log (64 MiB), which would force it; enough that the apply takes a moment.
        Run.of(120, List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0), "-c", "write -P 0x6b 1M 48M"))
            .expect(0);
        final long last = lsn(testbed.group("site-a", name), "last");
        Testbed.await("site-b to hold every record", 30, () -> lsn(testbed.group("site-b", name), "held") == last);
        final Map<String, Object> held = testbed.group("site-b", name);
        assertTrue(lsn(held, "applied") < last, "site-b applied records its log never made durable: " + held);

        testbed.kill("site-a");
        Testbed.await("site-b to notice", 30, () -> !"receiving".equals(GroupChecks.state(
            testbed.group("site-b", name))));
        final CompletableFuture<Run> running = CompletableFuture.supplyAsync(() -> testbed.cli("site-b", "group",
            "switch", name, "--force"));
        // Meanwhile the destination's status says what it waits for (the CLI's start takes longer than a poll).
        Map<String, Object> pending = null;
        while (!running.isDone() && pending == null)
        {
            final Map<String, Object> status = testbed.group("site-b", name);
            if (status.get("failover_pending") instanceof Map<?, ?>)
            {
                pending = status;
            }
        }
        final Run failover = running.get(120, TimeUnit.SECONDS).expect(0);
        assertNotNull(pending, "site-b's status never showed the failover waiting on it: " + failover);
        final Map<?, ?> waiting = (Map<?, ?>)pending.get("failover_pending");
        assertTrue(((Number)waiting.get("applied_lsn")).longValue() < ((Number)waiting.get("held_lsn")).longValue(),
            pending.toString());
        assertTrue(failover.stdout().contains("group " + name + " is now source here"), failover.toString());
        assertTrue(testbed.log("site-b").contains("group " + name + ": failover waits for the log to be applied"),
            "the failover found nothing left to apply, so this test tested nothing: " + held);
        assertEquals("source", testbed.group("site-b", name).get("role"));
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, SIZE);
    }
}
