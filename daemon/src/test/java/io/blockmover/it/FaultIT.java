package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A damaged link and an impostor: corruption is detected and resent, a wrong key is refused before anything is
 * written.
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
}
