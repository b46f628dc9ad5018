package io.blockmover.it;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A damaged link, an impostor and stalled handshakes: corruption is detected and resent, a wrong key is refused
 * before anything is written, and connections that never finish their handshake are closed.
 */
@Timeout(300)
class FaultIT
{
    @Test
    void shouldDetectAndResendCorruptedChunks() throws Exception
    {
        try (FaultProxy proxy = new FaultProxy(16L * MIB);
            Testbed testbed = Testbed.up("bitflip", "--loopback",
                "--set-a", "peer.site-b.address=127.0.0.1:" + proxy.port(), "--set", "reconnect.max.interval=1s"))
        {
            proxy.target(testbed.address("site-b"));
            final long size = 256L * MIB;
            final Path source = Volumes.random(testbed.dir.resolve("flip-src.img"), size, 21);
            final Path target = Volumes.zeros(testbed.dir.resolve("flip-dst.img"), size);

            testbed.cli("site-a", "copy", source.toString(), "site-b:" + target).expect(0);

            assertNull(Volumes.firstDifference(source, target, size));
            assertTrue(proxy.flips() >= 8, "the proxy flipped only " + proxy.flips() + " bits");
            final long detected = testbed.counter("site-b", "payload crc errors") +
                testbed.counter("site-b", "frame errors");
            assertTrue(detected >= 1, "no corruption detected");
            assertTrue(testbed.counter("site-a", "chunks resent") >= 1 ||
                testbed.counter("site-a", "connections lost") >= 1, "nothing was resent");
        }
    }

    /**
     * A link damaged both ways under continuous replication. A damaged record is caught by its CRC and asked for
     * again within the session; a damaged acknowledgement (an unreadable frame at the source) ends the session,
     * which resumes from the destination's log. Once writes stop both sides are equal and the destination holds
     * every acknowledged write of the sync group. The damage shows in both daemons' counters, in the destination's
     * group status (counted across sessions) and in its log.
     */
    @Test
    void shouldCatchRecordsDamagedOnTheLinkAndResendThem() throws Exception
    {
        try (FaultProxy proxy = new FaultProxy(2L * MIB, 32L * 1024);
            Testbed testbed = Testbed.up("groupflip", "--loopback",
                "--set-a", "peer.site-b.address=127.0.0.1:" + proxy.port(), "--set", "reconnect.max.interval=1s",
                "--set", "peer.timeout=2s", "--set", "heartbeat.interval=500ms"))
        {
            proxy.target(testbed.address("site-b"));
            final long size = 32L * MIB;
            final Path[] sources = {Volumes.zeros(testbed.dir.resolve("gflip-src0.img"), size),
                Volumes.zeros(testbed.dir.resolve("gflip-src1.img"), size)};
            final Path[] destinations = {Volumes.zeros(testbed.dir.resolve("gflip-dst0.img"), size),
                Volumes.zeros(testbed.dir.resolve("gflip-dst1.img"), size)};
            final Map<String, Object> created = GroupChecks.create(testbed, "gflip",
                "--volume", sources[0] + "=" + destinations[0], "--volume", sources[1] + "=" + destinations[1],
                "--mode", "sync", "--log-size", "64m");
            GroupChecks.awaitReplicated(testbed, "gflip", 60);
            final Map<String, Object> before = testbed.group("site-b", "gflip");
            final long frameErrorsBefore = testbed.counter("site-a", "frame errors");

            final StampedWriter writer = new StampedWriter(testbed.nbdSocket("site-a"), GroupChecks.exports(created),
                4096, 64);
            writer.start();
            Testbed.await("records and acknowledgements damaged on the way", 180, () ->
            {
                assertTrue(writer.isRunning(), () -> "the writer stopped: " + writer.ended());
                return GroupChecks.number(testbed.group("site-b", "gflip"), "checksum_failures") >=
                    GroupChecks.number(before, "checksum_failures") + 3 && proxy.reverseFlips() >= 2;
            });
            writer.stop();
            GroupChecks.awaitReplicated(testbed, "gflip", 120);

            GroupChecks.assertSameVolumes(sources, destinations, size);
            assertEquals(writer.acked(), StampedWriter.assertPrefix("destination after a damaged link", destinations,
                4096), "the sync destination holds every acknowledged write");
            final long detected = testbed.counter("site-b", "payload crc errors") +
                testbed.counter("site-b", "frame errors");
            assertTrue(detected >= 1, "no damage detected: " + testbed.log("site-b"));
            final Map<String, Object> destination = testbed.group("site-b", "gflip");
            final long damaged = GroupChecks.number(destination, "checksum_failures") -
                GroupChecks.number(before, "checksum_failures");
            final long unreadable = GroupChecks.number(destination, "frame_errors") -
                GroupChecks.number(before, "frame_errors");
            assertTrue(damaged + unreadable >= 1, destination.toString());
            assertTrue(testbed.log("site-b").contains("arrived damaged (CRC32C mismatch) or unreadable"),
                "the damage is logged, not only counted");
            // A damaged payload is asked for again (NACK) within the session; only an unreadable header, whose
            // framing cannot be trusted, ends one: here a record's at the destination or an acknowledgement's at
            // the source.
            final long sessions = GroupChecks.number(destination, "sessions") - GroupChecks.number(before, "sessions");
            final long unreadableAtSource = testbed.counter("site-a", "frame errors") - frameErrorsBefore;
            assertTrue(unreadableAtSource >= 1, "no damaged acknowledgement detected: " + testbed.log("site-a"));
            // But the proxy flips a bit every 1 to 3 MiB, so a 1 MiB record (of the initial sync, or a region resent
            // after a session ended) is damaged on about every other send: in 2 of 8 runs alone one was damaged on
            // all 9 of its sends, which ends a session by design (it failed CI on ac25a57). A 4 KiB record of the
            // writer is damaged again on a resend about once in 500 times.
            final long longRecordsDamagedEachSend = sessionsEndedByLongRecordsDamagedEachSend(testbed.log("site-b"));
            assertTrue(sessions <= unreadable + unreadableAtSource + longRecordsDamagedEachSend, () -> sessions +
                " new sessions, but only " + unreadable + " + " + unreadableAtSource + " unreadable frames and " +
                longRecordsDamagedEachSend + " long records damaged on every send: damaged records ended " +
                "sessions:\n" + linesWith(testbed.log("site-b"), "ended") + linesWith(testbed.log("site-a"),
                "degraded"));
            assertTrue(GroupChecks.number(testbed.group("site-a", "gflip"), "records_resent") >= 1,
                "the source resent nothing");
            GroupChecks.delete(testbed, "gflip");
        }
    }

