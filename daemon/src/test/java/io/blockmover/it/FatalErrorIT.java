package io.blockmover.it;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A daemon whose jar is overwritten while it runs (cp of a new build over the installed jar, a rebuild in a
 * checkout) meets a NoClassDefFoundError at the next class it loads lazily. It used to lose its conductor thread
 * and stay up answering nothing: the command that triggered it hung, SIGTERM no longer stopped it, and only
 * systemd's watchdog or a kill -9 ended it. Now it stops at once, with exit status 70 and a log line that says
 * why, like a crash; the command fails instead of hanging, and the daemon starts again from a good jar.
 * <p>
 * One real daemon, started from its own copy of the launcher, the jar and the JVM options (the tree's jar must
 * stay whole for every other test), with a peer that never answers: the command only has to reach the conductor.
 */
@Timeout(180)
class FatalErrorIT
{
    private final Path dir = Path.of(System.getProperty("blockmover.it.dir", System.getProperty("java.io.tmpdir")),
        "bm-it-fatal");
    private Process daemon;

    @AfterEach
    void stop() throws InterruptedException
    {
        if (daemon != null && daemon.isAlive())
        {
            daemon.destroyForcibly();
            daemon.waitFor(30, TimeUnit.SECONDS);
        }
    }

    @Test
    void shouldStopAsACrashWouldWhenItsJarIsOverwrittenAndStartAgainFromAGoodJar() throws Exception
    {
        final Path jar = layOut();
        final Path log = dir.resolve("daemon.log");
        daemon = start(log);
        awaitAnswering(daemon, log);

        // What cp does to an installed jar: the same file, truncated, then written. Truncated is enough.
        final byte[] goodJar = Files.readAllBytes(jar);
        Files.write(jar, new byte[0]);
        final Path source = Volumes.random(dir.resolve("a.img"), 4 * MIB, 3);
        final Path destination = Volumes.zeros(dir.resolve("b.img"), 4 * MIB);
        // group create reaches classes a daemon with no groups has not loaded yet (the group's mode, its handle).
        final Run create = Run.of(30, List.of(Testbed.script("blockmover"), "group", "create", "g",
            "--peer", "other", "--mode", "sync", "--log-size", "8m", "--volume", source + "=" + destination,
            "--socket", dir.resolve("control.sock").toString()));
        assertEquals(3, create.exitCode(), "the command failed instead of hanging: " + create);
        assertTrue(create.stderr().contains("the control connection before answering"), create.stderr());

        assertTrue(daemon.waitFor(30, TimeUnit.SECONDS), "the daemon stopped by itself: " + Files.readString(log));
        assertEquals(70, daemon.exitValue(), Files.readString(log));
        final String said = Files.readString(log);
        assertTrue(said.contains("FATAL: thread conductor died of java.lang.NoClassDefFoundError"), said);
        assertTrue(said.contains("restart it after every upgrade"), said);
        assertFalse(said.contains("conductor error"), "the stack is logged once, after the FATAL line: " + said);

        // Back on a whole jar, it starts and answers; the interrupted create left no group behind.
        Files.write(jar, goodJar);
        final Path restartLog = dir.resolve("daemon-restarted.log");
        daemon = start(restartLog);
        awaitAnswering(daemon, restartLog);
        final Run list = Run.of(60, List.of(Testbed.script("blockmover"), "group", "status", "--json",
            "--socket", dir.resolve("control.sock").toString())).expect(0);
        assertFalse(list.stdout().contains("\"g\""), list.stdout());
        Run.of(60, List.of("kill", "-TERM", Long.toString(daemon.pid()))).expect(0);
        assertTrue(daemon.waitFor(60, TimeUnit.SECONDS), "stopped by SIGTERM");
        assertTrue(daemon.exitValue() == 0 || daemon.exitValue() == 143,
            "stopped cleanly (143 is SIGTERM's status, which the unit counts as success): " + daemon.exitValue());
    }

    /**
     * Copies the launcher, the jar and the JVM options into this test's directory in the source tree's layout
     * (scripts/, daemon/target/, config/) and writes a configuration: the launcher then runs the copy.
     *
     * @return the copied jar.
     */
    private Path layOut() throws IOException
    {
        Run.of(60, List.of("rm", "-rf", dir.toString())).expect(0);
        final Path scripts = Files.createDirectories(dir.resolve("scripts"));
        final Path target = Files.createDirectories(dir.resolve("daemon").resolve("target"));
        final Path config = Files.createDirectories(dir.resolve("config"));
        Files.copy(Run.ROOT.resolve("scripts/blockmoverd"), scripts.resolve("blockmoverd"),
            StandardCopyOption.COPY_ATTRIBUTES);
        Files.copy(Run.ROOT.resolve("config/jvm.options"), config.resolve("jvm.options"));
        final Path jar = target.resolve("blockmover.jar");
        Files.copy(Run.ROOT.resolve("daemon/target/blockmover.jar"), jar);
        final Path key = dir.resolve("shared.key");
        Files.write(key, new byte[32]);
        Run.of(10, List.of("chmod", "600", key.toString())).expect(0);
        Files.writeString(dir.resolve("blockmoverd.conf"), String.join("\n",
            "node.name = fatal",
            "listen = 127.0.0.1:" + freePort(),
            "control.socket = " + dir.resolve("control.sock"),
            "counters.file = " + dir.resolve("counters.dat"),
            "nbd.socket = " + dir.resolve("nbd.sock"),
            "state.dir = " + Files.createDirectories(dir.resolve("state")),
            "peer.other.address = 127.0.0.1:9",
            "peer.other.key.file = " + key,
            ""));
        return jar;
    }

    private static int freePort() throws IOException
    {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress()))
        {
            return socket.getLocalPort();
        }
    }

    private Process start(final Path log) throws IOException
    {
        Files.deleteIfExists(dir.resolve("control.sock"));
        return new ProcessBuilder(dir.resolve("scripts/blockmoverd").toString(), "--config",
            dir.resolve("blockmoverd.conf").toString())
            .redirectOutput(log.toFile()).redirectErrorStream(true)
            .redirectInput(ProcessBuilder.Redirect.PIPE).start();
    }

    private void awaitAnswering(final Process process, final Path log)
    {
        // The same ping scripts/testbed waits with: a JVM start per poll would cost half a second of CPU each.
        final Path socket = dir.resolve("control.sock");
        Testbed.await("the daemon to answer on " + socket, 60, () -> !process.isAlive() ||
            Files.exists(socket) && Run.of(60, List.of(Testbed.script("ctl.py"), socket.toString(), "ping"))
                .exitCode() == 0, () -> ": " + readLog(log));
        assertTrue(process.isAlive(), "the daemon is running: " + readLog(log));
    }

    private static String readLog(final Path log)
    {
        try
        {
            return Files.readString(log);
        }
        catch (final IOException ex)
        {
            return "(cannot read " + log + ": " + ex + ")";
        }
    }
}
