package io.blockmover.daemon;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Every setting of blockmoverd: a named property with a default and a line of documentation. The one place that
 * knows property names. In the configuration file a property is written without the {@code blockmover.} prefix
 * ({@code node.name = site-a}); on the command line with it ({@code -Dblockmover.node.name=site-a}), which wins.
 * Peers are {@code peer.NAME.address}, {@code peer.NAME.key.file} and {@code peer.NAME.transport}.
 */
public final class Configuration
{
    public static final String PREFIX = "blockmover.";

    public static final String NODE_NAME = "node.name";
    public static final String LISTEN = "listen";
    public static final String CONTROL_SOCKET = "control.socket";
    public static final String CONTROL_GROUP = "control.group";
    public static final String STATE_DIR = "state.dir";
    public static final String COUNTERS_FILE = "counters.file";
    public static final String CHUNK_LENGTH = "chunk.length";
    public static final String SESSION_SLOTS = "session.slots";
    public static final String SLAB_SLOTS = "slab.slots";
    public static final String PEER_TIMEOUT = "peer.timeout";
    public static final String HEARTBEAT_INTERVAL = "heartbeat.interval";
    public static final String ACK_TIMEOUT = "ack.timeout";
    public static final String ACTIVITY_REGIONS = "activity.regions";
    public static final String CONNECT_TIMEOUT = "connect.timeout";
    public static final String RECONNECT_MAX_INTERVAL = "reconnect.max.interval";
    public static final String BITMAP_FORCE_INTERVAL = "bitmap.force.interval";
    public static final String DIGEST_BATCH = "digest.batch";
    public static final String FLUSH_BYTES = "flush.bytes";
    public static final String FLUSH_INTERVAL = "flush.interval";
    public static final String VERIFY_ROUNDS = "verify.rounds";
    public static final String NBD_SOCKET = "nbd.socket";
    public static final String NBD_LISTEN = "nbd.listen";
    public static final String NBD_WORKERS = "nbd.workers";
    public static final String GROUP_LOG_SIZE = "group.log.size";
    public static final String GROUP_LOG_UNCLAIMED_KEEP = "group.log.unclaimed.keep";
    public static final String METRICS_LISTEN = "metrics.listen";
    public static final String LOG_LEVEL = "log.level";
    /** nbd.export.NAME = PATH: a volume served over NBD without replication (a baseline, or a scratch disk). */
    public static final String NBD_EXPORT_PREFIX = "nbd.export.";

    public static final String PEER_PREFIX = "peer.";
    public static final String PEER_ADDRESS = "address";
    public static final String PEER_KEY_FILE = "key.file";
    public static final String PEER_TRANSPORT = "transport";
    /** Bytes per second a peer may be sent by copies, resync and async shipping (0 = unlimited). */
    public static final String PEER_MAX_RATE = "max.rate";

    /** Default TCP port of the replication listener (and of rdma_cm). */
    public static final int DEFAULT_PORT = 7788;

    private static final Map<String, String[]> DEFAULTS = new LinkedHashMap<>();

    static
    {
        define(NODE_NAME, "", "name of this host as its peers know it (default: the host name)");
        define(LISTEN, "0.0.0.0:" + DEFAULT_PORT, "address:port on which peers connect");
        define(CONTROL_SOCKET, "/run/blockmover/control.sock", "Unix socket of the control API (mode 0660)");
        define(CONTROL_GROUP, "", "group allowed to use the control socket besides root and the daemon's user");
        define(STATE_DIR, "/var/lib/blockmover", "persistent state: jobs, bitmaps");
        define(COUNTERS_FILE, "/run/blockmover/counters.dat", "memory-mapped counters read by 'blockmover stat'");
        define(CHUNK_LENGTH, "1m", "unit of bulk copy and of dirty tracking, a multiple of 4k");
        define(SESSION_SLOTS, "32", "chunks in flight per session (also the credits a receiver grants)");
        define(SLAB_SLOTS, "128", "slots in the off-heap slab; each session leases session.slots of them");
        define(PEER_TIMEOUT, "10s", "a peer silent this long is considered gone");
        define(HEARTBEAT_INTERVAL, "1s", "an idle connection sends a heartbeat this often");
        define(ACTIVITY_REGIONS, "16384", "regions a source group's activity log keeps hot before it shrinks: " +
            "about what a crash of the source host resends (regions of chunk.length)");
        define(ACK_TIMEOUT, "30s", "a sync group's partner that acknowledges no record this long, though alive, is " +
            "dropped: writes go on without it (degraded) instead of waiting");
        define(CONNECT_TIMEOUT, "5s", "time allowed to connect and authenticate to a peer");
        define(RECONNECT_MAX_INTERVAL, "10s", "longest wait between reconnection attempts of a job");
        define(BITMAP_FORCE_INTERVAL, "1s", "how often dirty bitmaps are forced to disk");
        define(DIGEST_BATCH, "256", "regions per checksum request in seeded copy and verify");
        define(VERIFY_ROUNDS, "3", "verify passes (each resending mismatches) before a job fails");
        define(FLUSH_BYTES, "256m", "a destination forces its volume after this many bytes written (a group's " +
            "destination: or a quarter of its log, if less)...");
        define(NBD_SOCKET, "/run/blockmover/nbd.sock", "Unix socket of the NBD server exposing source volumes " +
            "of groups (empty: none)");
        define(NBD_LISTEN, "", "address:port of the NBD server over TCP (empty: none; no authentication, so " +
            "loopback or a trusted network only)");
        define(NBD_WORKERS, "16", "requests in flight per NBD connection (each holds a chunk-sized buffer); also " +
            "the threads that run its FLUSH, TRIM, WRITE_ZEROES and FUA writes");
        define(GROUP_LOG_SIZE, "1g", "record log of a new group when 'group create' gives no --log-size");
        define(GROUP_LOG_UNCLAIMED_KEEP, "1m", "a destination deletes the log it wrote for a new group once the " +
            "source stopped asking for it this long: its create was cancelled or failed there (while a create " +
            "runs, the source asks four times a second)");
        define(FLUSH_INTERVAL, "200ms", "...or this long after the first unforced write, whichever comes first; a " +
            "group's destination also forces its log when the source asks (a client's FLUSH, the end of a sync, a " +
            "switch's drain, a verify's window, an RPO at half its target) and before a test failover's mount");
        define(METRICS_LISTEN, "", "loopback address:port of an HTTP endpoint serving /metrics in the Prometheus " +
            "format, e.g. 127.0.0.1:9477 (empty: none; loopback only, it has no authentication)");
        define(LOG_LEVEL, "INFO", "least severe log messages written: DEBUG, INFO, WARNING or ERROR");
    }

    private Configuration()
    {
    }

    private static void define(final String name, final String defaultValue, final String description)
    {
        DEFAULTS.put(name, new String[] {defaultValue, description});
    }

    /**
     * @return property name to {default, description}, in documentation order.
     */
    public static Map<String, String[]> defaults()
    {
        return DEFAULTS;
    }

    /**
     * @param name of a daemon-wide property (without prefix).
     * @return whether it is known.
     */
    public static boolean isKnown(final String name)
    {
        return DEFAULTS.containsKey(name);
    }
}
