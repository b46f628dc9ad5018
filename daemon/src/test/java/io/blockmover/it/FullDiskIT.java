package io.blockmover.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.GroupChecks.number;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Full disks, for real: volumes are sparse files on small tmpfs mounts, so a write past the space the mount has
 * fails with ENOSPC in the kernel, as on a thin pool or a full file system.
 * <ul>
 * <li>The destination runs out while applying: it says so (status, log), keeps every record in its log, retries,
 * and once space is added ends equal to the source.</li>
 * <li>A copy's target runs out: the source's job waits, showing the peer's reason, and finishes once space is
 * added.</li>
 * <li>The source runs out under a client's write: the client gets ENOSPC (qemu pauses its guest on that, where EIO
 * would fail its disk), and the record already logged for the failed write does not leave the partner different:
 * its regions are resent from what the source holds.</li>
 * </ul>
 */
@Timeout(300)
class FullDiskIT
{
    private static final long SIZE = 24L * MIB;
    private static Path mounts;
    private static Path smallSource;
    private static Path smallDestination;
    private static Path smallDestination2;
    private static Path smallDestination3;
    private static Path smallTarget;
    /** A small ext4 on a loop device, which fsfreeze can freeze (tmpfs cannot); null without a loop device. */
    private static Path freezable;
    private static Testbed testbed;

    @BeforeAll
    static void up() throws IOException
    {
        // Mounted before the daemons start: they run in network namespaces made by 'ip netns exec', whose mount
        // namespaces do not see mounts made after them (a remount that resizes one is seen: same file system).
        mounts = Path.of(System.getProperty("blockmover.it.dir", System.getProperty("java.io.tmpdir")),
            "bm-it-full-mounts");
        smallSource = mount(mounts.resolve("source"), "4m");
        smallDestination = mount(mounts.resolve("destination"), "6m");
        smallDestination2 = mount(mounts.resolve("destination2"), "6m");
        smallDestination3 = mount(mounts.resolve("destination3"), "6m");
        smallTarget = mount(mounts.resolve("target"), "6m");
        freezable = mountExt4(mounts.resolve("freezable"), mounts.resolve("freezable.ext4"));
        // reconnect.max.interval stays at its default (10 s): the copy test checks that retries slow down.
        testbed = Testbed.up("full", "--set", "peer.timeout=2s", "--set", "heartbeat.interval=500ms");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
        for (final String name : new String[] {"source", "destination", "destination2", "destination3", "target"})
        {
            Run.of(30, List.of("umount", mounts.resolve(name).toString()));
        }
        if (freezable != null)
        {
            Run.of(30, List.of("fsfreeze", "--unfreeze", freezable.toString())); // Refused when not frozen.
            Run.of(30, List.of("umount", freezable.toString()));
        }
        Run.of(30, List.of("rm", "-f", mounts.resolve("freezable.ext4").toString()));
    }

    /**
     * @return the mount point, or null when the file system cannot be made or mounted (no loop device).
     */
    private static Path mountExt4(final Path dir, final Path image) throws IOException
    {
        Run.of(30, List.of("umount", dir.toString()));
        Files.createDirectories(dir);
        Files.deleteIfExists(image);
        Run.of(30, List.of("truncate", "-s", "64M", image.toString())).expect(0);
        if (Run.of(60, List.of("mkfs.ext4", "-q", "-F", image.toString())).exitCode() != 0 ||
            Run.of(30, List.of("mount", "-o", "loop", image.toString(), dir.toString())).exitCode() != 0)
        {
            return null;
        }
        return dir;
    }

    private static Path mount(final Path dir, final String size) throws IOException
    {
        Run.of(30, List.of("umount", dir.toString()));
        Files.createDirectories(dir);
        Run.of(30, List.of("mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", dir.toString())).expect(0);
        return dir;
    }

    private static void resize(final Path dir, final String size)
    {
        Run.of(30, List.of("mount", "-o", "remount,size=" + size, dir.toString())).expect(0);
    }

