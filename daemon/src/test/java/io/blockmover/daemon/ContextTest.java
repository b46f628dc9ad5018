package io.blockmover.daemon;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ContextTest
{
    private static final byte[] KEY = "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    @TempDir
    Path dir;

    private Path config(final String... lines) throws IOException
    {
        final Path path = dir.resolve("blockmoverd.conf");
        Files.write(path, String.join("\n", lines).concat("\n").getBytes(StandardCharsets.UTF_8));
        return path;
    }

    private Path keyFile(final String name, final byte[] key, final String mode) throws IOException
    {
        final Path path = dir.resolve(name);
        Files.write(path, key);
        Files.setPosixFilePermissions(path, PosixFilePermissions.fromString(mode));
        return path;
    }

    private static Properties props(final String... pairs)
    {
        final Properties properties = new Properties();
        for (int i = 0; i < pairs.length; i += 2)
        {
            properties.setProperty(pairs[i], pairs[i + 1]);
        }
        return properties;
    }

    private static String problemsOf(final Path file, final Properties system)
    {
        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> Context.conclude(file, system));
        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        return ex.getMessage();
    }

    @Test
    void shouldApplyDefaults() throws IOException
    {
        final Context ctx = Context.conclude(config("node.name = site-a"), new Properties());

        assertEquals("site-a", ctx.nodeName());
        assertEquals(7788, ctx.listen().getPort());
        assertTrue(ctx.listen().getAddress().isAnyLocalAddress());
        assertEquals(Path.of("/run/blockmover/control.sock"), ctx.controlSocket());
        assertEquals("", ctx.controlGroup());
        assertEquals(Path.of("/var/lib/blockmover"), ctx.stateDir());
        assertEquals(Path.of("/run/blockmover/counters.dat"), ctx.countersFile());
        assertEquals(1 << 20, ctx.chunkLength());
        assertEquals(32, ctx.sessionSlots());
        assertEquals(128, ctx.slabSlots());
        assertEquals(TimeUnit.SECONDS.toNanos(10), ctx.peerTimeoutNs());
        assertEquals(TimeUnit.SECONDS.toNanos(1), ctx.heartbeatIntervalNs());
        assertEquals(TimeUnit.SECONDS.toNanos(5), ctx.connectTimeoutNs());
        assertEquals(TimeUnit.SECONDS.toNanos(10), ctx.reconnectMaxIntervalNs());
        assertEquals(TimeUnit.SECONDS.toNanos(1), ctx.bitmapForceIntervalNs());
        assertEquals(256, ctx.digestBatch());
        assertEquals(3, ctx.verifyRounds());
        assertEquals(256L << 20, ctx.flushBytes());
        assertEquals(TimeUnit.MILLISECONDS.toNanos(200), ctx.flushIntervalNs());
        assertTrue(ctx.peers().isEmpty());
        for (final String name : Configuration.defaults().keySet())
        {
            assertTrue(ctx.effective().containsKey(name), "effective configuration lists " + name);
        }
        assertEquals("1m", ctx.effective().get(Configuration.CHUNK_LENGTH));
    }

    @Test
    void shouldConcludeWithoutConfigFile()
    {
        final Context ctx = Context.conclude(null, props("blockmover.node.name", "only-defaults"));

        assertEquals("only-defaults", ctx.nodeName());
        assertEquals(1 << 20, ctx.chunkLength());
    }

    @Test
    void shouldLetPrefixedPropertiesOverrideFile() throws IOException
    {
        final Path file = config(
            "node.name = from-file",
            "chunk.length = 4m",
            "blockmover.session.slots = 64",
            "listen = 127.0.0.1:9000");
        final Properties system = props(
            "blockmover.node.name", "from-command-line",
            "blockmover.listen", "127.0.0.1:9100",
            "node.name", "ignored-without-prefix",
            "java.io.tmpdir", "/elsewhere",
            "blockmover.root", "/build/root",
            "blockmover.jar", "/build/blockmover.jar");

        final Context ctx = Context.conclude(file, system);

        assertEquals("from-command-line", ctx.nodeName());
        assertEquals(new InetSocketAddress("127.0.0.1", 9100), ctx.listen());
        assertEquals(4 << 20, ctx.chunkLength(), "the file still counts where nothing overrides it");
        assertEquals(64, ctx.sessionSlots(), "the prefix is allowed in the file too");
        assertEquals("from-command-line", ctx.effective().get(Configuration.NODE_NAME));
        assertFalse(ctx.effective().containsKey("root"));
    }

    @Test
    void shouldRejectUnknownProperty() throws IOException
    {
        final String problems = problemsOf(config("node.name = a", "chunk.size = 1m"),
            props("blockmover.frobnicate", "yes"));

        assertTrue(problems.contains("unknown property 'chunk.size'"), problems);
        assertTrue(problems.contains("unknown property 'frobnicate'"), problems);
    }

    @Test
    void shouldCollectEveryBadValueInOneMessage() throws IOException
    {
        final Path file = config(
            "node.name = a",
            "chunk.length = 65537",
            "session.slots = 24",
            "peer.timeout = 10s",
            "heartbeat.interval = 6s",
            "connect.timeout = 5 parsecs",
            "reconnect.max.interval = 1.5s",
            "flush.bytes = 12q",
            "listen = 0.0.0.0:70000",
            "digest.batch = lots");

        final String problems = problemsOf(file, new Properties());

        assertTrue(problems.contains(Configuration.CHUNK_LENGTH + " 65537 must be a multiple of 4k"), problems);
        assertTrue(problems.contains(Configuration.SESSION_SLOTS + " 24 must be a power of two"), problems);
        assertTrue(problems.contains(Configuration.HEARTBEAT_INTERVAL + " must be at most half of " +
            Configuration.PEER_TIMEOUT), problems);
        assertTrue(problems.contains(Configuration.CONNECT_TIMEOUT + " '5 parsecs' is not a duration"), problems);
        assertTrue(problems.contains(Configuration.RECONNECT_MAX_INTERVAL + " '1.5s' is not a duration"), problems);
        assertTrue(problems.contains(Configuration.FLUSH_BYTES + " '12q' is not a size"), problems);
        assertTrue(problems.contains("listen port 70000 out of range"), problems);
        assertTrue(problems.contains(Configuration.DIGEST_BATCH + " 'lots' is not an integer"), problems);
    }

    @Test
    void shouldAcceptHeartbeatOfExactlyHalfTheTimeout() throws IOException
    {
        final Context ctx = Context.conclude(config("node.name = a", "peer.timeout = 4s", "heartbeat.interval = 2s"),
            new Properties());

        assertEquals(TimeUnit.SECONDS.toNanos(2), ctx.heartbeatIntervalNs());
    }

    @Test
    void shouldRejectNonNumericPortAndMissingPort() throws IOException
    {
        assertTrue(problemsOf(config("node.name = a", "listen = 0.0.0.0:http"), new Properties())
            .contains("has no numeric port"));
        assertTrue(problemsOf(config("node.name = a", "listen = 7788"), new Properties())
            .contains("must be host:port"));
        assertTrue(problemsOf(config("node.name = a", "listen = 0.0.0.0:0"), new Properties())
            .contains("out of range"));
    }

    @Test
    void shouldRejectBadNodeName() throws IOException
    {
        final String problems = problemsOf(config("node.name = Site_A"), new Properties());

        assertTrue(problems.contains(Configuration.NODE_NAME + " 'Site_A' must match"), problems);
    }

    @Test
    void shouldParseConfiguredPeer() throws IOException
    {
        final Path key = keyFile("b.key", KEY, "rw-------");
        final Path file = config(
            "node.name = site-a",
            "peer.site-b.address = 127.0.0.1:7789",
            "peer.site-b.key.file = " + key,
            "peer.site-c.address = [::1]:7790",
            "peer.site-c.key.file = " + key,
            "peer.site-c.transport = TCP");

        final Context ctx = Context.conclude(file, new Properties());

        assertEquals(2, ctx.peers().size());
        final PeerConfig b = ctx.peers().get("site-b");
        assertEquals("site-b", b.name());
        assertEquals(new InetSocketAddress("127.0.0.1", 7789), b.address());
        assertEquals(key, b.keyFile());
        assertArrayEquals(KEY, b.key());
        assertEquals(PeerConfig.TransportKind.AUTO, b.transport());
        final PeerConfig c = ctx.peers().get("site-c");
        assertEquals(7790, c.address().getPort());
        assertTrue(c.address().getAddress().isLoopbackAddress());
        assertEquals(PeerConfig.TransportKind.TCP, c.transport());
        assertEquals("127.0.0.1:7789", ctx.effective().get("peer.site-b.address"));
    }

    @Test
    void shouldStripTrailingNewlineOfKey() throws IOException
    {
        final Path key = keyFile("nl.key", "0123456789abcdef\n".getBytes(StandardCharsets.US_ASCII), "rw-------");

        final Context ctx = Context.conclude(config("node.name = a", "peer.b.address = 127.0.0.1:1",
            "peer.b.key.file = " + key), new Properties());

        assertEquals(16, ctx.peers().get("b").key().length);
    }

    @Test
    void shouldRejectKeyReadableByGroupOrOthers() throws IOException
    {
        final Path groupReadable = keyFile("g.key", KEY, "rw-r-----");
        final Path worldReadable = keyFile("o.key", KEY, "rw----r--");

        final String problems = problemsOf(config("node.name = a",
            "peer.b.address = 127.0.0.1:1", "peer.b.key.file = " + groupReadable,
            "peer.c.address = 127.0.0.1:2", "peer.c.key.file = " + worldReadable), new Properties());

        assertTrue(problems.contains("chmod 600 " + groupReadable), problems);
        assertTrue(problems.contains("chmod 600 " + worldReadable), problems);
    }

    @Test
    void shouldRejectShortKey() throws IOException
    {
        final Path key = keyFile("short.key", "0123456789abcde\n".getBytes(StandardCharsets.US_ASCII), "rw-------");

        final String problems = problemsOf(config("node.name = a", "peer.b.address = 127.0.0.1:1",
            "peer.b.key.file = " + key), new Properties());

        assertTrue(problems.contains("holds 15 bytes; a key needs at least 16"), problems);
    }

    @Test
    void shouldRejectMissingKeyFileSettingAndUnreadableKeyFile() throws IOException
    {
        final String missingSetting = problemsOf(config("node.name = a", "peer.b.address = 127.0.0.1:1"),
            new Properties());
        final String missingFile = problemsOf(config("node.name = a", "peer.b.address = 127.0.0.1:1",
            "peer.b.key.file = " + dir.resolve("absent.key")), new Properties());

        assertTrue(missingSetting.contains("peer.b.key.file is missing"), missingSetting);
        assertTrue(missingSetting.contains("chmod 600"), "names how to make one: " + missingSetting);
        assertTrue(missingFile.contains("cannot be read"), missingFile);
    }

    @Test
    void shouldRejectUnknownTransport() throws IOException
    {
        final Path key = keyFile("t.key", KEY, "rw-------");

        final String problems = problemsOf(config("node.name = a", "peer.b.address = 127.0.0.1:1",
            "peer.b.key.file = " + key, "peer.b.transport = udp"), new Properties());

        assertTrue(problems.contains("peer.b.transport 'udp' must be auto, tcp or rdma"), problems);
    }

    @Test
    void shouldAcceptRdmaTransport() throws IOException
    {
        final Path key = keyFile("r.key", KEY, "rw-------");

        final Context ctx = Context.conclude(config("node.name = a", "peer.b.address = 127.0.0.1:1",
            "peer.b.key.file = " + key, "peer.b.transport = rdma"), new Properties());

        assertEquals(PeerConfig.TransportKind.RDMA, ctx.peers().get("b").transport());
    }

    @Test
    void shouldRejectMalformedPeerEntries() throws IOException
    {
        final Path key = keyFile("m.key", KEY, "rw-------");

        final String problems = problemsOf(config("node.name = a",
            "peer.b.key.file = " + key,
            "peer.a.address = 127.0.0.1:1",
            "peer.a.key.file = " + key,
            "peer.c.address = 127.0.0.1:1",
            "peer.c.key.file = " + key,
            "peer.c.colour = blue",
            "peer.nodot = x"), new Properties());

        assertTrue(problems.contains("peer.b.address is missing"), problems);
        assertTrue(problems.contains("peer 'a' has the name of this node"), problems);
        assertTrue(problems.contains("unknown property 'peer.c.colour'"), problems);
        assertTrue(problems.contains("'peer.nodot' should be peer.NAME.address"), problems);
    }

    @Test
    void shouldParseSizesWithUnits()
    {
        assertEquals(4096, Context.parseSize("4096"));
        assertEquals(64 * 1024, Context.parseSize("64k"));
        assertEquals(64 * 1024, Context.parseSize(" 64K "));
        assertEquals(1 << 20, Context.parseSize("1m"));
        assertEquals(2L << 30, Context.parseSize("2g"));
        assertEquals(1L << 40, Context.parseSize("1t"));
        assertEquals(0, Context.parseSize("0"));
        for (final String bad : new String[] {"", "  ", "1.5m", "-1", "k", "12q", "9999999999999t", "1 m"})
        {
            assertThrows(NumberFormatException.class, () -> Context.parseSize(bad), "'" + bad + "'");
        }
    }

    @Test
    void shouldParseDurationsWithUnits()
    {
        assertEquals(7, Context.parseDurationNs("7ns"));
        assertEquals(250_000, Context.parseDurationNs("250us"));
        assertEquals(TimeUnit.MILLISECONDS.toNanos(500), Context.parseDurationNs("500ms"));
        assertEquals(TimeUnit.SECONDS.toNanos(10), Context.parseDurationNs("10s"));
        assertEquals(TimeUnit.MINUTES.toNanos(2), Context.parseDurationNs("2m"));
        assertEquals(TimeUnit.SECONDS.toNanos(3), Context.parseDurationNs("3"));
        assertEquals(TimeUnit.SECONDS.toNanos(3), Context.parseDurationNs(" 3S "));
        for (final String bad : new String[] {"", "1.5s", "10h", "s", "ms", "five"})
        {
            assertThrows(NumberFormatException.class, () -> Context.parseDurationNs(bad), "'" + bad + "'");
        }
    }

    @Test
    void shouldRejectNonPositiveDuration() throws IOException
    {
        final String problems = problemsOf(config("node.name = a", "flush.interval = 0ms"), new Properties());

        assertTrue(problems.contains(Configuration.FLUSH_INTERVAL + " must be positive"), problems);
    }

    @Test
    void shouldReportUnreadableConfigFile()
    {
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> Context.conclude(dir.resolve("missing.conf"), new Properties()));

        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        assertTrue(ex.getMessage().contains("missing.conf"), ex.getMessage());
    }
}
