package io.blockmover.daemon;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Properties;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ConfigReloadTest
{
    @TempDir
    Path dir;
    private Path file;
    private Path key;
    private String base;

    @BeforeEach
    void setUp() throws IOException
    {
        key = dir.resolve("b.key");
        Files.write(key, "0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII));
        Files.setPosixFilePermissions(key, PosixFilePermissions.fromString("rw-------"));
        file = dir.resolve("blockmoverd.conf");
        base = "node.name = a\nlisten = 127.0.0.1:7788\nstate.dir = " + dir + "\npeer.b.address = 127.0.0.1:7790\n" +
            "peer.b.key.file = " + key + "\n";
        Files.writeString(file, base);
    }

    private Context running()
    {
        return Context.conclude(file, new Properties());
    }

    @Test
    void shouldApplyLiveSettingsAndKeepRestartOnlyOnes() throws IOException
    {
        final Context running = running();
        Files.writeString(file, base.replace("7790", "7791") + "heartbeat.interval = 2s\nlog.level = debug\n" +
            "listen = 127.0.0.1:7799\nchunk.length = 4m\n");
        final ConfigReload.Result result = ConfigReload.reload(running, new Properties());

        assertEquals(2_000_000_000L, result.context().heartbeatIntervalNs());
        assertEquals(System.Logger.Level.DEBUG, result.context().logLevel());
        assertEquals(7791, result.context().peers().get("b").address().getPort());
        assertEquals(7788, result.context().listen().getPort(), "listen needs a restart: the running value stays");
        assertEquals(1 << 20, result.context().chunkLength());
        assertEquals(3, result.applied().size(), result.applied().toString());
        assertEquals(List.of("chunk.length", "listen"), result.restartRequired().stream()
            .map((line) -> line.substring(0, line.indexOf(':'))).toList());
        assertTrue(result.restartRequired().get(1).contains("127.0.0.1:7788 -> 127.0.0.1:7799 needs a restart"));
    }

    @Test
    void shouldRefuseAnInvalidFileListingEveryProblem() throws IOException
    {
        final Context running = running();
        Files.writeString(file, base + "heartbeat.interval = soon\nno.such = 1\nlog.level = LOUD\n");
        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> ConfigReload.reload(running, new Properties()));
        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        assertTrue(ex.getMessage().contains("heartbeat.interval 'soon' is not a duration"), ex.getMessage());
        assertTrue(ex.getMessage().contains("unknown property 'no.such'"), ex.getMessage());
        assertTrue(ex.getMessage().contains("log.level 'LOUD' must be DEBUG, INFO, WARNING or ERROR"), ex.getMessage());
    }

    @Test
    void shouldReportPeersAddedRemovedAndAKeyRotatedInPlace() throws IOException
    {
        final Context running = running();
        Files.write(key, "fedcba9876543210fedcba9876543210".getBytes(StandardCharsets.US_ASCII));
        Files.writeString(file, base + "peer.c.address = 127.0.0.1:7792\npeer.c.key.file = " + key + "\n");
        final ConfigReload.Result result = ConfigReload.reload(running, new Properties());
        assertEquals(List.of("c"), result.addedPeers());
        assertTrue(result.applied().contains("peer.b.key: new key from " + key +
            ", for the next connection with that peer"), result.applied().toString());

        Files.writeString(file, base.replace("peer.b.", "#peer.b."));
        assertEquals(List.of("b"), ConfigReload.reload(running, new Properties()).removedPeers());
    }

    @Test
    void shouldChangeNothingWhenTheFileIsTheSame()
    {
        final ConfigReload.Result result = ConfigReload.reload(running(), new Properties());
        assertEquals(List.of(), result.applied());
        assertEquals(List.of(), result.restartRequired());
    }
}