    /**
     * A record damaged in the source's own log (its disk or memory), not on the link: sending it again cannot
     * help, and before the fix every session NACKed it eight times, ended and began again, for ever. The source
     * now checks its own copy when asked again, mends it from the volume and resyncs its region: the group
     * replicates again, the volumes end equal, and the damage is counted and logged as this host's.
     */
    @Test
    void shouldMendARecordDamagedInTheSourcesOwnLogAndReplicateOn() throws Exception
    {
        try (Testbed testbed = Testbed.up("groupmend", "--loopback", "--set", "reconnect.max.interval=1s"))
        {
            final long size = 8L * MIB;
            final Path source = Volumes.zeros(testbed.dir.resolve("gmend-src.img"), size);
            final Path destination = Volumes.zeros(testbed.dir.resolve("gmend-dst.img"), size);
            final Map<String, Object> created = GroupChecks.create(testbed, "gmend",
                "--volume", source + "=" + destination, "--mode", "sync", "--log-size", "16m");
            GroupChecks.awaitReplicated(testbed, "gmend", 60);
            // Suspended, the source keeps its writes in its log and sends nothing, so the test can damage one.
            testbed.call("site-a", "group-suspend", Map.of("name", "gmend"));
            final byte[] block = GroupChecks.markedBlock("blockmover FaultIT mend marker");
            try (NbdClient client = NbdClient.connect(testbed.nbdSocket("site-a"), GroupChecks.exports(created)[0]))
            {
                assertEquals(0, client.write(MIB, block));
                assertEquals(0, client.write(2 * MIB, new byte[4096]));
                assertEquals(0, client.flush());
            }
            GroupChecks.damageMarkedRecord(testbed, "site-a", "gmend", block);

            testbed.call("site-a", "group-resume", Map.of("name", "gmend"));
            final Map<String, Object> status = GroupChecks.awaitReplicated(testbed, "gmend", 60);

            GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, size);
            assertEquals(1, GroupChecks.number(status, "records_mended"), status.toString());
            Testbed.await("the damage logged as this host's", 10,
                () -> testbed.log("site-a").contains("found damaged (CRC32C mismatch)"));
            GroupChecks.delete(testbed, "gmend");
        }
    }

    /**
     * A verify's record damaged in the source's own log: its digests cannot be mended from the volume, and before
     * the fix it was sent damaged again and again, and the group never replicated again. The source now voids it
     * and compares the region again: the verify compares every region and finds the volumes identical, and the
     * group replicates on. The records wait behind a 1 KiB/s limit on the async group's shipping while the test
     * damages one in the log file.
     */
    @Test
    @SuppressWarnings("unchecked")
    void shouldVoidAVerifyRecordDamagedInTheSourcesOwnLogAndCompareItsRegionAgain() throws Exception
    {
        try (Testbed testbed = Testbed.up("groupvoid", "--loopback", "--set", "reconnect.max.interval=1s"))
        {
            final long size = 8L * MIB;
            final Path source = Volumes.random(testbed.dir.resolve("gvoid-src.img"), size, 31);
            final Path destination = Volumes.zeros(testbed.dir.resolve("gvoid-dst.img"), size);
            final Map<String, Object> created = GroupChecks.create(testbed, "gvoid",
                "--volume", source + "=" + destination, "--mode", "async", "--log-size", "16m");
            GroupChecks.awaitReplicated(testbed, "gvoid", 60);
            testbed.cli("site-a", "peer", "set", "site-b", "--max-rate", "1k").expect(0);
            try (NbdClient client = NbdClient.connect(testbed.nbdSocket("site-a"), GroupChecks.exports(created)[0]))
            {
                // Runs the peer's bucket about 1000 s into debt: every record after it waits in the log.
                assertEquals(0, client.write(0, new byte[MIB]));
            }
            final Map<String, Object> started =
                (Map<String, Object>)testbed.call("site-a", "group-verify", Map.of("name", "gvoid"));
            GroupChecks.damageVerifyRecord(testbed, "site-a", "gvoid", GroupChecks.number(started, "job"));
            testbed.cli("site-a", "peer", "set", "site-b", "--max-rate", "0").expect(0);

            final AtomicReference<Map<String, Object>> job = new AtomicReference<>(started);
            Testbed.await("the verify to end", 60, () ->
            {
                job.set((Map<String, Object>)testbed.call("site-a", "group-verify-status", Map.of("name", "gvoid")));
                return !"verifying".equals(job.get().get("state"));
            });
            assertEquals("identical", job.get().get("result"), job.get().toString());
            assertEquals(size / MIB, GroupChecks.number(job.get(), "regions_compared"), job.get().toString());
            final Map<String, Object> status = GroupChecks.awaitReplicated(testbed, "gvoid", 60);
            assertEquals(1, GroupChecks.number(status, "records_mended"), status.toString());
            GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, size);
            GroupChecks.delete(testbed, "gvoid");
        }
    }

    /**
     * A new group's handshake broken after the connection was made (here a reset; in a suite run on a loaded host it
     * was a broken pipe) is started again: the create succeeds. Broken every time, the create fails with the reason
     * and the number of attempts; an absent partner (connection refused) still fails the create at once, unasked
     * again.
     */
    @Test
    @SuppressWarnings("try") // proxy.close() inside its try: the partner's address must go away mid-test.
    void shouldCreateAGroupWhoseFirstHandshakeIsResetAndFailOnlyWhenItKeepsBreaking() throws Exception
    {
        try (FaultProxy proxy = new FaultProxy(0);
            Testbed testbed = Testbed.up("handshake", "--loopback",
                "--set-a", "peer.site-b.address=127.0.0.1:" + proxy.port()))
        {
            proxy.target(testbed.address("site-b"));
            final long size = 8L * MIB;
            final Path source = Volumes.random(testbed.dir.resolve("hs-src.img"), size, 23);
            final Path target = Volumes.zeros(testbed.dir.resolve("hs-dst.img"), size);
            final String volume = source + "=" + target;

            proxy.resetFirst(1);
            GroupChecks.create(testbed, "hs", "--volume", volume, "--log-size", "16m");
            assertEquals(1, proxy.resets());
            assertTrue(testbed.log("site-a").contains("during the handshake, asking again (1 of 2)"),
                testbed.log("site-a"));
            GroupChecks.awaitReplicated(testbed, "hs", 60);
            assertNull(Volumes.firstDifference(source, target, size));
            GroupChecks.delete(testbed, "hs");

            proxy.resetFirst(3);
            final Run broken = testbed.cli("site-a", "group", "create", "hs2", "--peer", "site-b", "--volume",
                volume, "--log-size", "16m");
            assertEquals(5, broken.exitCode(), broken.toString());
            assertTrue(broken.stderr().contains("(3 attempts)"), broken.stderr());
            assertEquals(4, proxy.resets());

            proxy.close(); // Nothing listens at site-b's address any more: the connection is refused.
            final Run absent = testbed.cli("site-a", "group", "create", "hs3", "--peer", "site-b", "--volume",
                volume, "--log-size", "16m");
            assertEquals(5, absent.exitCode(), absent.toString());
            assertTrue(absent.stderr().contains("is blockmoverd running on site-b"), absent.stderr());
            assertFalse(testbed.log("site-a").contains("group hs3: site-b"), "an absent partner was asked again: " +
                testbed.log("site-a"));
        }
    }

    /**
     * While the logs of a new group are written (seconds to minutes), the source asks its partner every 250 ms.
     * Three handshakes broken over that time, each followed by answered ones, are three separate blips, not a
     * partner that keeps breaking: the create goes on. Counted over the whole create, the third failed it.
     */
    @Test
    @SuppressWarnings("try")
    void shouldCountOnlyHandshakesBrokenInARowAgainstACreate() throws Exception
    {
        try (FaultProxy proxy = new FaultProxy(0);
            Testbed testbed = Testbed.up("blips", "--loopback", "--set-a", "peer.site-b.address=127.0.0.1:" +
                proxy.port()))
        {
            proxy.target(testbed.address("site-b"));
            final long size = 8L * MIB;
            final Path source = Volumes.random(testbed.dir.resolve("bl-src.img"), size, 29);
            final Path target = Volumes.zeros(testbed.dir.resolve("bl-dst.img"), size);
            final java.util.concurrent.CompletableFuture<Run> create = java.util.concurrent.CompletableFuture
                .supplyAsync(() -> testbed.cli("site-a", "group", "create", "bl", "--peer", "site-b", "--volume",
                source + "=" + target, "--log-size", "4g"));
            long partnerWritten = -1;
            for (int reset = 1; reset <= 3; reset++)
            {
                proxy.resetFirst(1);
                final int expected = reset;
                Testbed.await("reset " + reset, 60, () -> proxy.resets() == expected || create.isDone());
                // Then an answered handshake: site-b's log progress, as its PREPARING said it, moves on.
                final long before = partnerWritten;
                Testbed.await("an answered handshake after reset " + reset, 60, () -> create.isDone() ||
                    partnerLogWritten(testbed) > before);
                partnerWritten = partnerLogWritten(testbed);
            }
            final Run created = create.get(300, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(0, created.exitCode(), created + "\n" + testbed.logTail("site-a", 20));
            assertEquals(3, proxy.resets(), "the logs were written before three resets came");
            assertTrue(testbed.log("site-a").contains("during the handshake, asking again (1 of 2)"),
                testbed.logTail("site-a", 20));
            assertFalse(testbed.log("site-a").contains("asking again (2 of 2)"), "counted as in a row:\n" +
                testbed.logTail("site-a", 20));
            GroupChecks.awaitReplicated(testbed, "bl", 60);
            assertNull(Volumes.firstDifference(source, target, size));
            GroupChecks.delete(testbed, "bl");
        }
    }

    /**
     * @return how far site-b's log is, as site-a last heard it (the creating status), or -1 while not known.
     */
    private static long partnerLogWritten(final Testbed testbed)
    {
        try
        {
            final Map<?, ?> status = (Map<?, ?>)testbed.call("site-a", "group-status", Map.of("name", "bl"));
            final Object written = status.get("partner_log_written") != null ? status.get("partner_log_written") :
                "site-b".equals(status.get("log_host")) ? status.get("log_written") : null;
            return written instanceof Number n ? n.longValue() : -1;
        }
        catch (final io.blockmover.BlockmoverException ex)
        {
            return -1;
        }
    }

    /**
     * Connections to the peer port that never finish their handshake (nothing sent, or half a frame header) cost
     * their host nothing lasting: each is closed once connect.timeout has passed, and a real partner's group is
     * created and replicated while they hang.
     */
    @Test
    void shouldCloseStalledHandshakesAndServeARealPeerMeanwhile() throws Exception
    {
        try (Testbed testbed = Testbed.up("stalled", "--loopback", "--set", "connect.timeout=2s"))
        {
            final String[] hostPort = testbed.address("site-b").split(":");
            final InetSocketAddress peerPort = new InetSocketAddress(hostPort[0], Integer.parseInt(hostPort[1]));
            final List<Socket> stalled = new ArrayList<>();
            final long openedNs = System.nanoTime();
            try
            {
                for (int i = 0; i < 8; i++)
                {
                    final Socket socket = new Socket();
                    stalled.add(socket);
                    socket.connect(peerPort, 5000);
                    socket.setSoTimeout(15_000);
                    if (i % 2 == 1)
                    {
                        socket.getOutputStream().write(new byte[] {0x42, 0x4d, 0x01}); // A header's first bytes.
                        socket.getOutputStream().flush();
                    }
                }
                final long size = 8L * MIB;
                final Path source = Volumes.random(testbed.dir.resolve("st-src.img"), size, 29);
                final Path target = Volumes.zeros(testbed.dir.resolve("st-dst.img"), size);
                GroupChecks.create(testbed, "st", "--volume", source + "=" + target, "--log-size", "16m");
                GroupChecks.awaitReplicated(testbed, "st", 60);
                assertNull(Volumes.firstDifference(source, target, size));

                for (final Socket socket : stalled)
                {
                    assertClosedByPeer(socket);
                }
                final long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - openedNs);
                assertTrue(seconds < 15, "the stalled handshakes were closed only after " + seconds + " s");
            }
            finally
            {
                for (final Socket socket : stalled)
                {
                    socket.close();
                }
            }
            assertEquals(0, testbed.counter("site-b", "errors"), () -> testbed.log("site-b"));
        }
    }

    private static void assertClosedByPeer(final Socket socket)
    {
        try
        {
            final InputStream in = socket.getInputStream();
            final byte[] buffer = new byte[4096];
            int n;
            while ((n = in.read(buffer)) >= 0)
            {
                assertTrue(n > 0); // The daemon's HELLO or an ERROR before it closes is fine; only its close counts.
            }
        }
        catch (final SocketTimeoutException ex)
        {
            throw new AssertionError("a stalled handshake was still open 15 s later", ex);
        }
        catch (final IOException ex)
        {
            // A reset is a close too.
        }
    }

    @Test
    void shouldRefuseAPeerWithTheWrongKeyAndWriteNothing() throws Exception
    {
        final Path otherKey = Files.createTempFile("bm-wrong", ".key",
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.write(otherKey, "a different key, 32 bytes long!!".getBytes());
        try (Testbed testbed = Testbed.up("wrongkey", "--set-b", "peer.site-a.key.file=" + otherKey))
        {
            final long size = 16L * MIB;
            final Path source = Volumes.random(testbed.dir.resolve("key-src.img"), size, 22);
            final Path target = Volumes.zeros(testbed.dir.resolve("key-dst.img"), size);

            final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target);

            run.expect(5);
            assertTrue(run.stderr().contains("key"), run.stderr());
            assertNull(Volumes.firstDifference(Volumes.zeros(testbed.dir.resolve("zero.img"), size), target, size));
            assertTrue(testbed.counter("site-b", "auth failures") + testbed.counter("site-a", "auth failures") >= 1);
            assertEquals(0, testbed.counter("site-b", "chunks received"));
            assertTrue(testbed.cli("site-a", "jobs", "--json").expect(0).stdout().trim().equals("[ ]"));
        }
        finally
        {
            Files.deleteIfExists(otherKey);
        }
    }

    /**
     * @return sessions the destination ended because one record of at least 64 KiB (longer than any the writer
     *     makes) arrived damaged on each of its sends: the session's last NACK is spent, not skipped.
     */
    private static long sessionsEndedByLongRecordsDamagedEachSend(final String log)
    {
        final Pattern ended = Pattern.compile("session from \\S+ ended: record LSN \\d+ \\((\\d+) bytes\\) " +
            "arrived damaged \\(CRC32C mismatch\\) \\d+ times in a row");
        return log.lines().map(ended::matcher).filter(Matcher::find)
            .filter(matcher -> Long.parseLong(matcher.group(1)) >= 64 * 1024).count();
    }

    private static String linesWith(final String log, final String word)
    {
        return log.lines().filter(line -> line.contains(word)).map(line -> line + "\n").collect(Collectors.joining());
    }
}
