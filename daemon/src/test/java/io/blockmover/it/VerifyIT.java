package io.blockmover.it;

import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.GroupChecks.number;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Online verify between two real daemons, on one sync group of two volumes shared by the methods in order: no
 * false alarm while a writer keeps writing through the NBD exports; 4 KiB blocks damaged behind the destination
 * daemon's back found at exactly their place; --repair making both sides byte for byte equal; a scheduled
 * verify; and the refusals (on the destination, while suspended) that name the fix.
 */
@Timeout(180)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class VerifyIT
{
    private static final String NAME = "ver";
    private static final long SIZE = 32L * MIB;
    private static final int BLOCKS = 2048;
    private static final long SUB_BLOCK = 64 * 1024;
    private static Testbed testbed;
    private static Path[] sources;
    private static Path[] destinations;
    private static String[] exports;

    @BeforeAll
    static void up() throws IOException
    {
        testbed = Testbed.up("verify", "--set", "peer.timeout=2s", "--set", "heartbeat.interval=500ms");
        sources = new Path[2];
        destinations = new Path[2];
        for (int i = 0; i < 2; i++)
        {
            sources[i] = Volumes.random(testbed.dir.resolve("src" + i + ".img"), SIZE, 50 + i);
            destinations[i] = Volumes.zeros(testbed.dir.resolve("dst" + i + ".img"), SIZE);
        }
        final Map<String, Object> created = GroupChecks.create(testbed, NAME, "--mode", "sync",
            "--volume", sources[0] + "=" + destinations[0], "--volume", sources[1] + "=" + destinations[1]);
        exports = GroupChecks.exports(created);
        try
        {
            awaitReplicated(testbed, NAME, 60);
        }
        catch (final AssertionError ex)
        {
            throw new AssertionError(ex.getMessage() + "\nsite-a log:\n" + testbed.log("site-a") + "\nsite-b log:\n" +
                testbed.log("site-b"), ex);
        }
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    private static Map<String, Object> verify(final int expectedExit, final String... options) throws IOException
    {
        final String[] args = new String[options.length + 3];
        args[0] = "verify";
        args[1] = NAME;
        args[2] = "--json";
        System.arraycopy(options, 0, args, 3, options.length);
        return JSON.std.mapFrom(testbed.cli("site-a", args).expect(expectedExit).stdout());
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> mismatches(final Map<String, Object> job)
    {
        return (List<Map<String, Object>>)job.get("mismatches");
    }

    @Test
    @Order(1)
    void shouldRefuseVerifyOnTheDestinationAndWhileSuspended()
    {
        final Run onDestination = testbed.cli("site-b", "verify", NAME).expect(4);
        assertTrue(onDestination.stderr().contains("run 'blockmover verify " + NAME + "' on site-a"),
            onDestination.stderr());
        testbed.call("site-a", "group-suspend", Map.of("name", NAME));
        try
        {
            final Run suspended = testbed.cli("site-a", "verify", NAME).expect(4);
            assertTrue(suspended.stderr().contains("blockmover group resume " + NAME), suspended.stderr());
        }
        finally
        {
            testbed.call("site-a", "group-resume", Map.of("name", NAME));
        }
        awaitReplicated(testbed, NAME, 30);
    }

    @Test
    @Order(2)
    @SuppressWarnings("unchecked")
    void shouldFindNoDifferenceWhileAWriterKeepsWriting() throws Exception
    {
        final long comparedBefore = testbed.counter("site-a", "regions compared");
        final StampedWriter writer = new StampedWriter(testbed.nbdSocket("site-a"), exports, BLOCKS, 64);
        writer.start();
        Map<String, Object> job;
        long ackedWhileVerifying = -1;
        long ackedAtEnd;
        try
        {
            Testbed.await("the writer to get going", 30, () -> writer.acked() > 200);
            // In-process, so the writes counted are those made while the job ran, not during a JVM start.
            // Paced to about a second, so plenty of writes land in the regions while they are being compared.
            job = (Map<String, Object>)testbed.call("site-a", "group-verify", Map.of("name", NAME, "max_rate",
                64L * MIB));
            while ("verifying".equals(job.get("state")))
            {
                if (ackedWhileVerifying < 0)
                {
                    ackedWhileVerifying = writer.acked();
                }
                Thread.onSpinWait();
                job = (Map<String, Object>)testbed.call("site-a", "group-verify-status", Map.of("name", NAME));
            }
            ackedAtEnd = writer.acked();
        }
        finally
        {
            writer.stop();
        }
        assertTrue(ackedWhileVerifying > 0 && ackedAtEnd - ackedWhileVerifying > 50, "the writer wrote " +
            (ackedAtEnd - ackedWhileVerifying) + " blocks while the verify ran: too few to test it under load");
        assertEquals("identical", job.get("result"), job.toString());
        assertEquals(2 * SIZE / MIB, number(job, "regions_total"));
        assertEquals(number(job, "regions_total"), number(job, "regions_compared") + number(job, "regions_skipped"));
        assertEquals(0, number(job, "regions_different"), job.toString());
        assertTrue(mismatches(job).isEmpty(), job.toString());
        assertTrue(testbed.counter("site-a", "regions compared") >= comparedBefore + number(job, "regions_compared"));
        awaitReplicated(testbed, NAME, 30);
        GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        // The same through the command, paced: 64 MiB at 128 MiB/s cannot take less than about half a second.
        final Map<String, Object> paced = verify(0, "--max-rate", "128m");
        assertEquals("identical", paced.get("result"), paced.toString());
        final long ms = number(paced, "finished_ms") - number(paced, "started_ms");
        assertTrue(ms >= 400, "a verify paced at 128 MiB/s took " + ms + " ms");
    }

    private static long destinationSetting(final String key)
    {
        try
        {
            final Map<String, Object> group = JSON.std.mapFrom(java.nio.file.Files.readString(
                testbed.dir.resolve("site-b").resolve("state").resolve("groups").resolve(NAME).resolve("group.json")));
            return group.get(key) instanceof Number n ? n.longValue() : -1;
        }
        catch (final IOException ex)
        {
            return -1; // Being replaced at this moment: read again.
        }
    }

    @Test
    @Order(3)
    @SuppressWarnings("unchecked")
    void shouldRunAScheduledVerify() throws IOException
    {
        final Map<String, Object> before = (Map<String, Object>)testbed.group("site-a", NAME).get("verify");
        final Object lastJob = before.get("last") instanceof Map<?, ?> last ? last.get("job") : null;
        testbed.cli("site-a", "verify", NAME, "--schedule", "1s").expect(0);
        // The schedule belongs to the group: the linked destination keeps it at once (SETTINGS), for a failover.
        Testbed.await("the destination to keep the schedule", 30, () ->
            destinationSetting("verify_interval_ms") == 1000);
        try
        {
            Testbed.await("a scheduled verify", 30, () ->
            {
                final Map<String, Object> v = (Map<String, Object>)testbed.group("site-a", NAME).get("verify");
                return v.get("last") instanceof Map<?, ?> last && !last.get("job").equals(lastJob) &&
                    Boolean.TRUE.equals(last.get("scheduled"));
            });
        }
        finally
        {
            testbed.cli("site-a", "verify", NAME, "--schedule", "off").expect(0);
        }
        final Map<String, Object> verify = (Map<String, Object>)testbed.group("site-a", NAME).get("verify");
        assertEquals("off", verify.get("interval"));
        Testbed.await("the destination to drop the schedule", 30, () -> destinationSetting("verify_interval_ms") == 0);
        assertEquals("identical", ((Map<String, Object>)verify.get("last")).get("result"), verify.toString());
        Testbed.await("the scheduled verify to end", 30, () ->
            !((Map<String, Object>)testbed.group("site-a", NAME).get("verify")).containsKey("running"));
    }

    @Test
    @Order(4)
    void shouldReportExactlyTheBlocksDamagedBehindTheDestination() throws IOException
    {
        awaitReplicated(testbed, NAME, 30);
        final long mismatchesBefore = testbed.counter("site-a", "verify mismatches");
        // pwrite on the destination files while its daemon holds them: damage no replicated write made.
        final long[][] damaged = {{0, 5 * MIB + 8192}, {0, 20 * MIB + 130 * 1024}, {1, 31 * MIB + 60 * 1024}};
        for (final long[] d : damaged)
        {
            Volumes.patch(destinations[(int)d[0]], d[1], 4096, (byte)0x5A);
        }
        final Map<String, Object> job = verify(1);
        assertEquals("different", job.get("result"), job.toString());
        assertEquals(3, number(job, "regions_different"), job.toString());
        final List<Map<String, Object>> ranges = mismatches(job);
        assertEquals(3, ranges.size(), ranges.toString());
        for (int i = 0; i < damaged.length; i++)
        {
            final Map<String, Object> range = findRange(ranges, damaged[i][0], damaged[i][1]);
            assertEquals(damaged[i][1] / SUB_BLOCK * SUB_BLOCK, number(range, "offset"), range.toString());
            assertEquals(SUB_BLOCK, number(range, "length"), range.toString());
            assertEquals(destinations[(int)damaged[i][0]].toString(), range.get("target"));
        }
        assertEquals(mismatchesBefore + 3, testbed.counter("site-a", "verify mismatches"));
        final Run text = testbed.cli("site-a", "group", "status", NAME).expect(0);
        assertTrue(text.stdout().contains("last: different"), text.stdout());
    }

    private static Map<String, Object> findRange(final List<Map<String, Object>> ranges, final long volume,
        final long offset)
    {
        for (final Map<String, Object> r : ranges)
        {
            if (number(r, "volume") == volume && number(r, "offset") <= offset &&
                offset < number(r, "offset") + number(r, "length"))
            {
                return r;
            }
        }
        throw new AssertionError("no mismatch reported for volume " + volume + " at " + offset + ": " + ranges);
    }

    @Test
    @Order(5)
    void shouldRepairSoThatBothSidesAreEqual() throws Exception
    {
        final Map<String, Object> repaired = verify(0, "--repair");
        assertEquals("repaired", repaired.get("result"), repaired.toString());
        assertEquals(3, number(repaired, "regions_repaired"), repaired.toString());
        final Map<String, Object> again = verify(0);
        assertEquals("identical", again.get("result"), again.toString());
        assertEquals(0, number(again, "regions_different"), again.toString());
        awaitReplicated(testbed, NAME, 30);
        testbed.call("site-a", "group-suspend", Map.of("name", NAME));
        try
        {
            GroupChecks.assertSameVolumes(sources, destinations, SIZE);
        }
        finally
        {
            testbed.call("site-a", "group-resume", Map.of("name", NAME));
        }
    }
}
