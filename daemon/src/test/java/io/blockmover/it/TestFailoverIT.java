package io.blockmover.it;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.GroupChecks.number;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Test failover between two real daemons: the destination serves a writable copy-on-write view of its volumes at
 * the moment of the mount, read and written by real NBD clients (qemu-io, qemu-img), while the source goes on
 * writing and replication updates the destination volumes underneath; the view's writes never reach them.
 */
@Timeout(300)
class TestFailoverIT
{
    private static final long SIZE = 16L * MIB;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("failover", "--set", "heartbeat.interval=200ms", "--set", "peer.timeout=2s",
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

    private static void assumeTools(final String... tools)
    {
        for (final String tool : tools)
        {
            boolean found = false;
            for (final String dir : System.getenv().getOrDefault("PATH", "/usr/bin").split(File.pathSeparator))
            {
                found |= Files.isExecutable(Path.of(dir, tool));
            }
            assumeTrue(found, tool + " is not installed");
        }
    }

    /** 'blockmover group test-failover VERB NAME --json' against a site. */
    private static Run testFailover(final String site, final String verb, final String name)
    {
        return Run.of(60, List.of(Testbed.script("blockmover"), "group", "test-failover", verb, name, "--socket",
            testbed.socket(site), "--json"));
    }

    /** The same operations in-process over the real control socket (no JVM per call), for the steps around. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> call(final String site, final String op, final String name)
    {
        return (Map<String, Object>)testbed.call(site, op, Map.of("name", name));
    }

    private static String refusal(final String site, final String op, final String name)
    {
        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> call(site, op, name));
        assertEquals(ErrorCode.INVALID_STATE, ex.code(), ex.getMessage());
        return ex.getMessage();
    }

    private static void qemuIo(final String uri, final String... commands)
    {
        final List<String> command = new ArrayList<>(List.of("qemu-io", "-f", "raw", uri));
        for (final String c : commands)
        {
            command.add("-c");
            command.add(c);
        }
        final Run run = Run.of(120, command).expect(0);
        assertTrue(!run.stdout().contains("failed") && !run.stderr().contains("failed"), run.toString());
    }

    /** qemu-img compare: exit 0 when the image and the NBD export hold the same bytes (the image must not be a
     * volume the daemon holds: qemu-img cannot lock it). */
    private static Run compare(final Path image, final String uri)
    {
        return Run.of(120, List.of("qemu-img", "compare", "-f", "raw", "-F", "raw", image.toString(),
            uri));
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> viewVolumes(final Map<String, Object> status)
    {
        return (List<Map<String, Object>>)((Map<String, Object>)status.get("test_mount")).get("volumes");
    }

    private static List<Path> testMountFiles() throws IOException
    {
        try (Stream<Path> files = Files.walk(testbed.dir.resolve("site-b").resolve("state")))
        {
            return files.filter(p -> p.toString().contains("test-mount")).toList();
        }
    }

    private static void awaitConsistent(final String name)
    {
        Testbed.await("the destination of " + name + " to be consistent, durably", 30, () ->
        {
            final Map<String, Object> status = testbed.group("site-b", name);
            return Boolean.TRUE.equals(status.get("consistent")) && number(status, "consistent_through_lsn") >= 0;
        });
    }

    private static Path[] createGroup(final String name, final Path[] sources) throws IOException
    {
        final Path[] destinations = new Path[sources.length];
        final List<String> options = new ArrayList<>();
        for (int i = 0; i < sources.length; i++)
        {
            destinations[i] = Volumes.zeros(testbed.dir.resolve(name + "-dst" + i + ".img"), SIZE);
            options.add("--volume");
            options.add(sources[i] + "=" + destinations[i]);
        }
        options.addAll(List.of("--mode", "sync", "--log-size", "32m"));
        GroupChecks.create(testbed, name, options.toArray(new String[0]));
        awaitReplicated(testbed, name, 60);
        return destinations;
    }

    @Test
    void shouldServeAFrozenWritableViewWhileReplicationGoesOn() throws Exception
    {
        assumeTools("qemu-io", "qemu-img");
        final String name = "tf";
        final Path[] sources = {
            Volumes.random(testbed.dir.resolve(name + "-src0.img"), SIZE, 51),
            Volumes.random(testbed.dir.resolve(name + "-src1.img"), SIZE, 52)};
        final Path[] destinations = createGroup(name, sources);
        final String sourceUri0 = GroupChecks.uri(testbed.group("site-a", name), 0);
        final String sourceUri1 = GroupChecks.uri(testbed.group("site-a", name), 1);
        final long errorsB = testbed.counter("site-b", "errors");

        // Pattern A through the source's exports; keep a copy of the source at that point.
        qemuIo(sourceUri0, "write -P 0xa1 0 3M");
        qemuIo(sourceUri1, "write -P 0xa2 1M 2M");
        awaitReplicated(testbed, name, 60);
        final Path[] imageA = new Path[2];
        for (int i = 0; i < 2; i++)
        {
            imageA[i] = Files.copy(sources[i], testbed.dir.resolve(name + "-A" + i + ".img"),
                StandardCopyOption.REPLACE_EXISTING);
        }
        awaitConsistent(name);

        final Run mount = testFailover("site-b", "mount", name).expect(0);
        final Map<String, Object> mounted = JSON.std.mapFrom(mount.stdout());
        final List<Map<String, Object>> views = viewVolumes(mounted);
        assertEquals(2, views.size(), mount.stdout());
        final String viewUri0 = String.valueOf(views.get(0).get("nbd_uri"));
        final String viewUri1 = String.valueOf(views.get(1).get("nbd_uri"));
        assertEquals("nbd+unix:///" + name + "-test/" + sources[0].getFileName() + "?socket=" +
            testbed.nbdSocket("site-b"), viewUri0);
        compare(imageA[0], viewUri0).expect(0);
        compare(imageA[1], viewUri1).expect(0);

        final String twice = refusal("site-b", "group-test-mount", name);
        assertTrue(twice.contains("test-mounted already") && twice.contains("dismount"), twice);

        // Pattern B at the source: replication goes on, the destination volumes change, the views do not.
        qemuIo(sourceUri0, "write -P 0xb1 0 8M");
        qemuIo(sourceUri1, "write -P 0xb2 512k 4M");
        awaitReplicated(testbed, name, 60);
        assertEquals((byte)0xb1, Files.readAllBytes(destinations[0])[MIB], "B reached the destination volume");
        compare(imageA[0], viewUri0).expect(0);
        compare(imageA[1], viewUri1).expect(0);

        // Pattern C through the view: a whole grain and a 4 KiB piece of another; the view reads C there.
        qemuIo(viewUri0, "write -P 0xc1 4M 64k", "write -P 0xc2 1028k 4k", "read -P 0xc1 4M 64k",
            "read -P 0xc2 1028k 4k", "read -P 0xa1 1024k 4k", "read -P 0xa1 1032k 4k");
        final Path imageC = Files.copy(imageA[0], testbed.dir.resolve(name + "-C0.img"),
            StandardCopyOption.REPLACE_EXISTING);
        Volumes.patch(imageC, 4L * MIB, 64 * 1024, (byte)0xc1);
        Volumes.patch(imageC, 1028L * 1024, 4096, (byte)0xc2);
        compare(imageC, viewUri0).expect(0);

        final Map<String, Object> status = testbed.group("site-b", name);
        final Map<String, Object> view0 = viewVolumes(status).get(0);
        assertTrue(number(view0, "preserved_bytes") >= 8L * MIB, status.toString());
        assertEquals(2L * 64 * 1024, number(view0, "written_bytes"), status.toString());
        final Run text = testbed.cli("site-b", "group", "status", name).expect(0);
        assertTrue(text.stdout().contains("test mount at LSN") && text.stdout().contains(viewUri0), text.stdout());
        final Run events = testbed.cli("site-b", "events", "--now").expect(0);
        assertTrue(events.stdout().contains("exists group name=" + name + " role=destination") &&
            events.stdout().contains(" test_mount=mounted"), events.stdout());

        // The destination never sees C: it equals the source, which holds B.
        qemuIo(sourceUri1, "write -P 0xb3 12M 1M");
        awaitReplicated(testbed, name, 60);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);

        final Run dismount = testFailover("site-b", "dismount", name).expect(0);
        assertNull(JSON.std.mapFrom(dismount.stdout()).get("test_mount"), dismount.stdout());
        assertNotEquals(0, compare(imageC, viewUri0).exitCode(), "the view's export is gone");
        assertEquals(List.of(), testMountFiles(), "the view's files are gone");
        assertTrue(refusal("site-b", "group-test-dismount", name).contains("has no test mount"));
        final Run after = testbed.cli("site-b", "events", "--now").expect(0);
        assertFalse(after.stdout().contains("test_mount"), after.stdout());

        // A second mount sees the destination as it is now (B), not the first view's writes.
        final Map<String, Object> again = call("site-b", "group-test-mount", name);
        final Path imageB = Files.copy(sources[0], testbed.dir.resolve(name + "-B0.img"),
            StandardCopyOption.REPLACE_EXISTING);
        compare(imageB, String.valueOf(viewVolumes(again).get(0).get("nbd_uri"))).expect(0);
        call("site-b", "group-test-dismount", name);

        final Run onSource = Run.of(60, List.of(Testbed.script("blockmover"), "group", "test-failover", "mount",
            name, "--socket", testbed.socket("site-a")));
        assertEquals(4, onSource.exitCode(), onSource.toString());
        assertTrue(onSource.stderr().contains("is the source here") &&
            onSource.stderr().contains("on its destination, site-b"), onSource.stderr());
        assertEquals(errorsB, testbed.counter("site-b", "errors"), () -> testbed.log("site-b"));
        GroupChecks.delete(testbed, name);
    }

    @Test
    void shouldDropTheMountAtACrashAndRememberConsistencyWithoutTheSource() throws Exception
    {
        assumeTools("qemu-img");
        final String name = "tfr";
        final Path[] sources = {Volumes.random(testbed.dir.resolve(name + "-src0.img"), SIZE, 61)};
        final Path[] destinations = createGroup(name, sources);
        awaitConsistent(name);
        call("site-b", "group-test-mount", name);
        assertFalse(testMountFiles().isEmpty());

        // A crash leaves the views' files behind. With the source suspended, nothing confirms the destination's
        // consistency after the restart: it comes from the destination's own durable record.
        testbed.call("site-a", "group-suspend", Map.of("name", name));
        testbed.kill("site-b");
        assertFalse(testMountFiles().isEmpty());
        testbed.start("site-b");
        final Map<String, Object> restarted = testbed.group("site-b", name);
        assertNull(restarted.get("test_mount"), restarted.toString());
        assertEquals(List.of(), testMountFiles(), "a restart removes the views' files");
        assertTrue(testbed.log("site-b").contains("a test mount does not survive a restart"));

        assertTrue(number(restarted, "consistent_through_lsn") > 0, restarted.toString());
        // Consistent again once the replay of the log (from its last persisted head) has passed the clean point.
        Testbed.await("the restarted destination of " + name + " to replay its log", 30,
            () -> Boolean.TRUE.equals(testbed.group("site-b", name).get("consistent")));
        call("site-b", "group-test-mount", name);
        call("site-b", "group-test-dismount", name);

        testbed.call("site-a", "group-resume", Map.of("name", name));
        awaitReplicated(testbed, name, 60);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        awaitConsistent(name);
        final Map<String, Object> mounted = call("site-b", "group-test-mount", name);
        final Path image = Files.copy(sources[0], testbed.dir.resolve(name + "-copy0.img"),
            StandardCopyOption.REPLACE_EXISTING);
        compare(image, String.valueOf(viewVolumes(mounted).get(0).get("nbd_uri"))).expect(0);
        // Deleting the group dismounts its test mount too.
        GroupChecks.delete(testbed, name);
        assertEquals(List.of(), testMountFiles());
    }

    @Test
    void shouldRefuseAFailoverToAnUnfinishedInitialSyncEvenAfterARestart() throws Exception
    {
        final String name = "tfi";
        final Path source = Volumes.random(testbed.dir.resolve(name + "-src0.img"), SIZE, 71);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst0.img"), SIZE);
        // 2 MiB/s: the initial sync of 16 MiB takes 8 s, and the source dies in it.
        testbed.call("site-a", "peer-set", Map.of("name", "site-b", "max_rate", 2L * MIB));
        try
        {
            GroupChecks.create(testbed, name, "--volume", source + "=" + destination, "--mode", "sync",
                "--log-size", "32m");
            Testbed.await("the initial sync of " + name + " to reach site-b", 30,
                () -> number(testbed.group("site-b", name), "records_applied") > 0);
            testbed.kill("site-a");
            // The destination restarts too: nothing in memory remembers that the sync was unfinished.
            testbed.kill("site-b");
            testbed.start("site-b");
            final Map<String, Object> status = testbed.group("site-b", name);
            assertEquals(Boolean.FALSE, status.get("consistent"), status.toString());
            assertEquals(-1, number(status, "consistent_through_lsn"), status.toString());

            final Run refused = testbed.cli("site-b", "group", "switch", name, "--force").expect(4);
            assertTrue(refused.stderr().contains("inconsistent") && refused.stderr().contains("--allow-inconsistent"),
                refused.toString());
            assertEquals("destination", testbed.group("site-b", name).get("role"));
            assertTrue(refusal("site-b", "group-test-mount", name).contains("not consistent"));

            final Map<String, Object> taken = JSON.std.mapFrom(testbed.cli("site-b", "group", "switch", name,
                "--force", "--allow-inconsistent", "--json").expect(0).stdout());
            assertEquals("source", taken.get("role"), taken.toString());
            assertTrue(testbed.log("site-b").contains("failover to INCONSISTENT volumes"));
        }
        finally
        {
            testbed.start("site-a");
            testbed.call("site-a", "peer-set", Map.of("name", "site-b", "reset", true));
            GroupChecks.delete(testbed, name);
        }
    }
}
