package io.blockmover.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.it.GroupChecks.awaitReplicated;
import static io.blockmover.it.GroupChecks.number;
import static io.blockmover.it.GroupChecks.state;
import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * blockmoverd as a systemd service, without systemd as PID 1 (there is none here): the unit file passes
 * {@code systemd-analyze verify}; a real daemon started with NOTIFY_SOCKET pointing at a datagram socket this test
 * owns sends READY=1, STATUS= with its group's state, WATCHDOG=1 (WATCHDOG_USEC set) and STOPPING=1 on SIGTERM;
 * SIGHUP and {@code blockmover reload} apply a changed valid file while the group keeps its session, and refuse an
 * invalid one, listing every problem, with the daemon running on its old configuration; a long check of a group's
 * log at start extends the start timeout, and requests meanwhile are answered STARTING. One testbed (site-a with
 * the notify socket, site-b its partner) serves every test, in order.
 */
@Timeout(180)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class SystemdIT
{
    private static Testbed testbed;
    private static NotifySocket notify;
    private static Path config;
    private static String originalConfig;

    @BeforeAll
    static void up() throws Exception
    {
        testbed = Testbed.up("systemd", "--set", "peer.timeout=2s", "--set", "heartbeat.interval=500ms",
            "--set", "reconnect.max.interval=1s");
        notify = new NotifySocket(testbed.dir.resolve("notify.sock"));
        testbed.stop("site-a");
        startAsService();
        config = testbed.dir.resolve("site-a").resolve("blockmoverd.conf");
        originalConfig = Files.readString(config);
    }

    @AfterAll
    static void down() throws Exception
    {
        if (notify != null)
        {
            notify.close();
        }
        if (testbed != null)
        {
            testbed.close();
        }
    }

    @Test
    @Order(1)
    void shouldPassSystemdAnalyzeVerify() throws Exception
    {
        // verify insists that ExecStart's binary exists: check a copy that runs the launchers of this tree instead
        // of /usr/bin's, and nothing else changed. Documentation= man pages are checked by the package test,
        // where they are installed (--man=no here).
        final String unit = Files.readString(Run.ROOT.resolve("systemd/blockmoverd.service"));
        final String local = unit.replace("/usr/bin/blockmoverd ", Testbed.script("blockmoverd") + " ")
            .replace("/usr/bin/blockmover ", Testbed.script("blockmover") + " ");
        assertNotEquals(unit, local, "the unit starts /usr/bin/blockmoverd and reloads with /usr/bin/blockmover");
        final Path copy = Files.createDirectories(testbed.dir.resolve("unit")).resolve("blockmoverd.service");
        Files.writeString(copy, local);
        final Run verify = Run.of(60, List.of("systemd-analyze", "verify", "--man=no", copy.toString()));
        assertEquals(0, verify.exitCode(), verify.toString());
        assertEquals("", verify.stdout() + verify.stderr());

        // The same check reports a broken unit, so the empty output above means something.
        Files.writeString(copy, local.replace("LimitMEMLOCK=infinity", "LimitMEMLOCK=lots"));
        final Run broken = Run.of(60, List.of("systemd-analyze", "verify", "--man=no", copy.toString()));
        assertTrue(broken.stderr().contains("lots"), broken.toString());
    }

    @Test
    @Order(2)
    void shouldNotifyReadyStatusOfEachGroupAndWatchdog() throws Exception
    {
        final String ready = notify.await("READY=1", 30_000, (m) -> m.contains("READY=1"));
        assertTrue(ready.contains("STATUS=site-a: no groups; no active jobs"), ready);
        notify.await("WATCHDOG=1", 3_000, (m) -> m.equals("WATCHDOG=1"));
        notify.await("a second WATCHDOG=1", 3_000, (m) -> m.equals("WATCHDOG=1"));

        final Path source = Volumes.random(testbed.dir.resolve("svc-source.img"), 16 * MIB, 5);
        final Path destination = Volumes.zeros(testbed.dir.resolve("svc-destination.img"), 16 * MIB);
        GroupChecks.create(testbed, "svc", "--mode", "sync", "--log-size", "32m", "--volume",
            source + "=" + destination);
        awaitReplicated(testbed, "svc", 60);
        notify.await("STATUS= with the group replicating", 5_000,
            (m) -> m.equals("STATUS=site-a: group svc source replicating; no active jobs"));
    }

    @Test
    @Order(3)
    @SuppressWarnings("unchecked")
    void shouldApplyAValidReloadWithoutDroppingReplication() throws Exception
    {
        awaitReplicated(testbed, "svc", 60);
        final long accepted = testbed.counter("site-b", "connections accepted");
        final long loadedBefore = number((Map<String, Object>)testbed.call("site-a", "status", Map.of()),
            "config_loaded_ms");
        // heartbeat.interval and log.level apply; nbd.workers needs a restart and must keep its running value.
        Files.writeString(config, originalConfig + "heartbeat.interval = 400ms\nlog.level = DEBUG\nnbd.workers = 8\n");
        hangUp();
        notify.await("RELOADING=1", 10_000, (m) -> m.startsWith("RELOADING=1\nMONOTONIC_USEC="));
        notify.await("READY=1 after the reload", 10_000, (m) -> m.startsWith("READY=1\nSTATUS=site-a: group svc"));

        final Map<String, Object> running = (Map<String, Object>)testbed.call("site-a", "config", Map.of());
        assertEquals("400ms", running.get("heartbeat.interval"));
        assertEquals("DEBUG", running.get("log.level"));
        assertEquals("16", running.get("nbd.workers"));
        final Map<String, Object> status = (Map<String, Object>)testbed.call("site-a", "status", Map.of());
        assertTrue(number(status, "config_loaded_ms") > loadedBefore, status.toString());
        assertEquals(config.toString(), status.get("config_file"));
        final String log = testbed.log("site-a");
        assertTrue(log.contains("applied heartbeat.interval: 500ms -> 400ms, for the next connection"), log);
        assertTrue(log.contains("not applied: nbd.workers: 16 -> 8 needs a restart"), log);

        // blockmover reload (the unit's ExecReload) does the same synchronously and reports.
        final Run reload = testbed.cli("site-a", "reload", "--json").expect(0);
        final Map<String, Object> result = JSON.std.mapFrom(reload.stdout());
        assertEquals(List.of(), result.get("applied"));
        assertEquals(1, ((List<Object>)result.get("restart_required")).size(), reload.stdout());
        final Run text = testbed.cli("site-a", "status").expect(0);
        assertTrue(text.stdout().contains("config   " + config + ", loaded "), text.stdout());

        // The group kept its session through both reloads: still replicating, no new connection to site-b.
        assertEquals("replicating", state(testbed.group("site-a", "svc")));
        assertEquals(accepted, testbed.counter("site-b", "connections accepted"));
    }

    @Test
    @Order(4)
    @SuppressWarnings("unchecked")
    void shouldRefuseAnInvalidReloadAndKeepTheRunningConfiguration() throws Exception
    {
        Files.writeString(config, originalConfig + "heartbeat.interval = soon\nno.such.setting = 1\n");
        final Run refused = testbed.cli("site-a", "reload");
        assertEquals(4, refused.exitCode(), refused.toString());
        assertTrue(refused.stderr().contains("heartbeat.interval 'soon' is not a duration"), refused.stderr());
        assertTrue(refused.stderr().contains("unknown property 'no.such.setting'"), refused.stderr());

        hangUp();
        notify.await("RELOADING=1", 10_000, (m) -> m.startsWith("RELOADING=1"));
        notify.await("READY=1 after the refused reload", 10_000, (m) -> m.startsWith("READY=1"));
        final Map<String, Object> running = (Map<String, Object>)testbed.call("site-a", "config", Map.of());
        assertEquals("400ms", running.get("heartbeat.interval"), "the running configuration is kept");
        assertFalse(running.containsKey("no.such.setting"));
        final String log = testbed.log("site-a");
        assertTrue(log.contains("configuration reload from " + config + " refused; still running"), log);
        assertTrue(log.contains("WARNING blockmoverd:   unknown property 'no.such.setting'"), log);
        assertEquals("replicating", state(testbed.group("site-a", "svc")));
        Files.writeString(config, originalConfig);
    }

    @Test
    @Order(5)
    void shouldNotifyStoppingOnSigterm()
    {
        testbed.stop("site-a");
        notify.await("STOPPING=1", 20_000, (m) -> m.startsWith("STOPPING=1"));
    }

    /**
     * A group whose log holds records at start is checked before READY=1. For a full log of tens of GiB on a slow
     * disk that takes minutes, longer than TimeoutStartSec=: systemd would kill the start and restart it into the
     * same scan, for ever. While the scan progresses, the daemon says so in STATUS=, asks systemd to extend the
     * start timeout and pets the watchdog, and answers control requests with STARTING and how far it is (they
     * used to wait unanswered until READY). Here an async group's log holds 192 MiB its stopped partner never got:
     * a 12 MiB range written 16 times, long enough a scan to ask something while it runs.
     */
    @Test
    @Order(6)
    void shouldExtendTheStartTimeoutAndAnswerRequestsWhileALogIsChecked() throws Exception
    {
        startAsService();
        notify.await("READY=1", 30_000, (m) -> m.contains("READY=1"));
        final Path source = Volumes.random(testbed.dir.resolve("slow-source.img"), 16 * MIB, 6);
        final Path destination = Volumes.zeros(testbed.dir.resolve("slow-destination.img"), 16 * MIB);
        final Map<String, Object> created = GroupChecks.create(testbed, "slow", "--mode", "async", "--log-size",
            "256m", "--volume", source + "=" + destination);
        awaitReplicated(testbed, "slow", 60);
        testbed.stop("site-b");
        final List<String> writes = new ArrayList<>(List.of("qemu-io", "-f", "raw", GroupChecks.uri(created, 0)));
        for (int i = 0; i < 16; i++)
        {
            writes.addAll(List.of("-c", "write -P " + (0x30 + i) + " 2M 12M"));
        }
        writes.addAll(List.of("-c", "flush"));
        final Run write = Run.of(120, writes).expect(0);
        assertFalse((write.stdout() + write.stderr()).contains("failed"), write.toString());
        testbed.stop("site-a");

        final CompletableFuture<Void> started = CompletableFuture.runAsync(SystemdIT::startAsService);
        final String checking = notify.await("STATUS= while the log is checked", 30_000,
            (m) -> m.contains("STATUS=group slow: checking the records its log holds"));
        final BlockmoverException starting = assertThrows(BlockmoverException.class,
            () -> testbed.call("site-a", "ping", Map.of()), "a request while the log is checked");
        assertEquals(ErrorCode.STARTING, starting.code(), starting.getMessage());
        assertTrue(starting.getMessage().contains("blockmoverd is starting and answers requests once it has " +
            "checked every group's log: group slow: checking the records its log holds"), starting.getMessage());
        assertTrue(checking.contains("\nEXTEND_TIMEOUT_USEC=30000000"), checking);
        assertTrue(checking.contains("\nWATCHDOG=1"), checking);
        started.get(120, TimeUnit.SECONDS);
        notify.await("READY=1 after the check", 30_000, (m) -> m.contains("READY=1"));
        assertEquals("site-a", ((Map<?, ?>)testbed.call("site-a", "ping", Map.of())).get("node"));

        // Nothing the log held was lost: once its partner is back, the group ships it.
        testbed.start("site-b");
        awaitReplicated(testbed, "slow", 60);
        GroupChecks.assertSameVolumes(new Path[] {source}, new Path[] {destination}, 16 * MIB);
    }

    /** Starts site-a as systemd would: with NOTIFY_SOCKET and WATCHDOG_USEC (1 s: a ping every 500 ms). */
    private static void startAsService()
    {
        Run.of(120, List.of("env", "NOTIFY_SOCKET=" + notify.path, "WATCHDOG_USEC=1000000",
            Testbed.script("testbed"), "start", "site-a", "--dir", testbed.dir.toString())).expect(0);
    }

    @SuppressWarnings("unchecked")
    private static void hangUp()
    {
        // The JVM's own pid (the launchers exec it), as systemd's $MAINPID would be.
        final long pid = number((Map<String, Object>)testbed.call("site-a", "status", Map.of()), "pid");
        Run.of(10, List.of("kill", "-HUP", Long.toString(pid))).expect(0);
    }
}
