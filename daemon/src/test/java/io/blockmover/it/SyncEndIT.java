package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The end of an initial sync, a resync and a switch's drain, and a test failover's view, on a partner that forces
 * its log rarely (site-b's {@code flush.interval} is 10 min: a force is what lets its applier apply, and what tells
 * the source its records are durable). A sync, seeded or not, must end as soon as everything is sent, the partner's
 * volumes consistent (a failover needs them to be), and it must end under writes that never pause as well; a switch
 * must not give up; a test view must hold every write the partner holds. Before, each waited for the partner's next
 * timed force: the end of a sync asked for none, a seeded sync's compare waited a force for each window of regions,
 * a source under writes waited for a moment when the partner had made every write durable, a partner learnt that
 * its volumes were consistent only from a heartbeat, which a source sends only after a second with nothing else to
 * send, a switch's drain asked for no force either, and a test view was frozen at what was applied.
 */
@Timeout(240)
class SyncEndIT
{
    private static final long SIZE = 16L * MIB;
    /** Far below the partner's force interval: a force the test sees was asked for. */
    private static final long WAIT_SECONDS = 60;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("syncend", "--set-b", "flush.interval=10m");
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
    void shouldEndANewGroupsInitialSyncWithoutWaitingForTheNextTimedForce() throws Exception
    {
        final String name = "fresh";
        final Path source = Volumes.random(testbed.dir.resolve(name + "-src.img"), SIZE, 11);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), SIZE);
        createAndAwaitTheEnd(name, source, destination, "--mode", "async");
    }

    @Test
    void shouldEndASeededInitialSyncWithoutWaitingForTheNextTimedForce() throws Exception
    {
        final String name = "seeded";
        final Path source = Volumes.random(testbed.dir.resolve(name + "-src.img"), SIZE, 12);
        final Path destination = Volumes.random(testbed.dir.resolve(name + "-dst.img"), SIZE, 12);
        // Two regions differ: the seed's compare resends them.
        Volumes.patch(destination, 4 * MIB, 4096, (byte)0x5a);
        Volumes.patch(destination, 13 * MIB + 8192, 512, (byte)0xa5);
        createAndAwaitTheEnd(name, source, destination, "--mode", "sync", "--seeded");
    }

    /**
     * Creates the group and waits for its initial sync's end: the source replicating, the partner consistent and
     * holding durably and applied everything, both volumes equal.
     */
    private static void createAndAwaitTheEnd(final String name, final Path source, final Path destination,
        final String... options) throws Exception
    {
        final List<String> create = new ArrayList<>(List.of(options));
        create.addAll(List.of("--log-size", "256m", "--volume", source + "=" + destination));
        GroupChecks.create(testbed, name, create.toArray(new String[0]));
        awaitConsistent(name);
        GroupChecks.awaitReplicated(testbed, name, WAIT_SECONDS);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, SIZE);
    }

    @Test
    void shouldEndAnInitialSyncUnderWritesThatNeverPause() throws Exception
    {
        final String name = "busy";
        final Path source = Volumes.random(testbed.dir.resolve(name + "-src.img"), SIZE, 13);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), SIZE);
        // The initial sync takes about 8 s (the limit holds back resync, not a sync group's client writes), so that
        // the writes begin before it ends, even where fio is slow to start; they go on, 5 ms apart, until the test
        // has seen the end.
        testbed.cli("site-a", "peer", "set", "site-b", "--max-rate", "2m").expect(0);
        Process load = null;
        try
        {
            final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "sync", "--log-size",
                "256m", "--volume", source + "=" + destination);
            load = new ProcessBuilder("fio", "--name=steady", "--ioengine=nbd", "--uri=" + GroupChecks.uri(created, 0),
                "--rw=randwrite", "--bs=4k", "--rate_iops=200", "--size=16m", "--time_based", "--runtime=300",
                "--randseed=53").redirectErrorStream(true)
                .redirectOutput(testbed.dir.resolve(name + "-fio.log").toFile()).start();
            final Process writes = load;
            Testbed.await("the writes to begin before the initial sync ends", 30, () ->
                GroupChecks.number(testbed.group("site-a", name), "writes") > 0);
            assertTrue("initial-sync".equals(GroupChecks.state(testbed.group("site-a", name))),
                "the initial sync ended before the writes began; the test tests nothing");
            awaitConsistent(name);
            assertTrue(writes.isAlive(), "the writes stopped before the sync's end was seen");
        }
        finally
        {
            testbed.cli("site-a", "peer", "set", "site-b", "--reset").expect(0);
            if (load != null)
            {
                Run.stop(load);
            }
        }
    }

    /**
     * A resync that outgrew a quarter of the log was partly applied (the partner forces every quarter whatever its
     * interval): its volumes are then inconsistent until it has applied the rest, which must not wait for the next
     * timed force.
     */
    @Test
    void shouldMakeThePartnerConsistentAgainAsSoonAsAResyncEnds() throws Exception
    {
        final String name = "resync";
        final long size = 32 * MIB;
        final Path source = Volumes.zeros(testbed.dir.resolve(name + "-src.img"), size);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), size);
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", "async", "--log-size", "16m",
            "--volume", source + "=" + destination);
        GroupChecks.awaitReplicated(testbed, name, WAIT_SECONDS);
        testbed.cli("site-a", "group", "suspend", name).expect(0);
        // More than the 16 MiB log holds: the rest is tracked by the bitmap and resent as regions.
        Run.of(120, List.of("fio", "--name=overflow", "--ioengine=nbd", "--uri=" +
            GroupChecks.uri(created, 0), "--rw=write", "--bs=1m", "--size=24m")).expect(0);
        final Map<String, Object> suspended = testbed.group("site-a", name);
        assertTrue(GroupChecks.number(suspended, "dirty_regions") > 0, "the log did not overflow: " + suspended);
        testbed.cli("site-a", "group", "resume", name).expect(0);
        GroupChecks.awaitReplicated(testbed, name, WAIT_SECONDS);
        final Map<String, Object> after = testbed.group("site-b", name);
        assertTrue(Boolean.TRUE.equals(after.get("consistent")), after.toString());
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, size);
    }

    /**
     * A planned switch drains the source until the partner holds every write durably: it must ask for that force,
     * or it waits for the partner's next timed one, and gives up after 30 s without progress.
     */
    @Test
    void shouldSwitchRolesWithoutWaitingForThePartnersTimedForce() throws Exception
    {
        final String name = "switch";
        final Replicated group = createReplicated(name, "async");
        Run.of(120, List.of("qemu-io", "-f", "raw", group.uri(), "-c", "write -P 0x3c 1M 4M")).expect(0);
        final Run switched = testbed.cli("site-a", "group", "switch", name).expect(0);
        assertTrue(switched.stdout().contains("is now destination here"), switched.toString());
        GroupChecks.assertSameVolumes(new Path[] {group.source()}, new Path[] {group.destination()}, SIZE);
    }

    /**
     * A test failover's views hold every write the destination held when asked: what a failover would give. They
     * held only what its applier had applied, and it applies only what a force made durable in the log: here,
     * writes acknowledged minutes before were missing from the view.
     */
    @Test
    void shouldMountATestFailoverWithEveryWriteTheDestinationHolds() throws Exception
    {
        final String name = "view";
        final Replicated group = createReplicated(name, "sync");
        // fio's nbd engine sends no FLUSH unless told: sync writes, acknowledged once in site-b's log, not forced.
        Run.of(120, List.of("fio", "--name=unflushed", "--ioengine=nbd", "--uri=" + group.uri(),
            "--rw=write", "--bs=64k", "--offset=2m", "--size=3m", "--buffer_pattern=0x7e")).expect(0);
        final Map<String, Object> before = testbed.group("site-b", name);
        assertTrue(GroupChecks.lsn(before, "applied") < GroupChecks.lsn(before, "held"),
            "site-b applied the writes before the mount; the test tests nothing: " + before);

        final Run mount = testbed.cli("site-b", "group", "test-failover", "mount", name, "--json").expect(0);
        final Map<String, Object> mounted = JSON.std.mapFrom(mount.stdout());
        @SuppressWarnings("unchecked")
        final Map<String, Object> view = (Map<String, Object>)mounted.get("test_mount");
        assertEquals(GroupChecks.lsn(before, "held"), GroupChecks.number(view, "lsn"), mount.stdout());
        @SuppressWarnings("unchecked")
        final String viewUri = String.valueOf(((List<Map<String, Object>>)view.get("volumes")).get(0).get("nbd_uri"));
        final Path image = Files.copy(group.source(), testbed.dir.resolve(name + "-copy.img"),
            StandardCopyOption.REPLACE_EXISTING);
        Run.of(120, List.of("qemu-img", "compare", "-f", "raw", "-F", "raw", image.toString(), viewUri)).expect(0);
        testbed.cli("site-b", "group", "test-failover", "dismount", name).expect(0);
    }

    /**
     * A write counts for the RPO until it is durable on the partner: a partner forcing every 10 min put the RPO of an
     * idle group at minutes, past its 4 s target, with every write long in the partner's log. Once the RPO is half
     * the target, the source asks for the force.
     */
    @Test
    void shouldKeepTheRpoWithinItsTargetWhenThePartnerForcesRarely() throws Exception
    {
        final String name = "rpo";
        final Replicated group = createReplicated(name, "async");
        testbed.cli("site-a", "group", "set", name, "--rpo-target", "4s").expect(0);
        Run.of(120, List.of("fio", "--name=unflushed", "--ioengine=nbd", "--uri=" + group.uri(), "--rw=write",
            "--bs=64k", "--size=1m")).expect(0);
        final Map<String, Object> written = testbed.group("site-a", name);
        assertTrue(GroupChecks.lsn(written, "durable") < GroupChecks.lsn(written, "last"),
            "site-b made the writes durable at once; the test tests nothing: " + written);
        Testbed.await("the RPO of " + name + " to be 0 again", WAIT_SECONDS, () ->
            ((Number)testbed.group("site-a", name).get("rpo_seconds")).doubleValue() == 0);
        assertFalse(testbed.log("site-a").contains("exceeds its target"), () -> testbed.log("site-a"));
    }

    /** A group of one volume, its source and destination zeroed, created and replicated. */
    private record Replicated(Path source, Path destination, Map<String, Object> created)
    {
        String uri()
        {
            return GroupChecks.uri(created, 0);
        }
    }

    private static Replicated createReplicated(final String name, final String mode) throws Exception
    {
        final Path source = Volumes.zeros(testbed.dir.resolve(name + "-src.img"), SIZE);
        final Path destination = Volumes.zeros(testbed.dir.resolve(name + "-dst.img"), SIZE);
        final Map<String, Object> created = GroupChecks.create(testbed, name, "--mode", mode, "--log-size", "256m",
            "--volume", source + "=" + destination);
        GroupChecks.awaitReplicated(testbed, name, WAIT_SECONDS);
        return new Replicated(source, destination, created);
    }

    private static void awaitConsistent(final String name)
    {
        final Object[] last = new Object[2];
        try
        {
            Testbed.await("group " + name + " replicating, site-b consistent", WAIT_SECONDS, () ->
            {
                last[0] = testbed.group("site-a", name);
                last[1] = testbed.group("site-b", name);
                return "replicating".equals(GroupChecks.state((Map<String, Object>)last[0])) &&
                    Boolean.TRUE.equals(((Map<?, ?>)last[1]).get("consistent"));
            });
        }
        catch (final AssertionError ex)
        {
            throw new AssertionError(ex.getMessage() + "\nsource: " + last[0] + "\ndestination: " + last[1], ex);
        }
    }
}
