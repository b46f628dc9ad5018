package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Copies between two real daemons with the real command: random data, odd sizes, seeded copy, verify.
 */
@Timeout(300)
class CopyIT
{
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("copy");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    @AfterEach
    void noUnexpectedErrors()
    {
        assertEquals(0, testbed.counter("site-a", "errors"), () -> testbed.log("site-a"));
        assertEquals(0, testbed.counter("site-b", "errors"), () -> testbed.log("site-b"));
    }

    @Test
    void shouldCopyOddSizedVolumeAndVerifyIt() throws Exception
    {
        final long size = 1024L * MIB + 4096 + 512;
        final Path source = Volumes.random(testbed.dir.resolve("odd-src.img"), size, 1);
        final Path target = Volumes.zeros(testbed.dir.resolve("odd-dst.img"), size);

        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--verify");

        run.expect(0);
        assertTrue(run.stdout().contains("verify: both sides identical"), run.stdout());
        assertNull(Volumes.firstDifference(source, target, size));
        assertEquals(size, Files.size(target), "the copy must not grow the destination");
    }

    /**
     * A copy onto a sparse destination leaves holes where the source holds zeros, and writes the rest: written,
     * the zeros filled a sparse file, or a thin volume, to its whole size. So in a chunk that holds some data: only
     * its data is written, its zero blocks stay holes.
     */
    @Test
    void shouldLeaveHolesInASparseDestinationWhereTheSourceHoldsZeros() throws Exception
    {
        final long size = 64L * MIB;
        final Path source = Volumes.zeros(testbed.dir.resolve("sparse-src.img"), size);
        Volumes.patch(source, 5 * MIB, (int)MIB, (byte)0x42);
        Volumes.patch(source, 9 * MIB, 4096, (byte)0x43); // A chunk of 1 MiB holding 8 KiB of data.
        Volumes.patch(source, 9 * MIB + MIB / 2, 4096, (byte)0x44);
        final Path target = Volumes.zeros(testbed.dir.resolve("sparse-dst.img"), size);
        for (long at = 16 * MIB; at < 48 * MIB; at += MIB)
        {
            Volumes.patch(target, at, (int)MIB, (byte)0x24); // Old data, to be zeroed.
        }

        final long sentBefore = bytesSent("site-a");
        final Run copy = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--verify").expect(0);
        assertNull(Volumes.firstDifference(source, target, size));
        assertTrue(copy.stdout().contains(io.blockmover.cli.Format.bytes(size - 2 * MIB) +
            " of zeros sent as their length"), copy.stdout());
        final long allocated = Long.parseLong(Run.of(30, java.util.List.of("stat", "-c", "%b", target.toString()))
            .expect(0).stdout().trim()) * 512;
        assertTrue(allocated <= MIB + 64 * 1024,
            "the destination holds " + allocated + " bytes allocated for 1 MiB and 8 KiB of data");
        // The empty chunks went as such, without their zeros: 2 MiB crossed the link, not 64 MiB.
        assertEquals(2 * MIB, bytesSent("site-a") - sentBefore);

        // A destination with every block allocated, old data everywhere: the zeros are written.
        final Path thick = Volumes.random(testbed.dir.resolve("sparse-thick.img"), size, 5);
        final Map<String, Object> job = JSON.std.mapFrom(testbed.cli("site-a", "copy", source.toString(),
            "site-b:" + thick, "--verify", "--json").expect(0).stdout());
        assertNull(Volumes.firstDifference(source, thick, size));
        assertEquals(size - 2 * MIB, ((Number)job.get("zero_bytes")).longValue(), "the job's own count of them");
    }

