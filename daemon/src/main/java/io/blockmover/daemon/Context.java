package io.blockmover.daemon;

import java.io.IOException;
import java.io.Reader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.daemon.Configuration.ACK_TIMEOUT;
import static io.blockmover.daemon.Configuration.ACTIVITY_REGIONS;
import static io.blockmover.daemon.Configuration.BITMAP_FORCE_INTERVAL;
import static io.blockmover.daemon.Configuration.CHUNK_LENGTH;
import static io.blockmover.daemon.Configuration.CONNECT_TIMEOUT;
import static io.blockmover.daemon.Configuration.CONTROL_GROUP;
import static io.blockmover.daemon.Configuration.CONTROL_SOCKET;
import static io.blockmover.daemon.Configuration.COUNTERS_FILE;
import static io.blockmover.daemon.Configuration.DIGEST_BATCH;
import static io.blockmover.daemon.Configuration.FLUSH_BYTES;
import static io.blockmover.daemon.Configuration.GROUP_LOG_SIZE;
import static io.blockmover.daemon.Configuration.GROUP_LOG_UNCLAIMED_KEEP;
import static io.blockmover.daemon.Configuration.NBD_LISTEN;
import static io.blockmover.daemon.Configuration.NBD_SOCKET;
import static io.blockmover.daemon.Configuration.NBD_WORKERS;
import static io.blockmover.daemon.Configuration.FLUSH_INTERVAL;
import static io.blockmover.daemon.Configuration.HEARTBEAT_INTERVAL;
import static io.blockmover.daemon.Configuration.LISTEN;
import static io.blockmover.daemon.Configuration.LOG_LEVEL;
import static io.blockmover.daemon.Configuration.NODE_NAME;
import static io.blockmover.daemon.Configuration.PEER_ADDRESS;
import static io.blockmover.daemon.Configuration.PEER_KEY_FILE;
import static io.blockmover.daemon.Configuration.PEER_MAX_RATE;
import static io.blockmover.daemon.Configuration.PEER_PREFIX;
import static io.blockmover.daemon.Configuration.PEER_TIMEOUT;
import static io.blockmover.daemon.Configuration.PEER_TRANSPORT;
import static io.blockmover.daemon.Configuration.PREFIX;
import static io.blockmover.daemon.Configuration.RECONNECT_MAX_INTERVAL;
import static io.blockmover.daemon.Configuration.SESSION_SLOTS;
import static io.blockmover.daemon.Configuration.SLAB_SLOTS;
import static io.blockmover.daemon.Configuration.STATE_DIR;
import static io.blockmover.daemon.Configuration.VERIFY_ROUNDS;

/**
 * The validated configuration of one daemon. {@link #conclude(Path, Properties)} reads the file, applies
 * {@code -Dblockmover.*} overrides and checks every value before any thread starts; every problem found is
 * reported at once, each naming the property and the fix. Immutable once concluded.
 */
public final class Context
{
    /** Peer and node names: what a DNS label allows, so they are safe in paths and logs. */
    public static final Pattern NAME = Pattern.compile("[a-z0-9][a-z0-9._-]{0,62}");

    private final Map<String, String> effective = new TreeMap<>();
    private final Map<String, PeerConfig> peers = new LinkedHashMap<>();
    private final Map<String, Long> peerMaxRates = new LinkedHashMap<>();

    private String nodeName;
    private InetSocketAddress listen;
    private Path controlSocket;
    private String controlGroup;
    private Path stateDir;
    private Path countersFile;
    private int chunkLength;
    private int sessionSlots;
    private int slabSlots;
    private long peerTimeoutNs;
    private long ackTimeoutNs;
    private int activityRegions;
    private long heartbeatIntervalNs;
    private long connectTimeoutNs;
    private long reconnectMaxIntervalNs;
    private long bitmapForceIntervalNs;
    private int digestBatch;
    private int verifyRounds;
    private long flushBytes;
    private Path nbdSocket;
    private InetSocketAddress nbdListen;
    private InetSocketAddress metricsListen;
    private int nbdWorkers;
    private long groupLogSize;
    private long unclaimedLogKeepNs;
    private final Map<String, Path> localExports = new TreeMap<>();
    private long flushIntervalNs;
    private System.Logger.Level logLevel;
    private Path configFile;

    private Context()
    {
    }

