package io.blockmover.it;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Bad input gets a clear, specific error, the documented exit status, and changes nothing.
 */
@Timeout(180)
class BadInputIT
{
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("badinput");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    private static Run copy(final Path source, final String target)
    {
        return testbed.cli("site-a", "copy", source.toString(), target);
    }

    @Test
    void shouldRefuseATooSmallDestinationBeforeWritingAByte() throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("big.img"), 8L * MIB, 31);
        final Path target = Volumes.random(testbed.dir.resolve("small.img"), 4L * MIB, 32);
        final Path pristine = testbed.dir.resolve("small-copy.img");
        Files.copy(target, pristine);

        final Run run = copy(source, "site-b:" + target);

        run.expect(4);
        assertTrue(run.stderr().contains("small.img on site-b is 4.0 MiB (4194304 bytes), the source is 8.0 MiB " +
            "(8388608 bytes): grow the file with 'truncate -s 8388608 " + target + "', or choose a larger one"),
            run.stderr());
        assertNull(Volumes.firstDifference(pristine, target, 4L * MIB));
        assertEquals(0, testbed.counter("site-b", "chunks received"));
    }

    @Test
    void shouldNameAMissingSourceOrDestination() throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("present.img"), MIB, 33);

        final Run missingSource = copy(testbed.dir.resolve("absent.img"), "site-b:/tmp/x");
        missingSource.expect(4);
        assertTrue(missingSource.stderr().contains("absent.img does not exist"), missingSource.stderr());

        final Run missingTarget = copy(source, "site-b:" + testbed.dir.resolve("absent-target.img"));
        missingTarget.expect(4);
        assertTrue(missingTarget.stderr().contains("absent-target.img does not exist"), missingTarget.stderr());
        assertTrue(!Files.exists(testbed.dir.resolve("absent-target.img")), "a missing target must not be created");
    }

    @Test
    void shouldRefuseMisalignedSizesUnknownPeersAndBadDestinations() throws Exception
    {
        final Path odd = testbed.dir.resolve("odd.img");
        Files.write(odd, new byte[1000]);
        final Path fine = Volumes.random(testbed.dir.resolve("fine.img"), MIB, 34);

        final Run misaligned = copy(odd, "site-b:/tmp/whatever");
        misaligned.expect(4);
        assertTrue(misaligned.stderr().contains("not a multiple of its 512-byte"), misaligned.stderr());

        final Run unknownPeer = copy(fine, "nowhere:/tmp/x");
        unknownPeer.expect(4);
        assertTrue(unknownPeer.stderr().contains("unknown peer 'nowhere'"), unknownPeer.stderr());

        final Run noColon = copy(fine, "site-b");
        noColon.expect(4);
        assertTrue(noColon.stderr().contains("must be PEER:TARGET"), noColon.stderr());

        final Run directory = copy(fine, "site-b:" + testbed.dir);
        directory.expect(4);
        assertTrue(directory.stderr().contains("neither a block device nor a regular file"), directory.stderr());
    }

    @Test
    void shouldSayWhenTheDaemonIsNotRunning()
    {
        final Run run = Run.of(60, List.of(Testbed.script("blockmover"), "jobs", "--socket",
            testbed.dir.resolve("nothing-here.sock").toString()));

        run.expect(3);
        assertTrue(run.stderr().contains("blockmoverd is not running") && run.stderr().contains("start"),
            run.stderr());
    }

    @Test
    void shouldAnswerMalformedControlRequestsAndStayUsable() throws Exception
    {
        try (SocketChannel channel = SocketChannel.open(StandardProtocolFamily.UNIX))
        {
            channel.connect(UnixDomainSocketAddress.of(testbed.socket("site-a")));
            final BufferedReader reader = new BufferedReader(new InputStreamReader(Channels.newInputStream(channel),
                StandardCharsets.UTF_8));
            final String[] requests = {
                "this is not json", "[1,2,3]", "{\"id\":1,\"op\":\"frobnicate\"}", "{\"id\":2,\"op\":\"job\"," +
                "\"args\":{\"id\":\"x\"}}", "{\"id\":3,\"op\":\"cancel\",\"args\":{\"id\":424242}}",
                "{\"id\":4,\"op\":\"copy\",\"args\":{\"source\":\"\"}}", "{\"id\":5,\"op\":\"ping\"}"};
            final String[] expected = {"BAD_REQUEST", "BAD_REQUEST", "BAD_REQUEST", "BAD_REQUEST", "NO_SUCH_JOB",
                "BAD_REQUEST", "\"ok\":true"};
            for (int i = 0; i < requests.length; i++)
            {
                channel.write(ByteBuffer.wrap((requests[i] + "\n").getBytes(StandardCharsets.UTF_8)));
                final String reply = reader.readLine();
                assertTrue(reply != null && reply.contains(expected[i]), requests[i] + " -> " + reply);
            }
        }
        assertTrue(testbed.counter("site-a", "control requests rejected") >= 4);
    }

    @Test
    void shouldStopCleanlyOnSigtermAndRemoveItsSocket()
    {
        testbed.stop("site-b");
        try
        {
            assertTrue(!Files.exists(Path.of(testbed.socket("site-b"))), "socket left behind");
            assertTrue(testbed.log("site-b").contains("site-b stopped"), testbed.log("site-b"));
            testbed.cli("site-b", "status").expect(3);
        }
        finally
        {
            testbed.start("site-b");
        }
        testbed.cli("site-b", "status").expect(0);
    }
}