    /** The daemon's "bytes sent" counter: chunk bytes its copy jobs sent. */
    private long bytesSent(final String site) throws Exception
    {
        final Run run = Run.of(60, java.util.List.of(Testbed.script("blockmover"), "stat", "--counters-file",
            testbed.counters(site).toString(), "--json")).expect(0);
        @SuppressWarnings("unchecked")
        final Map<String, Object> counters = (Map<String, Object>)JSON.std.mapFrom(run.stdout()).get("counters");
        return ((Number)counters.get("bytes sent")).longValue();
    }

    @Test
    void shouldReportTheJobAsJsonForScripts() throws Exception
    {
        final long size = 64L * MIB;
        final Path source = Volumes.random(testbed.dir.resolve("json-src.img"), size, 2);
        final Path target = Volumes.zeros(testbed.dir.resolve("json-dst.img"), size + 8 * MIB);

        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--json").expect(0);

        final Map<String, Object> job = JSON.std.mapFrom(run.stdout());
        assertEquals("completed", job.get("state"));
        assertEquals(size, ((Number)job.get("size")).longValue());
        assertEquals(0L, ((Number)job.get("bytes_remaining")).longValue());
        assertEquals("tcp", job.get("transport"));
        assertNull(Volumes.firstDifference(source, target, size));
        final Run jobs = testbed.cli("site-a", "jobs", "--json").expect(0);
        assertTrue(jobs.stdout().contains("\"id\" : " + job.get("id")), jobs.stdout());
    }

    @Test
    void shouldSendOnlyTheRegionsThatDifferWhenSeeded() throws Exception
    {
        final long size = 96L * MIB;
        final Path source = Volumes.random(testbed.dir.resolve("seed-src.img"), size, 3);
        final Path target = testbed.dir.resolve("seed-dst.img");
        Files.copy(source, target);
        Volumes.patch(source, 5L * MIB + 100, 10, (byte)1);
        Volumes.patch(source, 40L * MIB, 4096, (byte)2);
        Volumes.patch(source, size - 512, 512, (byte)3);
        final long sentBefore = testbed.counter("site-a", "chunks sent");
        final long receivedBefore = testbed.counter("site-b", "chunks received");

        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--seeded", "--json")
            .expect(0);

        final Map<String, Object> job = JSON.std.mapFrom(run.stdout());
        assertEquals(3L, ((Number)job.get("regions_different")).longValue(), run.stdout());
        assertEquals(3, testbed.counter("site-a", "chunks sent") - sentBefore);
        assertEquals(3, testbed.counter("site-b", "chunks received") - receivedBefore);
        assertNull(Volumes.firstDifference(source, target, size));
    }

    @Test
    void shouldFallBackToTcpAndSayWhyWhenThereIsNoRdma() throws Exception
    {
        final Run run = testbed.cli("site-a", "status", "--json").expect(0);

        final Map<String, Object> status = JSON.std.mapFrom(run.stdout());
        assertEquals("site-a", status.get("node"));
        final String text = run.stdout();
        assertTrue(text.contains("\"name\" : \"site-b\"") && text.contains("\"transport\" : \"tcp\""), text);
        // This host has no RDMA: transport = auto falls back to TCP and says why.
        assertTrue(text.contains("\"transport_requested\" : \"auto\"") &&
            text.contains("no RDMA device/kernel support on this host: "), text);
        final Run human = testbed.cli("site-a", "status").expect(0);
        assertTrue(human.stdout().contains("peer site-b at") && human.stdout().contains("transport tcp (TCP: no RDMA"),
            human.stdout());
    }

    @Test
    void shouldReadCountersWithoutTheDaemon() throws Exception
    {
        final Run run = Run.of(60, java.util.List.of(Testbed.script("blockmover"), "stat", "--counters-file",
            testbed.counters("site-b").toString(), "--json")).expect(0);

        final Map<String, Object> stat = JSON.std.mapFrom(run.stdout());
        assertEquals("site-b", stat.get("node"));
        assertEquals(Boolean.TRUE, stat.get("alive"));
        assertTrue(run.stdout().contains("chunks received"), run.stdout());
    }
}