    /**
     * Reads and validates the configuration.
     *
     * @param configFile the properties file, or null for defaults only.
     * @param system     system properties (the {@code blockmover.}-prefixed ones override the file).
     * @return the validated context.
     * @throws BlockmoverException CONFIG_INVALID listing every problem.
     */
    public static Context conclude(final Path configFile, final Properties system)
    {
        final Map<String, String> raw = new TreeMap<>();
        if (configFile != null)
        {
            final Properties file = new Properties();
            try (Reader reader = Files.newBufferedReader(configFile, StandardCharsets.UTF_8))
            {
                file.load(reader);
            }
            catch (final IOException ex)
            {
                throw new BlockmoverException(ErrorCode.CONFIG_INVALID,
                    "cannot read configuration " + configFile + ": " + ex.getMessage());
            }
            for (final String name : file.stringPropertyNames())
            {
                raw.put(name.startsWith(PREFIX) ? name.substring(PREFIX.length()) : name,
                    file.getProperty(name).trim());
            }
        }
        for (final String name : system.stringPropertyNames())
        {
            if (name.startsWith(PREFIX) && !name.equals("blockmover.root") && !name.equals("blockmover.jar"))
            {
                raw.put(name.substring(PREFIX.length()), system.getProperty(name).trim());
            }
        }
        final Context ctx = new Context();
        ctx.configFile = configFile;
        ctx.resolve(raw);
        return ctx;
    }

    /**
     * A context from properties already resolved once (names without prefix), validated again; used by a reload
     * to keep the running value of a setting that only a restart can change.
     *
     * @param configFile the file the properties came from, or null.
     * @param properties name to value.
     * @return the validated context.
     * @throws BlockmoverException CONFIG_INVALID listing every problem.
     */
    static Context fromProperties(final Path configFile, final Map<String, String> properties)
    {
        final Context ctx = new Context();
        ctx.configFile = configFile;
        ctx.resolve(new TreeMap<>(properties));
        return ctx;
    }