    /**
     * Creates a sync group and waits until it replicates. Seeded: equal zeros are compared, not sent, so a sparse
     * destination file stays sparse until written.
     *
     * @return the status 'group create' printed.
     */
    private static Map<String, Object> seededSyncGroup(final String name, final Path source, final Path destination,
        final String logSize) throws IOException
    {
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "sync", "--log-size", logSize,
            "--seeded", "--volume", source + "=" + destination);
        awaitReplicated(testbed, name, 60);
        return created;
    }

    private static Path sparse(final Path file, final long size) throws IOException
    {
        Files.deleteIfExists(file);
        try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(file.toFile(), "rw"))
        {
            raf.setLength(size);
        }
        return file;
    }

    /**
     * A disk that holds a write (failing, or a network disk gone; here a frozen file system, on which a write waits
     * in the kernel until it thaws) must not take the daemon down when the write's group stops: the stop waits 10 s
     * for it, then leaves the group's files to it, and the write's end closes them. Before, the stop unmapped the
     * log under the write, whose end then crashed the daemon (SIGSEGV on the connection's reaper).
     */
    @Test
    void shouldStopAGroupWhoseVolumeHoldsAWriteAndServeOn() throws Exception
    {
        assumeTrue(freezable != null, "needs a loop device, to mount an ext4 that fsfreeze can freeze");
        final String name = "held";
        final Path source = Volumes.zeros(freezable.resolve(name + "-src.img"), 8 * MIB);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), 8 * MIB);
        final Map<String, Object> created = seededSyncGroup(name, source, destination, "64m");
        final ExecutorService writer = Executors.newSingleThreadExecutor();
        try (NbdClient client = NbdClient.connect(testbed.nbdSocket("site-a"), GroupChecks.exports(created)[0]))
        {
            final long lastBefore = lastLsn(name);
            final byte[] block = new byte[4096];
            Arrays.fill(block, (byte)0x5a);
            Run.of(30, List.of("fsfreeze", "--freeze", freezable.toString())).expect(0);
            final Future<Integer> write;
            try
            {
                write = writer.submit(() -> client.write(4096, block));
                Testbed.await("the write's record in the log", 30, () -> lastLsn(name) > lastBefore);
                assertFalse(write.isDone(), "the frozen file system holds the volume write");
                testbed.cli("site-a", "group", "delete", name).expect(0);
                assertTrue(testbed.log("site-a").contains("group " + name + ": reads or writes are still in its " +
                    "volumes' disks after 10 s; its files stay open until they end"), testbed.logTail("site-a", 20));
                assertFalse(write.isDone(), "still held");
            }
            finally
            {
                Run.of(30, List.of("fsfreeze", "--unfreeze", freezable.toString())).expect(0);
            }
            assertEquals(0, write.get(60, TimeUnit.SECONDS), "the write, once the disk gave it back");
            // Alive, and its exports still served: a new group on the same daemon replicates.
            testbed.cli("site-a", "status").expect(0);
            final Path again = Volumes.random(testbed.dir.resolve(name + "-again-src.img"), 4 * MIB, 18);
            final Path againDst = Volumes.zeros(testbed.dir.resolve(name + "-again-dst.img"), 4 * MIB);
            GroupChecks.create(testbed, name + "2", "--mode", "sync", "--log-size", "64m",
                "--volume", again + "=" + againDst);
            awaitReplicated(testbed, name + "2", 60);
            GroupChecks.assertSameVolumes(new Path[] {again}, new Path[] {againDst}, 4 * MIB);
            GroupChecks.delete(testbed, name + "2");
        }
        finally
        {
            writer.shutdownNow();
            testbed.call("site-b", "group-delete", Map.of("name", name));
        }
    }

    private static long lastLsn(final String name)
    {
        @SuppressWarnings("unchecked")
        final Map<String, Object> lsn = (Map<String, Object>)testbed.group("site-a", name).get("lsn");
        return number(lsn, "last");
    }

    @Test
    void shouldKeepRetryingADestinationThatRanOutOfSpaceAndEndEqual() throws Exception
    {
        final String name = "fulldst";
        final Path source = Volumes.random(testbed.dir.resolve(name + "-src.img"), SIZE, 91);
        final Path destination = sparse(smallDestination.resolve(name + "-dst.img"), SIZE);
        GroupChecks.create(testbed, name, "--mode", "sync", "--log-size", "64m",
            "--volume", source + "=" + destination);

        Testbed.await("the destination to report the full disk", 60, () ->
        {
            final Object error = testbed.group("site-b", name).get("error");
            return error != null && error.toString().contains("No space left on device") &&
                error.toString().contains("free space") && error.toString().contains("tried again");
        });
        Testbed.await("a retry", 30, () -> number(testbed.group("site-b", name), "apply_failures") >= 2);
        assertTrue(testbed.log("site-b").contains("cannot apply LSN"), "the failure is in the log");
        // The source hears it too, with its next acknowledgement or heartbeat, long before the log fills.
        Testbed.await("the source to show the partner's failure", 30, () ->
            Boolean.TRUE.equals(testbed.group("site-a", name).get("partner_apply_failing")));
        assertTrue(testbed.log("site-a").contains("site-b cannot apply to its volumes"), testbed.log("site-a"));
        resize(smallDestination, "64m");
        awaitReplicated(testbed, name, 120);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, SIZE);
        // The conductor notices the recovery on its next duty cycle, a moment after the applier.
        Testbed.await("the recovery in the log", 10, () ->
            testbed.log("site-b").contains("group " + name + ": applying again"));
        assertTrue(!testbed.group("site-b", name).containsKey("error"), "the error is gone once applying again");
        Testbed.await("the source to see the recovery", 30, () ->
            Boolean.FALSE.equals(testbed.group("site-a", name).get("partner_apply_failing")));
        GroupChecks.delete(testbed, name);
    }

    /**
     * The destination runs out of space after the initial sync, under sync writes, and its log then fills: it
     * can neither apply nor log. It must not hold the source's writes (they wait for ACKs that cannot come): it
     * ends the session saying why, the source goes on without it, and everything converges once space is added.
     */
    @Test
    void shouldNotHoldSyncWritesWhenTheDestinationCanNeitherApplyNorLog() throws Exception
    {
        final String name = "fulllog";
        final long size = 48L * MIB;
        final Path source = Volumes.zeros(testbed.dir.resolve(name + "-src.img"), size);
        final Path destination = sparse(smallDestination2.resolve(name + "-dst.img"), size);
        final Map<String, Object> created = seededSyncGroup(name, source, destination, "16m");

        // 32 MiB of writes: about 6 fit on the destination's file system, 16 in its log, the rest nowhere.
        final long startNs = System.nanoTime();
        final Run write = Run.of(120, List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0),
            "-c", "write -P 0x6b 0 32M", "-c", "flush")).expect(0);
        assertTrue(!(write.stdout() + write.stderr()).contains("failed"), write.toString());
        final long seconds = (System.nanoTime() - startNs) / 1_000_000_000L;
        assertTrue(seconds < 60, "the writes were held " + seconds + " s");
        Testbed.await("the source to hear why", 30, () ->
            String.valueOf(testbed.group("site-a", name).get("last_error")).contains("cannot take more"));
        // Each new session is dropped at once while nothing changes: redialled ever more slowly.
        assertRedialledEverMoreSlowly(() -> number(testbed.group("site-a", name), "sessions"));

        resize(smallDestination2, "64m");
        awaitReplicated(testbed, name, 120);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, size);
        GroupChecks.delete(testbed, name);
    }

    /**
     * A record damaged in the destination's own log (its disk or memory), found when the applier comes to it:
     * here the applier waits on a full file system while the record sits in the log, and a byte of it is changed
     * in the file. Before, the applier stopped there for good and the group had to be deleted and created again.
     * Now the destination drops the record with every record after it, and the source sends them again: here it
     * had released them (the destination had them durably), so it resends the regions the destination names for
     * the records it dropped, not every region. The volumes end equal.
     */
    @Test
    void shouldDropARecordDamagedInTheDestinationsLogAndGetItAgain() throws Exception
    {
        final String name = "dmglog";
        final long size = 24L * MIB;
        final Path source = Volumes.zeros(testbed.dir.resolve(name + "-src.img"), size);
        final Path destination = sparse(smallDestination3.resolve(name + "-dst.img"), size);
        final Map<String, Object> created = seededSyncGroup(name, source, destination, "64m");

        // 8 MiB of writes: about 6 fit on the destination's file system; the marker block after them waits in
        // its log.
        Run.of(120, List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0), "-c", "write -P 0x6b 0 8M"))
            .expect(0);
        final byte[] block = GroupChecks.markedBlock("blockmover FullDiskIT damaged-log marker");
        try (NbdClient client = NbdClient.connect(testbed.nbdSocket("site-a"), GroupChecks.exports(created)[0]))
        {
            assertEquals(0, client.write(16 * MIB, block));
            assertEquals(0, client.flush());
        }
        Testbed.await("the destination to report the full disk", 60, () ->
            String.valueOf(testbed.group("site-b", name).get("error")).contains("No space left on device"));
        GroupChecks.damageMarkedRecord(testbed, "site-b", name, block);

        resize(smallDestination3, "64m");
        awaitReplicated(testbed, name, 120);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, size);
        assertTrue(number(testbed.group("site-b", name), "records_dropped") >= 1, testbed.group("site-b", name)
            .toString());
        assertTrue(testbed.log("site-b").contains("damaged in this host's log"), testbed.log("site-b"));
        assertTrue(testbed.log("site-b").contains("dropped from its log"), testbed.log("site-b"));
        // The source had released the dropped records: it resends their regions (here the marker's one region,
        // at 16 MiB), not the group's 24.
        assertTrue(testbed.log("site-a").contains("it dropped records damaged in its log"), testbed.log("site-a"));
        final long resent = number(testbed.group("site-a", name), "regions_resent");
        assertTrue(resent >= 1 && resent <= 2, resent + " regions resent");
        GroupChecks.delete(testbed, name);
    }

    @Test
    void shouldWaitWithTheReasonWhenACopysTargetIsFullAndFinishOnceThereIsRoom() throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("copy-src.img"), SIZE, 93);
        final Path target = sparse(smallTarget.resolve("copy-dst.img"), SIZE);
        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--detach", "--json")
            .expect(0);
        final long id = ((Number)com.fasterxml.jackson.jr.ob.JSON.std.mapFrom(run.stdout()).get("id")).longValue();
        Testbed.await("the job to wait, saying why", 60, () ->
        {
            final Map<String, Object> job = testbed.job("site-a", id);
            return "waiting".equals(job.get("state")) &&
                String.valueOf(job.get("last_error")).contains("site-b: write to " + target + " failed: No space");
        });
        assertRedialledEverMoreSlowly(() -> sessions(target));

        resize(smallTarget, "64m");
        Testbed.await("the copy to complete", 60, () ->
        {
            final Map<String, Object> job = testbed.job("site-a", id);
            assertTrue(!"failed".equals(job.get("state")), () -> "job failed: " + job);
            return "completed".equals(job.get("state"));
        });
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {target}, SIZE);
    }

    /**
     * Retried with a growing delay (0.5 s, then 1, 2, 4 ... up to reconnect.max.interval), not twice a second:
     * from the next session on, two more take at least 1 + 2 s; at a fixed 0.5 s they took about 1.2 s.
     */
    private static void assertRedialledEverMoreSlowly(final java.util.function.LongSupplier sessions)
    {
        final long before = sessions.getAsLong();
        Testbed.await("a new session", 60, () -> sessions.getAsLong() > before);
        final long firstNs = System.nanoTime();
        final long first = sessions.getAsLong();
        Testbed.await("two more sessions", 60, () -> sessions.getAsLong() >= first + 2);
        final long ms = (System.nanoTime() - firstNs) / 1_000_000;
        assertTrue(ms >= 2_500, "two more sessions came within " + ms + " ms");
    }

    private static long sessions(final Path target)
    {
        return testbed.log("site-b").lines().filter(line -> line.contains("receiving job") &&
            line.contains(target.toString())).count();
    }

    @Test
    void shouldAnswerEnospcAndResendWhatAFailedSourceWriteShipped() throws Exception
    {
        final String name = "fullsrc";
        final Path source = sparse(smallSource.resolve(name + "-src.img"), 16L * MIB);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), 16L * MIB);
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "sync", "--log-size", "64m",
            "--volume", source + "=" + destination);
        awaitReplicated(testbed, name, 60);

        // 8 MiB of data into a 4 MiB file system: the first megabytes land, the rest fail with ENOSPC.
        final Run write = Run.of(120, List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0),
            "-c", "write -P 0x5a 0 8M"));
        assertTrue((write.stdout() + write.stderr()).contains("No space left on device"), write.toString());

        awaitReplicated(testbed, name, 60);
        final Map<String, Object> status = testbed.group("site-a", name);
        assertTrue(number(status, "writes_failed_locally") >= 1, status.toString());
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, 16L * MIB);

        // With room again, the same write succeeds and replicates.
        resize(smallSource, "32m");
        final Run again = Run.of(120, List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0),
            "-c", "write -P 0x5a 0 8M", "-c", "flush")).expect(0);
        assertTrue(!(again.stdout() + again.stderr()).contains("failed"), again.toString());
        awaitReplicated(testbed, name, 60);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, 16L * MIB);
        assertEquals((byte)0x5a, Files.readAllBytes(destination)[8 * MIB - 1]);
        GroupChecks.delete(testbed, name);
    }
}
