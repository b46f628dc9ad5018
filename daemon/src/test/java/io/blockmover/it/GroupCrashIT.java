package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.GroupChecks.awaitDestinationSettled;
import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.GroupChecks.state;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Crash consistency of a group of two volumes under kill -9. A QD1 writer stamps every 4 KiB write with one global
 * sequence across both volumes (see {@link StampedWriter}); after a crash the destination must hold a prefix of that
 * sequence (every block the last write to it up to the highest sequence found), a sync destination every write
 * acknowledged before the crash, and once replication resumes both sides must be byte for byte equal.
 */
@Timeout(300)
class GroupCrashIT
{
    private static final long SIZE = 64L * MIB;
    private static final int BLOCKS = 1024;
    private static final int FLUSH_EVERY = 16;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("group-crash", "--set", "peer.timeout=3s", "--set", "heartbeat.interval=500ms",
            "--set", "reconnect.max.interval=1s");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    private static Path[] files(final String prefix) throws Exception
    {
        final Path[] files = new Path[2];
        for (int i = 0; i < files.length; i++)
        {
            files[i] = Volumes.zeros(testbed.dir.resolve(prefix + i + ".img"), SIZE);
        }
        return files;
    }

    private static StampedWriter createGroup(final String name, final String mode, final Path[] sources,
        final Path[] destinations) throws Exception
    {
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", mode, "--log-size", "64m",
            "--volume", sources[0] + "=" + destinations[0], "--volume", sources[1] + "=" + destinations[1]);
        awaitReplicated(testbed, name, 60);
        return new StampedWriter(testbed.nbdSocket("site-a"), GroupChecks.exports(created), BLOCKS, FLUSH_EVERY);
    }

    private static void writeAWhile(final StampedWriter writer, final SplittableRandom random)
    {
        final long target = writer.acked() + 200 + random.nextInt(2000);
        Testbed.await("the writer to reach seq " + target, 60, () ->
        {
            assertTrue(writer.isRunning(), () -> "the writer stopped: " + writer.ended());
            return writer.acked() >= target;
        });
    }

    private void killTheSourceWhileWriting(final String name, final String mode, final int rounds) throws Exception
    {
        final Path[] sources = files(name + "-src");
        final Path[] destinations = files(name + "-dst");
        final StampedWriter writer = createGroup(name, mode, sources, destinations);
        final long seed = System.nanoTime();
        final SplittableRandom random = new SplittableRandom(seed);

        for (int round = 1; round <= rounds; round++)
        {
            final String where = mode + " round " + round + " (seed " + seed + ")";
            writer.start();
            writeAWhile(writer, random);

            testbed.kill("site-a");
            assertNotNull(writer.awaitEnded(30), "the writer kept writing to a killed daemon");
            awaitDestinationSettled(testbed, name, 30);

            final long k = StampedWriter.assertPrefix("destination after kill -9 of the source, " + where,
                destinations, BLOCKS);
            assertTrue(k <= writer.issued(), "the destination holds seq " + k + ", never written: " + where);
            if ("sync".equals(mode))
            {
                assertTrue(k >= writer.acked(), "sync group lost acknowledged writes: acked up to " + writer.acked() +
                    ", destination holds up to " + k + ", " + where);
            }

            System.out.printf("%s: kill -9 of the source after seq %d acked, %d issued; destination holds a prefix " +
                "up to %d%n", where, writer.acked(), writer.issued(), k);
            testbed.start("site-a");
            // The control socket exists before the groups are open; an answer means recovery (replay) is done.
            testbed.group("site-a", name);
            final long sourceK = StampedWriter.assertPrefix("source after kill -9 and restart, " + where, sources,
                BLOCKS);
            assertTrue(sourceK >= writer.acked(), "the source lost acknowledged writes: acked up to " +
                writer.acked() + ", source holds up to " + sourceK + ", " + where);
            awaitReplicated(testbed, name, 90);
            GroupChecks.assertSameVolumes(sources, destinations, SIZE);
            assertEquals(sourceK, StampedWriter.assertPrefix("destination caught up, " + where, destinations, BLOCKS));
        }
        GroupChecks.delete(testbed, name);
    }

    @Test
    void shouldKeepASyncDestinationAPrefixHoldingEveryAcknowledgedWriteWhenTheSourceIsKilled() throws Exception
    {
        killTheSourceWhileWriting("kill-src-sync", "sync", 2);
    }

    @Test
    void shouldKeepAnAsyncDestinationAPrefixWhenTheSourceIsKilled() throws Exception
    {
        killTheSourceWhileWriting("kill-src-async", "async", 1);
    }

    /**
     * A crash of the source host, not only of its daemon: the group's run record names another boot, as after a
     * power loss, so the log and the page cache count as lost. Before the activity log, every region of every
     * volume was resent. Now only the regions being written are (those of the writer here: 4 of 128), and the
     * two sides end equal. The page cache does survive here, so what this checks is the regions chosen and the
     * continuity taken up with the partner; that the marks come before the writes is the unit tests' part.
     */
    @Test
    void shouldResendOnlyTheActivityLogsRegionsAfterACrashOfTheSourceHost() throws Exception
    {
        final String name = "host-crash";
        final Path[] sources = files(name + "-src");
        final Path[] destinations = files(name + "-dst");
        final StampedWriter writer = createGroup(name, "sync", sources, destinations);
        writer.start();
        writeAWhile(writer, new SplittableRandom(7));
        final long hot = GroupChecks.number(testbed.group("site-a", name), "activity_regions");
        assertTrue(hot >= 1 && hot <= 8, "the writer's blocks lie in the first 4 MiB of each volume: " + hot);
        testbed.kill("site-a");
        assertNotNull(writer.awaitEnded(30), "the writer kept writing to a killed daemon");
        asIfTheHostHadCrashed(name);

        testbed.start("site-a");
        awaitReplicated(testbed, name, 90);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        final String log = testbed.log("site-a");
        assertTrue(log.contains("region(s) of its activity log not already dirty will be resent"), log);
        final long resent = GroupChecks.number(testbed.group("site-a", name), "regions_resent");
        assertTrue(resent >= 1 && resent <= hot, resent + " regions resent, " + hot + " were hot: " + log);
        GroupChecks.delete(testbed, name);
    }

    /**
     * Makes the killed source's group look as after a crash of its host: its run record names another boot, so its
     * log and page cache count as lost.
     */
    private static void asIfTheHostHadCrashed(final String name) throws Exception
    {
        final Path run;
        try (java.util.stream.Stream<Path> files = Files.walk(testbed.dir.resolve("site-a")))
        {
            run = files.filter(f -> f.endsWith(Path.of(name, "run.json"))).findFirst().orElseThrow();
        }
        Files.writeString(run, "{\"clean\" : false, \"boot_id\" : \"a boot before this one\"}");
    }

    /**
     * A crash of the source host during the initial sync. The resyncer clears a region's dirty bit once the region
     * is in the source's log; the link is down, so those records never reach the partner, and they are lost with
     * the log in the crash. Their regions must be sent again although their bits were cleared.
     */
    @Test
    void shouldResendTheRegionsAnInitialSyncHadNotDeliveredWhenTheSourceHostCrashed() throws Exception
    {
        assumeTrue(testbed.isNamespaces(), "cutting the link needs the namespace testbed (root)");
        final String name = "host-crash-sync";
        final Path[] sources = {Volumes.random(testbed.dir.resolve(name + "-src.img"), SIZE, 11)};
        final Path[] destinations = {Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), SIZE)};
        // Slow enough that the initial sync is still running when the link is cut (the limit is kept across
        // the restart, and reset once it is done).
        testbed.call("site-a", "peer-set", Map.of("name", "site-b", "max_rate", 8L * MIB));
        try
        {
            GroupChecks.create(testbed, name, "--mode", "sync", "--log-size", "64m", "--volume",
                sources[0] + "=" + destinations[0]);
            Testbed.await("part of the initial sync acknowledged", 60,
                () -> GroupChecks.lsn(testbed.group("site-a", name), "acked") >= 4);
            // Cut, not a frozen partner: its kernel would still take what is sent into the socket's buffer.
            testbed.link("down");
            try
            {
                Testbed.await("regions in the source's log that the partner does not have", 30, () ->
                {
                    final Map<String, Object> status = testbed.group("site-a", name);
                    return GroupChecks.lsn(status, "last") >= GroupChecks.lsn(status, "acked") + 4;
                });
                final Map<String, Object> status = testbed.group("site-a", name);
                System.out.printf("initial sync cut: the source logged LSN %d, the partner acknowledged %d%n",
                    GroupChecks.lsn(status, "last"), GroupChecks.lsn(status, "acked"));
                testbed.kill("site-a");
            }
            finally
            {
                testbed.link("up");
            }
            asIfTheHostHadCrashed(name);
            testbed.start("site-a");
        }
        finally
        {
            testbed.call("site-a", "peer-set", Map.of("name", "site-b", "reset", true));
        }
        awaitReplicated(testbed, name, 120);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        GroupChecks.delete(testbed, name);
    }

    /**
     * kill -9 of each side in turn while the initial sync runs and a writer writes: the sync goes on from where it
     * was, and once it is done the two sides are equal and the destination holds every acknowledged write.
     */
    @Test
    void shouldFinishAnInitialSyncThatEachSideWasKilledDuringAndLoseNoWrite() throws Exception
    {
        final String name = "kill-initial-sync";
        final Path[] sources = new Path[2];
        final Path[] destinations = new Path[2];
        for (int i = 0; i < 2; i++)
        {
            // Random past the writer's blocks, so that the initial sync has something to send; zeros where it writes.
            sources[i] = Volumes.random(testbed.dir.resolve(name + "-src" + i + ".img"), SIZE, 21 + i);
            Volumes.patch(sources[i], 0, BLOCKS * StampedWriter.BLOCK, (byte)0);
            destinations[i] = Volumes.zeros(testbed.dir.resolve(name + "-dst" + i + ".img"), SIZE);
        }
        final long seed = System.nanoTime();
        final SplittableRandom random = new SplittableRandom(seed);
        final StampedWriter writer;
        // Slow enough that the initial sync (128 MiB) outlasts both kills.
        testbed.call("site-a", "peer-set", Map.of("name", "site-b", "max_rate", 8L * MIB));
        try
        {
            final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "sync", "--log-size",
                "64m", "--volume", sources[0] + "=" + destinations[0], "--volume", sources[1] + "=" + destinations[1]);
            writer = new StampedWriter(testbed.nbdSocket("site-a"), GroupChecks.exports(created), BLOCKS,
                FLUSH_EVERY);
            writer.start();
            writeAWhile(writer, random);
            assertEquals("initial-sync", state(testbed.group("site-a", name)), "seed " + seed);

            testbed.kill("site-b");
            Testbed.await("the source to notice", 30,
                () -> !"initial-sync".equals(state(testbed.group("site-a", name))));
            writeAWhile(writer, random);
            testbed.start("site-b");
            Testbed.await("the initial sync to go on", 60,
                () -> "initial-sync".equals(state(testbed.group("site-a", name))));
            writeAWhile(writer, random);

            testbed.kill("site-a");
            assertNotNull(writer.awaitEnded(30), "the writer kept writing to a killed daemon");
            testbed.start("site-a");
            testbed.group("site-a", name);
            assertTrue(StampedWriter.assertPrefix("source after kill -9 and restart", sources, BLOCKS) >=
                writer.acked(), "the source lost acknowledged writes, seed " + seed);
            Testbed.await("the initial sync to go on after the source's restart", 60,
                () -> "initial-sync".equals(state(testbed.group("site-a", name))));
            writer.start();
            writeAWhile(writer, random);
            writer.stop();
        }
        finally
        {
            testbed.call("site-a", "peer-set", Map.of("name", "site-b", "reset", true));
        }
        final Map<String, Object> status = awaitReplicated(testbed, name, 120);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        assertEquals(writer.acked(), StampedWriter.assertPrefix("destination after the initial sync", destinations,
            BLOCKS), "seed " + seed);
        System.out.printf("initial sync with kill -9 of each side (seed %d): %d writes acknowledged, %d regions " +
            "of %d sent after the source's restart%n", seed, writer.acked(),
            GroupChecks.number(status, "regions_resent"), 2 * SIZE / MIB);
        GroupChecks.delete(testbed, name);
    }

    @Test
    void shouldShipTheLoggedBacklogAfterTheSourceIsKilledDuringAnOutage() throws Exception
    {
        assumeTrue(testbed.isNamespaces(), "cutting the link needs the namespace testbed (root)");
        final String name = "kill-src-outage";
        final Path[] sources = files(name + "-src");
        final Path[] destinations = files(name + "-dst");
        final StampedWriter writer = createGroup(name, "sync", sources, destinations);
        writer.start();
        Testbed.await("some writes", 30, () -> writer.acked() >= 300);

        testbed.link("down");
        try
        {
            Testbed.await("the source to notice the outage", 30,
                () -> "degraded".equals(state(testbed.group("site-a", name))));
            final long ackedAtDegraded = writer.acked();
            Testbed.await("writes acknowledged while degraded", 30, () ->
            {
                assertTrue(writer.isRunning(), () -> "the writer stopped: " + writer.ended());
                return writer.acked() >= ackedAtDegraded + 1500;
            });
            testbed.kill("site-a");
            assertNotNull(writer.awaitEnded(30), "the writer kept writing to a killed daemon");
            awaitDestinationSettled(testbed, name, 30);
        }
        finally
        {
            testbed.link("up");
        }
        final long k = StampedWriter.assertPrefix("destination during the outage", destinations, BLOCKS);
        assertTrue(k < writer.acked(), "the outage did not hold anything back (" + k + ")");

        testbed.start("site-a");
        testbed.group("site-a", name);
        assertTrue(StampedWriter.assertPrefix("source after kill -9 and restart", sources, BLOCKS) >= writer.acked());
        awaitReplicated(testbed, name, 90);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        final Map<String, Object> status = testbed.group("site-a", name);
        assertEquals(0, GroupChecks.number(status, "regions_resent"), "the log should have held the backlog: " +
            status);
        GroupChecks.delete(testbed, name);
    }

    @Test
    void shouldKeepWritingWhenTheDestinationIsKilledAndCatchUpAfterItsRestart() throws Exception
    {
        final String name = "kill-dst";
        final Path[] sources = files(name + "-src");
        final Path[] destinations = files(name + "-dst");
        final StampedWriter writer = createGroup(name, "sync", sources, destinations);
        final long seed = System.nanoTime();
        final SplittableRandom random = new SplittableRandom(seed);

        for (int round = 1; round <= 2; round++)
        {
            final String where = "round " + round + " (seed " + seed + ")";
            writer.start();
            writeAWhile(writer, random);

            final long ackedBeforeKill = writer.acked();
            testbed.kill("site-b");
            Testbed.await("the source to notice", 30, () -> "degraded".equals(state(testbed.group("site-a", name))));
            final long ackedAtDegraded = writer.acked();
            Testbed.await("writes to go on being acknowledged while degraded", 30, () ->
            {
                assertTrue(writer.isRunning(), () -> "the writer stopped: " + writer.ended());
                return writer.acked() >= ackedAtDegraded + 300;
            });
            writer.stop();

            // Suspended, the source sends nothing: what the restarted destination holds is its own recovery alone.
            testbed.call("site-a", "group-suspend", Map.of("name", name));
            testbed.start("site-b");
            awaitDestinationSettled(testbed, name, 30);
            final long k = StampedWriter.assertPrefix("destination after kill -9 and restart, " + where, destinations,
                BLOCKS);
            System.out.printf("%s: kill -9 of the destination after seq %d acked; acked to %d while degraded; " +
                "restarted destination holds a prefix up to %d%n", where, ackedBeforeKill, writer.acked(), k);
            assertTrue(k >= ackedBeforeKill, "the destination lost writes it had acknowledged to a sync source: " +
                "acked up to " + ackedBeforeKill + " before the kill, it holds up to " + k + ", " + where);

            testbed.call("site-a", "group-resume", Map.of("name", name));
            awaitReplicated(testbed, name, 90);
            GroupChecks.assertSameVolumes(sources, destinations, SIZE);
            assertEquals(writer.acked(), StampedWriter.assertPrefix("destination caught up, " + where, destinations,
                BLOCKS));
        }
        GroupChecks.delete(testbed, name);
    }
}