    private void resolve(final Map<String, String> raw)
    {
        final List<String> problems = new ArrayList<>();
        for (final String name : raw.keySet())
        {
            if (!Configuration.isKnown(name) && !name.startsWith(PEER_PREFIX) &&
                !name.startsWith(Configuration.NBD_EXPORT_PREFIX))
            {
                problems.add("unknown property '" + name + "' (see blockmoverd --help for the list)");
            }
        }
        for (final Map.Entry<String, String[]> def : Configuration.defaults().entrySet())
        {
            effective.put(def.getKey(), raw.getOrDefault(def.getKey(), def.getValue()[0]));
        }

        nodeName = effective.get(NODE_NAME).isEmpty() ? hostName() : effective.get(NODE_NAME);
        effective.put(NODE_NAME, nodeName);
        if (!NAME.matcher(nodeName).matches())
        {
            problems.add(NODE_NAME + " '" + nodeName + "' must match " + NAME.pattern());
        }
        listen = address(LISTEN, effective.get(LISTEN), problems);
        controlSocket = Path.of(effective.get(CONTROL_SOCKET));
        if (controlSocket.toString().getBytes(StandardCharsets.UTF_8).length > 107)
        {
            problems.add(CONTROL_SOCKET + " path is longer than the 107 bytes a Unix socket allows");
        }
        controlGroup = effective.get(CONTROL_GROUP);
        stateDir = Path.of(effective.get(STATE_DIR));
        countersFile = Path.of(effective.get(COUNTERS_FILE));
        chunkLength = (int)Math.min(Integer.MAX_VALUE, size(CHUNK_LENGTH, problems));
        if (chunkLength % 4096 != 0 || chunkLength < 64 * 1024 || chunkLength > 64 * 1024 * 1024)
        {
            problems.add(CHUNK_LENGTH + " " + effective.get(CHUNK_LENGTH) +
                " must be a multiple of 4k between 64k and 64m");
        }
        sessionSlots = integer(SESSION_SLOTS, problems);
        if (Integer.bitCount(sessionSlots) != 1 || sessionSlots < 2 || sessionSlots > 1024)
        {
            problems.add(SESSION_SLOTS + " " + sessionSlots + " must be a power of two between 2 and 1024");
        }
        slabSlots = integer(SLAB_SLOTS, problems);
        if (slabSlots < sessionSlots)
        {
            problems.add(SLAB_SLOTS + " " + slabSlots + " must be at least " + SESSION_SLOTS + " (" +
                sessionSlots + ")");
        }
        else if ((long)slabSlots * chunkLength > Integer.MAX_VALUE)
        {
            problems.add(SLAB_SLOTS + " x " + CHUNK_LENGTH + " must stay under 2 GiB");
        }
        peerTimeoutNs = duration(PEER_TIMEOUT, problems);
        heartbeatIntervalNs = duration(HEARTBEAT_INTERVAL, problems);
        if (heartbeatIntervalNs * 2 > peerTimeoutNs)
        {
            problems.add(HEARTBEAT_INTERVAL + " must be at most half of " + PEER_TIMEOUT);
        }
        activityRegions = integer(ACTIVITY_REGIONS, problems);
        if (activityRegions < 1)
        {
            problems.add(ACTIVITY_REGIONS + " " + activityRegions + " must be at least 1");
        }
        ackTimeoutNs = duration(ACK_TIMEOUT, problems);
        if (ackTimeoutNs < heartbeatIntervalNs)
        {
            problems.add(ACK_TIMEOUT + " must be at least " + HEARTBEAT_INTERVAL);
        }
        connectTimeoutNs = duration(CONNECT_TIMEOUT, problems);
        reconnectMaxIntervalNs = duration(RECONNECT_MAX_INTERVAL, problems);
        bitmapForceIntervalNs = duration(BITMAP_FORCE_INTERVAL, problems);
        digestBatch = integer(DIGEST_BATCH, problems);
        if (digestBatch < 1 || digestBatch > 4096)
        {
            problems.add(DIGEST_BATCH + " " + digestBatch + " must be between 1 and 4096");
        }
        verifyRounds = integer(VERIFY_ROUNDS, problems);
        if (verifyRounds < 1)
        {
            problems.add(VERIFY_ROUNDS + " must be at least 1");
        }
        final String nbdSocketText = effective.get(NBD_SOCKET).trim();
        nbdSocket = nbdSocketText.isEmpty() ? null : Path.of(nbdSocketText);
        if (nbdSocket != null && nbdSocketText.getBytes(StandardCharsets.UTF_8).length > 107)
        {
            problems.add(NBD_SOCKET + " path is longer than the 107 bytes a Unix socket allows");
        }
        final String nbdListenText = effective.get(NBD_LISTEN).trim();
        nbdListen = nbdListenText.isEmpty() ? null : address(NBD_LISTEN, nbdListenText, problems);
        nbdWorkers = integer(NBD_WORKERS, problems);
        if (nbdWorkers < 1 || nbdWorkers > 64)
        {
            problems.add(NBD_WORKERS + " " + nbdWorkers + " is not in 1..64");
        }
        groupLogSize = size(GROUP_LOG_SIZE, problems);
        final int problemsBefore = problems.size();
        unclaimedLogKeepNs = duration(GROUP_LOG_UNCLAIMED_KEEP, problems);
        if (problems.size() == problemsBefore && unclaimedLogKeepNs < 1_000_000_000L)
        {
            problems.add(GROUP_LOG_UNCLAIMED_KEEP + " " + effective.get(GROUP_LOG_UNCLAIMED_KEEP) + " is below 1s: a " +
                "log could be deleted between two of the source's asks, and written again for ever");
        }
        for (final Map.Entry<String, String> entry : new TreeMap<>(raw).entrySet())
        {
            if (entry.getKey().startsWith(Configuration.NBD_EXPORT_PREFIX))
            {
                final String exportName = entry.getKey().substring(Configuration.NBD_EXPORT_PREFIX.length());
                if (!exportName.matches("[A-Za-z0-9][A-Za-z0-9_.-]*"))
                {
                    problems.add("property '" + entry.getKey() + "': an export name is letters, digits, '.', '_', '-'");
                }
                else
                {
                    localExports.put(exportName, Path.of(entry.getValue().trim()));
                    effective.put(entry.getKey(), entry.getValue().trim());
                }
            }
        }
        flushBytes = size(FLUSH_BYTES, problems);
        if (flushBytes < chunkLength || flushBytes > (1L << 40))
        {
            problems.add(FLUSH_BYTES + " " + effective.get(FLUSH_BYTES) + " must be at least one chunk");
        }
        flushIntervalNs = duration(FLUSH_INTERVAL, problems);
        final String metricsText = effective.get(Configuration.METRICS_LISTEN).trim();
        metricsListen = metricsText.isEmpty() ? null : address(Configuration.METRICS_LISTEN, metricsText, problems);
        if (metricsListen != null && !metricsListen.getAddress().isLoopbackAddress())
        {
            problems.add(Configuration.METRICS_LISTEN + " " + metricsText + " is not a loopback address: the " +
                "metrics endpoint has no authentication, so it listens on 127.0.0.1 or ::1 only (scrape through " +
                "node_exporter's textfile collector or a local proxy instead)");
            metricsListen = null;
        }
        try
        {
            logLevel = System.Logger.Level.valueOf(effective.get(LOG_LEVEL).toUpperCase(Locale.ROOT));
            effective.put(LOG_LEVEL, logLevel.getName());
        }
        catch (final IllegalArgumentException ex)
        {
            problems.add(LOG_LEVEL + " '" + effective.get(LOG_LEVEL) + "' must be DEBUG, INFO, WARNING or ERROR");
        }
        resolvePeers(raw, problems);

        if (!problems.isEmpty())
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID,
                "invalid configuration:\n  " + String.join("\n  ", problems));
        }
    }

    private void resolvePeers(final Map<String, String> raw, final List<String> problems)
    {
        final Map<String, Map<String, String>> byName = new TreeMap<>();
        for (final Map.Entry<String, String> entry : raw.entrySet())
        {
            if (!entry.getKey().startsWith(PEER_PREFIX) || Configuration.isKnown(entry.getKey()))
            {
                continue;
            }
            final String rest = entry.getKey().substring(PEER_PREFIX.length());
            final int dot = rest.indexOf('.');
            if (dot <= 0)
            {
                problems.add("property '" + entry.getKey() +
                    "' should be peer.NAME.address|key.file|transport|max.rate");
                continue;
            }
            byName.computeIfAbsent(rest.substring(0, dot), k -> new TreeMap<>())
                .put(rest.substring(dot + 1), entry.getValue());
        }
        for (final Map.Entry<String, Map<String, String>> peer : byName.entrySet())
        {
            final String name = peer.getKey();
            final Map<String, String> props = peer.getValue();
            final String where = PEER_PREFIX + name + ".";
            if (!NAME.matcher(name).matches())
            {
                problems.add("peer name '" + name + "' must match " + NAME.pattern());
                continue;
            }
            if (name.equals(nodeName))
            {
                problems.add("peer '" + name + "' has the name of this node");
            }
            for (final String key : props.keySet())
            {
                if (!Set.of(PEER_ADDRESS, PEER_KEY_FILE, PEER_TRANSPORT, PEER_MAX_RATE).contains(key))
                {
                    problems.add("unknown property '" + where + key + "'");
                }
            }
            final String address = props.get(PEER_ADDRESS);
            if (address == null)
            {
                problems.add(where + PEER_ADDRESS + " is missing (host:port of the peer's listener)");
                continue;
            }
            final InetSocketAddress socketAddress = address(where + PEER_ADDRESS, address, problems);
            final String keyFileName = props.get(PEER_KEY_FILE);
            if (keyFileName == null)
            {
                problems.add(where + PEER_KEY_FILE + " is missing (a file holding the shared key, mode 0600; " +
                    "make one with: head -c 32 /dev/urandom > FILE && chmod 600 FILE)");
                continue;
            }
            final Path keyFile = Path.of(keyFileName);
            final byte[] key = readKey(where + PEER_KEY_FILE, keyFile, problems);
            PeerConfig.TransportKind transport = PeerConfig.TransportKind.AUTO;
            final String transportName = props.getOrDefault(PEER_TRANSPORT, "auto");
            try
            {
                transport = PeerConfig.TransportKind.valueOf(transportName.toUpperCase(Locale.ROOT));
            }
            catch (final IllegalArgumentException ex)
            {
                problems.add(where + PEER_TRANSPORT + " '" + transportName + "' must be auto, tcp or rdma");
            }
            long maxRate = 0;
            try
            {
                maxRate = parseSize(props.getOrDefault(PEER_MAX_RATE, "0"));
            }
            catch (final NumberFormatException ex)
            {
                problems.add(where + PEER_MAX_RATE + " '" + props.get(PEER_MAX_RATE) + "' is not a rate in bytes " +
                    "per second (e.g. 200m; 0 = unlimited)");
            }
            peerMaxRates.put(name, maxRate);
            for (final Map.Entry<String, String> p : props.entrySet())
            {
                effective.put(where + p.getKey(), p.getValue());
            }
            if (socketAddress != null && key != null)
            {
                peers.put(name, new PeerConfig(name, socketAddress, keyFile, key, transport));
            }
        }
    }

    private static byte[] readKey(final String property, final Path keyFile, final List<String> problems)
    {
        try
        {
            final Set<PosixFilePermission> perms = Files.getPosixFilePermissions(keyFile);
            for (final PosixFilePermission p : perms)
            {
                if (p.name().startsWith("GROUP") || p.name().startsWith("OTHERS"))
                {
                    problems.add(property + " " + keyFile + " is readable by others: chmod 600 " + keyFile);
                    return null;
                }
            }
            byte[] key = Files.readAllBytes(keyFile);
            int end = key.length;
            while (end > 0 && (key[end - 1] == '\n' || key[end - 1] == '\r'))
            {
                end--;
            }
            key = Arrays.copyOf(key, end);
            if (key.length < 16)
            {
                problems.add(property + " " + keyFile + " holds " + key.length +
                    " bytes; a key needs at least 16 (head -c 32 /dev/urandom > " + keyFile + ")");
                return null;
            }
            return key;
        }
        catch (final IOException ex)
        {
            problems.add(property + " " + keyFile + " cannot be read: " + ex.getMessage());
            return null;
        }
    }

    private static String hostName()
    {
        try
        {
            return InetAddress.getLocalHost().getHostName().toLowerCase(Locale.ROOT).replaceAll("[^a-z0-9._-]", "-");
        }
        catch (final UnknownHostException ex)
        {
            return "localhost";
        }
    }

    private static InetSocketAddress address(final String name, final String value, final List<String> problems)
    {
        final int colon = value.lastIndexOf(':');
        if (colon <= 0)
        {
            problems.add(name + " '" + value + "' must be host:port");
            return null;
        }
        try
        {
            final int port = Integer.parseInt(value.substring(colon + 1));
            if (port <= 0 || port > 65535)
            {
                problems.add(name + " port " + port + " out of range 1..65535");
                return null;
            }
            String host = value.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]"))
            {
                host = host.substring(1, host.length() - 1);
            }
            return new InetSocketAddress(InetAddress.getByName(host), port);
        }
        catch (final NumberFormatException ex)
        {
            problems.add(name + " '" + value + "' has no numeric port");
        }
        catch (final UnknownHostException ex)
        {
            problems.add(name + " host in '" + value + "' does not resolve");
        }
        return null;
    }

    private long size(final String name, final List<String> problems)
    {
        try
        {
            return parseSize(effective.get(name));
        }
        catch (final NumberFormatException ex)
        {
            problems.add(name + " '" + effective.get(name) + "' is not a size (bytes, or with k/m/g)");
            return 0;
        }
    }

    private int integer(final String name, final List<String> problems)
    {
        try
        {
            return Integer.parseInt(effective.get(name));
        }
        catch (final NumberFormatException ex)
        {
            problems.add(name + " '" + effective.get(name) + "' is not an integer");
            return 0;
        }
    }

    private long duration(final String name, final List<String> problems)
    {
        try
        {
            final long ns = parseDurationNs(effective.get(name));
            if (ns <= 0)
            {
                problems.add(name + " must be positive");
            }
            return ns;
        }
        catch (final NumberFormatException ex)
        {
            problems.add(name + " '" + effective.get(name) + "' is not a duration (e.g. 500ms, 10s, 2m)");
            return 1;
        }
    }

    /**
     * @param text bytes, or a number with a k, m, g or t suffix (powers of 1024).
     * @return bytes.
     */
    public static long parseSize(final String text)
    {
        final String t = text.trim().toLowerCase(Locale.ROOT);
        if (t.isEmpty())
        {
            throw new NumberFormatException("empty size");
        }
        final char last = t.charAt(t.length() - 1);
        final int shift = switch (last)
        {
            case 'k' -> 10;
            case 'm' -> 20;
            case 'g' -> 30;
            case 't' -> 40;
            default -> 0;
        };
        final long value = Long.parseLong(shift == 0 ? t : t.substring(0, t.length() - 1));
        if (value < 0 || value > (Long.MAX_VALUE >> shift))
        {
            throw new NumberFormatException("size out of range: " + text);
        }
        return value << shift;
    }

    /**
     * @param text a number with a ns, us, ms, s or m suffix (seconds when none).
     * @return nanoseconds.
     */
    public static long parseDurationNs(final String text)
    {
        final String t = text.trim().toLowerCase(Locale.ROOT);
        final String[][] units = {{"ns", "1"}, {"us", "1000"}, {"ms", "1000000"}, {"s", "1000000000"},
            {"m", "60000000000"}};
        for (final String[] unit : units)
        {
            if (t.endsWith(unit[0]) && !(unit[0].equals("s") && (t.endsWith("ns") || t.endsWith("us") ||
                t.endsWith("ms"))))
            {
                return Long.parseLong(t.substring(0, t.length() - unit[0].length())) * Long.parseLong(unit[1]);
            }
        }
        return TimeUnit.SECONDS.toNanos(Long.parseLong(t));
    }

    /**
     * @return the effective configuration, property name to value, for printing.
     */
    public Map<String, String> effective()
    {
        return effective;
    }

    public String nodeName()
    {
        return nodeName;
    }

    public InetSocketAddress listen()
    {
        return listen;
    }

    public Path controlSocket()
    {
        return controlSocket;
    }

    public String controlGroup()
    {
        return controlGroup;
    }

    public Path stateDir()
    {
        return stateDir;
    }

    public Path countersFile()
    {
        return countersFile;
    }

    public int chunkLength()
    {
        return chunkLength;
    }

    public int sessionSlots()
    {
        return sessionSlots;
    }

    public int slabSlots()
    {
        return slabSlots;
    }

    public long peerTimeoutNs()
    {
        return peerTimeoutNs;
    }

    /**
     * @return how long a replication partner may leave every sent record unacknowledged before it is dropped.
     */
    /**
     * @return regions a source group's activity log keeps hot before a checkpoint shrinks it.
     */
    public int activityRegions()
    {
        return activityRegions;
    }

    public long ackTimeoutNs()
    {
        return ackTimeoutNs;
    }

    public long heartbeatIntervalNs()
    {
        return heartbeatIntervalNs;
    }

    public long connectTimeoutNs()
    {
        return connectTimeoutNs;
    }

    public long reconnectMaxIntervalNs()
    {
        return reconnectMaxIntervalNs;
    }

    public long bitmapForceIntervalNs()
    {
        return bitmapForceIntervalNs;
    }

    public int digestBatch()
    {
        return digestBatch;
    }

    public int verifyRounds()
    {
        return verifyRounds;
    }

    /**
     * @return the NBD server's Unix socket, or null for none.
     */
    public Path nbdSocket()
    {
        return nbdSocket;
    }

    /**
     * @return the NBD server's TCP address, or null for none.
     */
    public InetSocketAddress nbdListen()
    {
        return nbdListen;
    }

    /**
     * @return the loopback address of the metrics endpoint, or null for none.
     */
    public InetSocketAddress metricsListen()
    {
        return metricsListen;
    }

    public int nbdWorkers()
    {
        return nbdWorkers;
    }

    /**
     * @return volumes exported over NBD without replication (nbd.export.NAME = PATH), by export name.
     */
    public Map<String, Path> localExports()
    {
        return localExports;
    }

    public long groupLogSize()
    {
        return groupLogSize;
    }

    public long flushBytes()
    {
        return flushBytes;
    }

    public long flushIntervalNs()
    {
        return flushIntervalNs;
    }

    /**
     * @return how long a destination keeps a log written for a new group whose source stopped asking for it.
     */
    public long unclaimedLogKeepNs()
    {
        return unclaimedLogKeepNs;
    }

    /**
     * @param peer a configured peer's name.
     * @return its configured {@code peer.NAME.max.rate} in bytes per second; 0 = unlimited.
     */
    public long peerMaxRate(final String peer)
    {
        return peerMaxRates.getOrDefault(peer, 0L);
    }

    public Map<String, PeerConfig> peers()
    {
        return peers;
    }

    /**
     * @return least severe level logged.
     */
    public System.Logger.Level logLevel()
    {
        return logLevel;
    }

    /**
     * @return the configuration file read, or null when there was none (defaults and -D only).
     */
    public Path configFile()
    {
        return configFile;
    }
}
