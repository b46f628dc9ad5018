package io.blockmover.it;

import java.nio.file.Path;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A copy survives kill -9 of either daemon and a cut link, resumes from its persisted bitmap (never from zero)
 * and ends with an identical copy. Few slots and small flushes keep the copy slow enough to interrupt midway.
 */
@Timeout(300)
class ResumeIT
{
    private static final long SIZE = 512L * MIB;
    private static final long CHUNKS = SIZE / MIB;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("resume", "--set", "session.slots=4", "--set", "flush.bytes=4m",
            "--set", "peer.timeout=3s", "--set", "heartbeat.interval=500ms", "--set", "reconnect.max.interval=1s");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    private static long startCopy(final Path source, final Path target) throws Exception
    {
        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--detach", "--json")
            .expect(0);
        return ((Number)JSON.std.mapFrom(run.stdout()).get("id")).longValue();
    }

    private static long bytesDone(final long id)
    {
        return ((Number)testbed.job("site-a", id).get("bytes_done")).longValue();
    }

    private static void awaitMidway(final long id)
    {
        Testbed.await("the copy to be under way", 120, () -> bytesDone(id) >= 32L * MIB);
        assertTrue(bytesDone(id) < SIZE, "the copy finished before it could be interrupted: slow it down");
    }

    private static void awaitCompleted(final long id)
    {
        Testbed.await("job " + id + " to complete", 240, () ->
        {
            final Map<String, Object> job = testbed.job("site-a", id);
            assertTrue(!"failed".equals(job.get("state")), () -> "job failed: " + job);
            return "completed".equals(job.get("state"));
        });
    }

    @Test
    void shouldResumeAfterTheSourceIsKilled() throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("ks-src.img"), SIZE, 11);
        final Path target = Volumes.zeros(testbed.dir.resolve("ks-dst.img"), SIZE);
        final long id = startCopy(source, target);
        awaitMidway(id);

        final long lostBefore = testbed.counter("site-b", "connections lost");
        testbed.kill("site-a");
        // Chunks site-a sent before it died may still be in site-b's socket: counted once site-b has read to the
        // connection's end, not as sent again.
        Testbed.await("site-b to read to the end of the dead source's connection", 30,
            () -> testbed.counter("site-b", "connections lost") > lostBefore);
        final long receivedAtKill = testbed.counter("site-b", "chunks received");
        // What site-a resumes from, read before it can send anything: the restarted job runs at once, and a copy
        // this fast moves on by many chunks during one CLI call, which a later reading would count as durable.
        testbed.signal("site-b", "STOP");
        final long durableAfterRestart;
        try
        {
            testbed.start("site-a");
            durableAfterRestart = bytesDone(id);
        }
        finally
        {
            testbed.signal("site-b", "CONT");
        }
        awaitCompleted(id);

        assertNull(Volumes.firstDifference(source, target, SIZE));
        assertTrue(durableAfterRestart >= 32L * MIB, "progress was lost: " + durableAfterRestart);
        final long resent = testbed.counter("site-b", "chunks received") - receivedAtKill;
        assertTrue(resent <= CHUNKS - durableAfterRestart / MIB, "resumed from zero? " + resent + " chunks sent " +
            "again, after " + durableAfterRestart / MIB + " of " + CHUNKS + " were durable");
    }

    @Test
    void shouldResumeAfterTheDestinationIsKilled() throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("kd-src.img"), SIZE, 12);
        final Path target = Volumes.zeros(testbed.dir.resolve("kd-dst.img"), SIZE);
        final long id = startCopy(source, target);
        awaitMidway(id);

        testbed.kill("site-b");
        Testbed.await("the job to notice", 30, () -> "waiting".equals(testbed.job("site-a", id).get("state")));
        final long durableAtKill = bytesDone(id);
        final long sentAtKill = testbed.counter("site-a", "chunks sent");
        testbed.start("site-b");
        awaitCompleted(id);

        assertNull(Volumes.firstDifference(source, target, SIZE));
        final long resent = testbed.counter("site-a", "chunks sent") - sentAtKill;
        assertTrue(resent <= CHUNKS - durableAtKill / MIB, "resumed from zero? " + resent + " chunks sent again");
        assertTrue(testbed.job("site-a", id).get("last_error") == null);
    }

    @Test
    void shouldResumeAfterTheLinkIsCut() throws Exception
    {
        assumeTrue(testbed.isNamespaces(), "cutting the link needs the namespace testbed (root); loopback has none");
        final Path source = Volumes.random(testbed.dir.resolve("lk-src.img"), SIZE, 13);
        final Path target = Volumes.zeros(testbed.dir.resolve("lk-dst.img"), SIZE);
        final long id = startCopy(source, target);
        awaitMidway(id);
        final long lostBefore = testbed.counter("site-a", "connections lost");

        testbed.link("down");
        try
        {
            Testbed.await("the source to notice the silent peer", 30,
                () -> "waiting".equals(testbed.job("site-a", id).get("state")));
        }
        finally
        {
            testbed.link("up");
        }
        awaitCompleted(id);

        assertNull(Volumes.firstDifference(source, target, SIZE));
        assertTrue(testbed.counter("site-a", "connections lost") > lostBefore);
        assertEquals(0, testbed.counter("site-a", "errors"), () -> testbed.log("site-a"));
    }
}
