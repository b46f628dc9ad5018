package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import io.blockmover.io.Libc;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Real block devices (loop devices with direct I/O over files): a copy between two of them, and a destination
 * held open exclusively by another process (as a mount would) refused with VOLUME_IN_USE.
 */
@Timeout(300)
class BlockDeviceIT
{
    private static Testbed testbed;
    private static final List<String> LOOPS = new ArrayList<>();

    @BeforeAll
    static void up()
    {
        assumeTrue("root".equals(System.getProperty("user.name")) && Files.isExecutable(Path.of("/sbin/losetup")),
            "loop devices need root and losetup; CI runs as root");
        testbed = Testbed.up("blockdev");
    }

    @AfterAll
    static void down()
    {
        for (final String loop : LOOPS)
        {
            Run.of(30, List.of("losetup", "-d", loop));
        }
        if (testbed != null)
        {
            testbed.close();
        }
    }

    private static String attach(final Path file)
    {
        final Run run = Run.of(30, List.of("losetup", "--find", "--show", "--direct-io=on", file.toString()));
        run.expect(0);
        final String loop = run.stdout().trim();
        LOOPS.add(loop);
        return loop;
    }

    @Test
    void shouldCopyBetweenBlockDevices() throws Exception
    {
        final long size = 128L * MIB + 512 * 7;
        final Path sourceFile = Volumes.random(testbed.dir.resolve("loop-src.img"), size, 41);
        final Path targetFile = Volumes.zeros(testbed.dir.resolve("loop-dst.img"), size);
        final String source = attach(sourceFile);
        final String target = attach(targetFile);

        final Run run = testbed.cli("site-a", "copy", source, "site-b:" + target, "--verify");

        run.expect(0);
        assertTrue(run.stdout().contains("both sides identical"), run.stdout());
        Run.of(30, List.of("sync")).expect(0);
        assertNull(Volumes.firstDifference(sourceFile, targetFile, size));
    }

    @Test
    void shouldRefuseADestinationHeldExclusivelyByAnotherProgram() throws Exception
    {
        final Path sourceFile = Volumes.random(testbed.dir.resolve("held-src.img"), 8L * MIB, 42);
        final Path targetFile = Volumes.random(testbed.dir.resolve("held-dst.img"), 8L * MIB, 43);
        final Path pristine = testbed.dir.resolve("held-pristine.img");
        Files.copy(targetFile, pristine);
        final String target = attach(targetFile);
        final int holder = Libc.open(target, Libc.O_RDONLY | Libc.O_EXCL);
        try
        {
            final Run run = testbed.cli("site-a", "copy", sourceFile.toString(), "site-b:" + target);

            run.expect(4);
            assertTrue(run.stderr().contains("is in use"), run.stderr());
        }
        finally
        {
            Libc.close(holder);
        }
        assertNull(Volumes.firstDifference(pristine, targetFile, 8L * MIB));
    }
}
