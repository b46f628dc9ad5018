package io.blockmover.daemon;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * What a configuration reload (SIGHUP, {@code blockmover reload}, {@code systemctl reload}) may change without
 * dropping replication, and when each change takes effect. The new file is validated whole first: an invalid file
 * is refused with every problem, and nothing changes. Of a valid file, the settings in {@link #LIVE} are applied;
 * every other changed setting needs a restart: it keeps its running value and is named, so the operator knows.
 * Settings unknown to this class are restart-only by default, which is the safe side. No threads; pure.
 */
public final class ConfigReload
{
    /** Settings a reload applies, with when they take effect. Peer settings are matched by prefix. */
    static final Map<String, String> LIVE = new TreeMap<>();

    static
    {
        LIVE.put(Configuration.LOG_LEVEL, "now");
        LIVE.put(Configuration.BITMAP_FORCE_INTERVAL, "now");
        LIVE.put(Configuration.ACTIVITY_REGIONS, "now");
        LIVE.put(Configuration.PEER_TIMEOUT, "for the next connection");
        LIVE.put(Configuration.HEARTBEAT_INTERVAL, "for the next connection");
        LIVE.put(Configuration.CONNECT_TIMEOUT, "for the next connection attempt");
        LIVE.put(Configuration.RECONNECT_MAX_INTERVAL, "for the next reconnection");
        LIVE.put(Configuration.DIGEST_BATCH, "for the next copy session");
        LIVE.put(Configuration.VERIFY_ROUNDS, "for the next copy session");
        LIVE.put(Configuration.FLUSH_BYTES, "for the next inbound session");
        LIVE.put(Configuration.FLUSH_INTERVAL, "for the next inbound session");
        LIVE.put(Configuration.GROUP_LOG_SIZE, "for the next 'group create'");
        LIVE.put(Configuration.GROUP_LOG_UNCLAIMED_KEEP, "now");
    }

    private ConfigReload()
    {
    }

    /**
     * The outcome of a valid reload.
     *
     * @param context         the configuration to run with from now on: the new file's, except for restart-only
     *                        settings, which keep their running values.
     * @param applied         one line per applied change: name, old and new value, when it takes effect.
     * @param restartRequired one line per change that waits for a restart.
     * @param addedPeers      peers the new file adds.
     * @param removedPeers    peers the new file no longer has.
     */
    public record Result(Context context, List<String> applied, List<String> restartRequired,
        List<String> addedPeers, List<String> removedPeers)
    {
    }

    /**
     * Reads the running context's file again (with the same -D overrides) and works out what changes.
     *
     * @param running the context the daemon runs with.
     * @param system  system properties ({@code blockmover.*} still win over the file).
     * @return what to apply.
     * @throws io.blockmover.BlockmoverException CONFIG_INVALID listing every problem of the new file.
     */
    public static Result reload(final Context running, final Properties system)
    {
        final Context candidate = Context.conclude(running.configFile(), system);
        final Map<String, String> before = running.effective();
        final Map<String, String> after = candidate.effective();
        final TreeSet<String> names = new TreeSet<>(before.keySet());
        names.addAll(after.keySet());

        final Map<String, String> merged = new TreeMap<>(after);
        final List<String> applied = new ArrayList<>();
        final List<String> restart = new ArrayList<>();
        for (final String name : names)
        {
            final String old = before.get(name);
            final String now = after.get(name);
            if (Objects.equals(old, now))
            {
                continue;
            }
            final String change = name + ": " + (old == null ? "(unset)" : old) + " -> " +
                (now == null ? "(unset)" : now);
            final String when = whenApplied(name);
            if (when != null)
            {
                applied.add(change + ", " + when);
            }
            else
            {
                restart.add(change + " needs a restart (systemctl restart blockmoverd); " +
                    (old == null ? "still unset" : "still " + old) + " until then");
                if (old == null)
                {
                    merged.remove(name);
                }
                else
                {
                    merged.put(name, old);
                }
            }
        }
        final Context context = restart.isEmpty() ? candidate : Context.fromProperties(running.configFile(), merged);
        for (final PeerConfig peer : context.peers().values())
        {
            // A key rotated in place (same file, new bytes) shows in no property value: compare the keys.
            final PeerConfig old = running.peers().get(peer.name());
            if (old != null && !Arrays.equals(old.key(), peer.key()))
            {
                applied.add(Configuration.PEER_PREFIX + peer.name() + ".key: new key from " + peer.keyFile() +
                    ", for the next connection with that peer");
            }
        }
        final List<String> added = new ArrayList<>(context.peers().keySet());
        added.removeAll(running.peers().keySet());
        final List<String> removed = new ArrayList<>(running.peers().keySet());
        removed.removeAll(context.peers().keySet());
        return new Result(context, applied, restart, added, removed);
    }

    /**
     * @param name a property.
     * @return when a reload applies it, or null when only a restart does.
     */
    public static String whenApplied(final String name)
    {
        if (name.startsWith(Configuration.PEER_PREFIX) && !Configuration.isKnown(name))
        {
            return "for the next connection with that peer";
        }
        return LIVE.get(name);
    }
}
