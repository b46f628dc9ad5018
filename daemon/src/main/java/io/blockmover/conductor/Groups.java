package io.blockmover.conductor;

import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.regex.Pattern;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.frontend.nbd.ExportRegistry;
import io.blockmover.frontend.nbd.NbdServer;
import io.blockmover.frontend.nbd.VolumeExport;
import io.blockmover.io.Volume;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.group.DurableConsistency;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.GroupMode;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.group.SourceReport;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.transport.FrameConnection;

/**
 * Every replication group of this host, source or destination, the NBD server that exposes the source volumes,
 * and the group operations of the control API. Conductor thread only.
 */
final class Groups implements AutoCloseable
{
    /** How far a destination asked to switch has applied its log, in its BUSY refusal: "applied LSN N of M". */
    static final Pattern APPLIED = Pattern.compile("applied LSN (\\d+) of \\d+");
    /** A failover waits for the applier as long as it moves; this long without a record applied, it gives up. */
    private static final long FAILOVER_STALL_NS = TimeUnit.SECONDS.toNanos(30);

    private final Conductor conductor;
    private final GroupStore store;
    private final ExportRegistry exports = new ExportRegistry();
    private final NbdServer nbd;
    private boolean clientsStopped;
    private final Map<String, SourceGroupHandle> sources = new TreeMap<>();
    private final Map<String, DestinationGroupHandle> destinations = new TreeMap<>();
    private final List<SourceGroupHandle> pending = new ArrayList<>();
    private final LogPreparer logPreparer = new LogPreparer();
    // Destination groups whose log is being written, by name: the source's OPEN is refused (PREPARING) and
    // retried until it is.
    private final Map<String, LogPreparer.Preparation> preparingDestinations = new HashMap<>();
    private final List<SourceGroupHandle> pendingSnapshot = new ArrayList<>();
    private final List<Volume> localVolumes = new ArrayList<>();
    private final GroupVerifies verifies;
    private final List<SwitchRequest> switchRequests = new ArrayList<>();
    private final List<PendingFailover> failovers = new ArrayList<>();

    Groups(final Conductor conductor)
    {
        this.conductor = conductor;
        this.store = new GroupStore(conductor.ctx().stateDir());
        this.verifies = new GroupVerifies(conductor, store, sources, destinations);
        final Path socket = conductor.ctx().nbdSocket();
        if (socket != null || conductor.ctx().nbdListen() != null)
        {
            nbd = new NbdServer(exports, socket, conductor.ctx().nbdListen(), conductor.ctx().nbdWorkers(),
                conductor.ctx().chunkLength(), System.getLogger("blockmoverd"));
            nbd.start();
        }
        else
        {
            nbd = null;
        }
        for (final Map.Entry<String, Path> local : conductor.ctx().localExports().entrySet())
        {
            if (nbd == null)
            {
                throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "nbd.export." + local.getKey() + " needs " +
                    "nbd.socket or nbd.listen");
            }
            final Volume volume;
            try
            {
                volume = Volume.open(local.getValue(), true);
            }
            catch (final BlockmoverException ex)
            {
                close();
                throw new BlockmoverException(ex.code(), "nbd.export." + local.getKey() + ": " + ex.getMessage(), ex);
            }
            localVolumes.add(volume);
            exports.add(new VolumeExport(local.getKey(), volume, false));
            conductor.log("NBD export " + local.getKey() + " serves " + local.getValue() + " (not replicated)");
        }
        for (final String unfinished : store.removeUnfinished())
        {
            conductor.log("group " + unfinished + ": its create never completed; its files were removed");
        }
        for (final GroupConfig config : store.loadAll())
        {
            if (config.isSource())
            {
                final SourceGroupHandle handle = new SourceGroupHandle(conductor, store, config);
                sources.put(config.name, handle);
                try
                {
                    handle.open(false);
                    register(handle);
                    conductor.log("group " + config.name + " (source, " + config.mode.label() + ") opened");
                    handle.resumeLogResize(logPreparer, "before the daemon stopped");
                }
                catch (final BlockmoverException ex)
                {
                    handle.failed(ex.getMessage());
                    conductor.error("group " + config.name + " cannot open: " + ex.getMessage());
                }
            }
            else
            {
                final DestinationGroupHandle handle = new DestinationGroupHandle(conductor, store, config);
                destinations.put(config.name, handle);
                try
                {
                    handle.open();
                    conductor.log("group " + config.name + " (destination of " + config.peer + ") opened");
                }
                catch (final BlockmoverException ex)
                {
                    handle.failed(ex.getMessage());
                    conductor.error("group " + config.name + " cannot open: " + ex.getMessage());
                }
            }
        }
    }

    private void register(final SourceGroupHandle handle)
    {
        final SourceGroup group = handle.group();
        for (int i = 0; i < group.volumeCount(); i++)
        {
            exports.add(group.export(i));
        }
    }

    private void unregister(final SourceGroupHandle handle)
    {
        for (final GroupConfig.VolumePair pair : handle.config.volumes)
        {
            exports.remove(handle.config.name + "/" + pair.exportSuffix());
        }
    }

    String nbdUri(final String export)
    {
        if (nbd == null)
        {
            return null;
        }
        if (nbd.unixSocket() != null)
        {
            return "nbd+unix:///" + export + "?socket=" + nbd.unixSocket();
        }
        return "nbd://" + nbd.tcpAddress().getHostString() + ":" + nbd.tcpAddress().getPort() + "/" + export;
    }

    int doWork(final long nowNs)
    {
        int work = 0;
        // A pending group leaves the list from inside its own doWork (accepted or rejected): iterate a copy, kept
        // for reuse so the conductor's duty cycle does not allocate.
        pendingSnapshot.clear();
        pendingSnapshot.addAll(pending);
        for (final SourceGroupHandle handle : pendingSnapshot)
        {
            work += handle.doWork(nowNs);
        }
        for (final SourceGroupHandle handle : sources.values())
        {
            work += handle.doWork(nowNs);
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            work += handle.doWork(nowNs);
        }
        work += verifies.doWork(nowNs);
        // Backwards, so that a finished request can leave the list without an iterator.
        for (int i = switchRequests.size() - 1; i >= 0; i--)
        {
            final SwitchRequest request = switchRequests.get(i);
            if (request.doWork(nowNs, sources.containsKey(request.name()), destinations.get(request.name())))
            {
                switchRequests.remove(i);
                work++;
            }
        }
        for (int i = failovers.size() - 1; i >= 0; i--)
        {
            if (failovers.get(i).doWork(nowNs))
            {
                failovers.remove(i);
                work++;
            }
        }
        return work;
    }

    boolean isHandshaking()
    {
        for (final SourceGroupHandle handle : sources.values())
        {
            if (handle.isHandshaking())
            {
                return true;
            }
        }
        for (final SourceGroupHandle handle : pending)
        {
            if (handle.isHandshaking())
            {
                return true;
            }
        }
        return false;
    }

    void forceBitmaps()
    {
        for (final SourceGroupHandle handle : sources.values())
        {
            handle.forceBitmaps();
        }
    }

    void housekeeping()
    {
        for (final SourceGroupHandle handle : sources.values())
        {
            handle.reclaimLogSpace();
            handle.checkpointActivity();
            handle.checkHealth();
        }
        removeUnclaimedLogs(System.nanoTime());
    }

    /**
     * A log written here for a new group whose source stopped asking for it (its create was cancelled, failed or
     * its daemon died) would take its room until this daemon restarts: delete it once unclaimed for
     * group.log.unclaimed.keep. A source that comes back later gets a new one written.
     */
    private void removeUnclaimedLogs(final long nowNs)
    {
        final long keepNs = conductor.ctx().unclaimedLogKeepNs();
        final Iterator<Map.Entry<String, LogPreparer.Preparation>> entries =
            preparingDestinations.entrySet().iterator();
        while (entries.hasNext())
        {
            final Map.Entry<String, LogPreparer.Preparation> entry = entries.next();
            final LogPreparer.Preparation preparation = entry.getValue();
            if (preparation.isUnclaimed(nowNs, keepNs))
            {
                entries.remove();
                final String why = preparation.peer + ", which has not asked for it for " +
                    TimeUnit.NANOSECONDS.toSeconds(keepNs) + " s (its 'group create' was cancelled or failed " +
                    "there); it is written again if " + preparation.peer + " comes back";
                if (preparation.isDone())
                {
                    store.delete(entry.getKey());
                    conductor.log("group " + entry.getKey() + ": deleted the " + preparation.capacity + "-byte " +
                        "log written for " + why);
                }
                else
                {
                    // Still being written: stopped at its next MiB, and whatever it left goes once it has stopped.
                    preparation.cancel();
                    preparation.discardWhenDone(store.dir(entry.getKey()).resolve("log"));
                    conductor.log("group " + entry.getKey() + ": stopped writing the " + preparation.capacity +
                        "-byte log begun for " + why);
                }
            }
        }
    }

    /**
     * @return the status of every group, as 'blockmover group status --json' shows it.
     */
    List<Map<String, Object>> statuses()
    {
        return list();
    }

    /**
     * @return whether a request was a group operation (and was answered).
     */
    boolean onRequest(final ControlServer.Client client, final Object id, final String op,
        final Map<String, Object> args)
    {
        switch (op)
        {
            case "groups" -> client.reply(id, list());
            case "group-status" -> client.reply(id, status(name(args)));
            case "group-create" -> create(client, id, args);
            case "group-suspend" -> client.reply(id, suspend(name(args), true));
            case "group-resume" -> client.reply(id, suspend(name(args), false));
            case "group-delete" -> client.reply(id, Boolean.TRUE.equals(args.get("only_if_creating")) ?
                cancelInterruptedCreate(name(args)) : delete(name(args)));
            case "group-freeze" -> client.reply(id, freeze(name(args), true));
            case "group-thaw" -> client.reply(id, freeze(name(args), false));
            case "group-switch" -> switchRoles(client, id, name(args), Boolean.TRUE.equals(args.get("force")),
                Boolean.TRUE.equals(args.get("allow_inconsistent")));
            case "group-set" -> client.reply(id, set(name(args), args));
            case "group-verify", "group-verify-status", "group-verify-schedule" ->
                verifies.onRequest(client, id, op, args, name(args));
            case "group-test-mount" -> testFailover(name(args), true).testMount(exports, client, id);
            case "group-test-dismount" -> client.reply(id, testFailover(name(args), false).testDismount());
            default ->
            {
                return false;
            }
        }
        return true;
    }

    private static String name(final Map<String, Object> args)
    {
        final Object name = args.get("name");
        if (!(name instanceof String))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "missing argument 'name' (the group)");
        }
        return (String)name;
    }

    private List<Map<String, Object>> list()
    {
        final List<Map<String, Object>> all = new ArrayList<>();
        for (final SourceGroupHandle handle : sources.values())
        {
            all.add(handle.status());
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            all.add(destinationStatus(handle));
        }
        for (final SourceGroupHandle handle : pending)
        {
            all.add(handle.creatingStatus());
        }
        return all;
    }

    /**
     * A destination's status, with the failover waiting on it if there is one: otherwise only the requester's
     * progress line and the log said that this host was about to become the source.
     */
    private Map<String, Object> destinationStatus(final DestinationGroupHandle destination)
    {
        final Map<String, Object> status = destination.status();
        for (final PendingFailover failover : failovers)
        {
            if (failover.name.equals(destination.config.name))
            {
                final Map<String, Object> f = new LinkedHashMap<>();
                f.put("waiting_s", (conductor.clock().nanoTime() - failover.requestedNs) / 1e9);
                f.put("applied_lsn", destination.appliedLsn());
                f.put("held_lsn", destination.heldLsn());
                status.put("failover_pending", f);
            }
        }
        return status;
    }

    private Map<String, Object> status(final String name)
    {
        final SourceGroupHandle source = sources.get(name);
        if (source != null)
        {
            return source.status();
        }
        for (final SourceGroupHandle handle : pending)
        {
            if (handle.config.name.equals(name))
            {
                return handle.creatingStatus();
            }
        }
        final DestinationGroupHandle destination = destinations.get(name);
        if (destination != null)
        {
            return destinationStatus(destination);
        }
        throw noSuchGroup(name);
    }

    private BlockmoverException noSuchGroup(final String name)
    {
        final Set<String> names = new HashSet<>(sources.keySet());
        names.addAll(destinations.keySet());
        return new BlockmoverException(ErrorCode.NO_SUCH_GROUP, "no group '" + name + "' on " +
            conductor.ctx().nodeName() + (names.isEmpty() ? " (there are none: 'blockmover group create')" :
            " (groups: " + String.join(", ", new java.util.TreeSet<>(names)) + ")"));
    }

    @SuppressWarnings("unchecked")
    private void create(final ControlServer.Client client, final Object id, final Map<String, Object> args)
    {
        final String name = name(args);
        final String problem = GroupConfig.checkName(name);
        if (problem != null)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, problem);
        }
        if (exists(name))
        {
            throw new BlockmoverException(ErrorCode.GROUP_EXISTS, "group '" + name + "' already exists on " +
                conductor.ctx().nodeName() + ": choose another name or 'blockmover group delete " + name + "'");
        }
        final String peer = (String)args.get("peer");
        if (peer == null)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "missing --peer");
        }
        conductor.peerConfig(peer);
        final GroupMode mode = modeArg(args.getOrDefault("mode", "sync"));
        final boolean blockOnDisconnect = blockOnDisconnectArg(args.getOrDefault("on_disconnect", "continue"));
        final long logSize = logSizeArg(args.get("log_size") instanceof Number n ? n.longValue() :
            conductor.ctx().groupLogSize());
        final long verifyIntervalMs = args.get("verify_interval_ms") instanceof Number n ? n.longValue() : 0;
        final List<Object> volumeArgs = (List<Object>)args.get("volumes");
        if (volumeArgs == null || volumeArgs.isEmpty())
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "a group needs at least one --volume SOURCE=TARGET");
        }
        final List<GroupConfig.VolumePair> pairs = new ArrayList<>();
        final Set<String> suffixes = new HashSet<>();
        for (final Object o : volumeArgs)
        {
            final Map<String, Object> v = (Map<String, Object>)o;
            final String source = String.valueOf(v.get("source"));
            final String target = String.valueOf(v.get("target"));
            conductor.checkVolumeFree(Path.of(source));
            final long size;
            try (Volume volume = Volume.open(Path.of(source), false))
            {
                size = volume.size();
            }
            if (size % 4096 != 0)
            {
                throw new BlockmoverException(ErrorCode.MISALIGNED_SIZE, source + " is " + size + " bytes, not a " +
                    "multiple of 4096: a replicated volume must be (its NBD export has 4 KiB blocks)");
            }
            final GroupConfig.VolumePair pair = new GroupConfig.VolumePair(source, target, size);
            if (!suffixes.add(pair.exportSuffix()))
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "two volumes of group " + name + " end in '" +
                    pair.exportSuffix() + "': their NBD exports would clash");
            }
            pairs.add(pair);
        }
        final GroupConfig config = new GroupConfig(name, GroupConfig.ROLE_SOURCE, peer, mode,
            blockOnDisconnect, pairs, logSize, conductor.ctx().chunkLength(), System.currentTimeMillis());
        config.rpoTargetMs = rpoTargetMs(args);
        config.verifyIntervalMs = verifyIntervalMs;
        config.seeding = Boolean.TRUE.equals(args.get("seeded"));
        // Refused now if it cannot fit, before the partner is asked and begins its own.
        RecordLog.checkRoomFor(store.dir(name).resolve("log"), logSize);
        store.delete(name);
        store.forgetDeleted(name);
        final SourceGroupHandle handle = new SourceGroupHandle(conductor, store, config);
        // The log is written on the preparer's thread; the handle opens the group once it is (doWork), then
        // dials the partner, and the client hears when the partner accepts or refuses.
        handle.openOnceLogPrepared(logPreparer.prepare(store.dir(name).resolve("log"), logSize,
            conductor.ctx().chunkLength(), name, peer), client, id);
        pending.add(handle);
        conductor.log("group " + name + " created, writing its " + logSize + "-byte log before " + peer +
            " is asked to accept it");
    }

    /**
     * @param path a volume.
     * @return which group or local export of this host holds it, or null when none does.
     */
    Conductor.VolumeHolder holderOf(final Path path)
    {
        for (final List<SourceGroupHandle> handles : List.of(new ArrayList<>(sources.values()), pending))
        {
            for (final SourceGroupHandle handle : handles)
            {
                for (final GroupConfig.VolumePair pair : handle.config.volumes)
                {
                    if (Conductor.isSameVolume(path, pair.source))
                    {
                        return new Conductor.VolumeHolder("the source of group " + handle.config.name,
                            "'blockmover group delete " + handle.config.name + "' (on both hosts) frees it");
                    }
                }
            }
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            for (final GroupConfig.VolumePair pair : handle.config.volumes)
            {
                if (Conductor.isSameVolume(path, pair.target))
                {
                    return new Conductor.VolumeHolder("a destination of group " + handle.config.name +
                        ", replicated from " + handle.config.peer, "'blockmover group delete " + handle.config.name +
                        "' (on both hosts) frees it");
                }
            }
        }
        for (final Map.Entry<String, Path> local : conductor.ctx().localExports().entrySet())
        {
            if (Conductor.isSameVolume(path, local.getValue().toString()))
            {
                return new Conductor.VolumeHolder("the local NBD export " + local.getKey(), "removing nbd.export." +
                    local.getKey() + " from the configuration and restarting the daemon frees it");
            }
        }
        return null;
    }

    /**
     * Opens one of an existing group's volumes. One that is gone was renamed, or its disk detached: the advice
     * for a new volume (create it) would be wrong, and dangerous, for a volume that holds the group's data.
     *
     * @param path  the volume.
     * @param after what brings the group back once the volume is.
     */
    static Volume openVolume(final String path, final String after)
    {
        try
        {
            return Volume.open(Path.of(path), true);
        }
        catch (final BlockmoverException ex)
        {
            if (ex.code() != ErrorCode.NOT_FOUND)
            {
                throw ex;
            }
            throw new BlockmoverException(ErrorCode.NOT_FOUND, "volume " + path + " is gone (renamed? its disk " +
                "detached?): put it back, " + after, ex);
        }
    }

    private static long rpoTargetMs(final Map<String, Object> args)
    {
        final Object raw = args.get("rpo_target_ms");
        if (raw == null)
        {
            return 0;
        }
        if (!(raw instanceof Number n) || n.longValue() < 0 || n.longValue() > 86_400_000L)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--rpo-target must be between 0 (none) and 24h, " +
                "not " + raw);
        }
        return n.longValue();
    }

    /**
     * Changes the settings of a source group that can change while it runs (today: its RPO target).
     */
    private Map<String, Object> set(final String name, final Map<String, Object> args)
    {
        final SourceGroupHandle handle = sources.get(name);
        if (handle == null)
        {
            if (destinations.containsKey(name))
            {
                final String peer = destinations.get(name).config.peer;
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is a destination here: " +
                    (args.containsKey("log_size") ? "a destination's log follows its source's size; set it on " +
                    peer + ", the source, and this host's log follows" :
                    "change its settings on its source, " + peer));
            }
            throw noSuchGroup(name);
        }
        if (!args.containsKey("rpo_target_ms") && !args.containsKey("mode") && !args.containsKey("on_disconnect") &&
            !args.containsKey("log_size"))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "nothing to set: give --rpo-target, --mode, " +
                "--on-disconnect or --log-size");
        }
        if (args.containsKey("log_size") && !(args.get("log_size") instanceof Number))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "log_size must be a number of bytes");
        }
        final long logSize = args.containsKey("log_size") ? logSizeArg(((Number)args.get("log_size")).longValue()) :
            handle.config.logSize;
        final boolean block = args.containsKey("on_disconnect") ? blockOnDisconnectArg(args.get("on_disconnect")) :
            handle.config.blockOnDisconnect;
        final GroupMode mode = args.containsKey("mode") ? modeArg(args.get("mode")) : handle.config.mode;
        if (mode != handle.config.mode && handle.isSwitching())
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is switching roles with " +
                handle.config.peer + ": change its mode once the switch is done");
        }
        // First: what it refuses (a resize under way, a closed group) leaves the other settings as they were.
        final boolean onlyLogSize = !args.containsKey("rpo_target_ms") && !args.containsKey("mode") &&
            !args.containsKey("on_disconnect");
        if (args.containsKey("log_size") && (onlyLogSize || logSize != handle.config.logSize ||
            handle.isResizingLog()))
        {
            conductor.log("group " + name + ": resizing its log: " + handle.resizeLog(logSize, logPreparer));
        }
        if (args.containsKey("rpo_target_ms"))
        {
            handle.config.rpoTargetMs = rpoTargetMs(args);
            store.save(handle.config);
            handle.settingsChanged();
            conductor.log("group " + name + ": RPO target " + (handle.config.rpoTargetMs == 0 ? "removed" :
                "set to " + io.blockmover.replication.group.RpoTarget.format(handle.config.rpoTargetMs)));
        }
        if (block != handle.config.blockOnDisconnect)
        {
            handle.config.blockOnDisconnect = block;
            store.save(handle.config);
            handle.settingsChanged();
            handle.onDisconnectChanged();
            conductor.log("group " + name + ": on-disconnect " + handle.config.onDisconnectLabel() + (block ?
                ": a sync group's writes wait while " + handle.config.peer + " is away" : ": writes go on, tracked, " +
                "while " + handle.config.peer + " is away (those waiting now go on)"));
        }
        if (mode != handle.config.mode)
        {
            final GroupMode was = handle.config.mode;
            handle.config.mode = mode;
            store.save(handle.config);
            handle.modeChanged();
            conductor.log("group " + name + ": mode changed from " + was.label() + " to " + mode.label() + (mode ==
                GroupMode.SYNC ? ": writes wait for " + handle.config.peer + " again once it has caught up with " +
                "what it lacks" : ": writes no longer wait for " + handle.config.peer) + "; the session with it " +
                "starts over so that it takes the change");
        }
        return handle.status();
    }

    /** --log-size of group create and group set: a size a record log can have, for this daemon's regions. */
    private long logSizeArg(final long logSize)
    {
        final int regionLength = conductor.ctx().chunkLength();
        if (logSize < 16L * regionLength)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--log-size " + logSize + " is too small: at least " +
                16L * regionLength + " bytes (16 regions)");
        }
        try
        {
            RecordLog.checkGeometry(logSize, regionLength);
        }
        catch (final BlockmoverException ex)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--log-size " + logSize + ": " + ex.getMessage());
        }
        return logSize;
    }

    /** --mode of group create and group set. */
    private static GroupMode modeArg(final Object raw)
    {
        try
        {
            return GroupMode.parse(String.valueOf(raw));
        }
        catch (final IllegalArgumentException ex)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, ex.getMessage());
        }
    }

    /** --on-disconnect of group create and group set: whether it is block. */
    private static boolean blockOnDisconnectArg(final Object raw)
    {
        if (!"continue".equals(raw) && !"block".equals(raw))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--on-disconnect must be continue or block, not '" +
                raw + "'");
        }
        return "block".equals(raw);
    }

    private boolean exists(final String name)
    {
        if (sources.containsKey(name) || destinations.containsKey(name))
        {
            return true;
        }
        for (final SourceGroupHandle handle : pending)
        {
            if (handle.config.name.equals(name))
            {
                return true;
            }
        }
        return false;
    }

    void accepted(final SourceGroupHandle handle)
    {
        pending.remove(handle);
        sources.put(handle.config.name, handle);
        register(handle);
    }

    /**
     * A create refused, failed or deleted: gone from this host. Its caller answers the waiting 'group create' next,
     * so a directory that cannot be removed is logged here, not thrown: thrown, it left that command waiting for
     * ever.
     */
    void rejected(final SourceGroupHandle handle)
    {
        pending.remove(handle);
        handle.close();
        try
        {
            store.delete(handle.config.name);
        }
        catch (final BlockmoverException ex)
        {
            conductor.error("group " + handle.config.name + ": its directory was not removed after its create " +
                "ended: " + ex.getMessage());
        }
    }

    private Map<String, Object> suspend(final String name, final boolean suspend)
    {
        final SourceGroupHandle handle = sources.get(name);
        if (handle == null)
        {
            final DestinationGroupHandle destination = destinations.get(name);
            if (destination != null && !suspend && !destination.isOpen())
            {
                reopen(destination);
                return destination.status();
            }
            if (destination != null)
            {
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is a destination here: " +
                    "suspend or resume it on its source, " + destination.config.peer);
            }
            throw noSuchGroup(name);
        }
        if (suspend)
        {
            handle.suspend();
        }
        else
        {
            if (handle.group() == null && !handle.isPending())
            {
                reopen(handle);
            }
            handle.resume();
        }
        return handle.status();
    }

    /**
     * A source group that could not open at start (its volume gone, its disk detached) tries again: the operator
     * has put things right and says so with 'group resume'. Without this, only a restart of the daemon, and of
     * every other group's replication with it, brought it back.
     */
    private void reopen(final SourceGroupHandle handle)
    {
        final String name = handle.config.name;
        openAgain(name, () -> handle.open(false), handle::failed);
        register(handle);
        conductor.log("group " + name + " (source, " + handle.config.mode.label() + ") opened on resume");
        handle.resumeLogResize(logPreparer, "before the daemon stopped");
    }

    /**
     * A destination group that could not open at start (its volume gone, its disk detached) opens again when its
     * source next connects. With its source down, which is when a failover is wanted, that never comes: 'group
     * resume', 'group switch --force' and a test mount open it here once the operator has put things right.
     */
    private void reopen(final DestinationGroupHandle handle)
    {
        openAgain(handle.config.name, handle::open, handle::failed);
        conductor.log("group " + handle.config.name + " (destination of " + handle.config.peer + ") opened on " +
            "request");
    }

    /**
     * Opens a group that failed to open before; if it fails again, keeps the new reason and refuses with it.
     */
    private static void openAgain(final String name, final Runnable open, final Consumer<String> failed)
    {
        try
        {
            open.run();
        }
        catch (final BlockmoverException ex)
        {
            failed.accept(ex.getMessage());
            throw new BlockmoverException(ex.code(), "group " + name + " still cannot open: " + ex.getMessage());
        }
    }

    private Map<String, Object> freeze(final String name, final boolean freeze)
    {
        final SourceGroupHandle handle = sources.get(name);
        if (handle == null)
        {
            if (destinations.containsKey(name))
            {
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is a destination here: " +
                    "its volumes are never writable here, so there is nothing to " + (freeze ? "freeze" : "thaw"));
            }
            throw noSuchGroup(name);
        }
        handle.freeze(freeze);
        return handle.status();
    }

    Map<String, Object> statusOf(final String name)
    {
        return status(name);
    }

    private void switchRoles(final ControlServer.Client client, final Object id, final String name,
        final boolean force, final boolean allowInconsistent)
    {
        final SourceGroupHandle source = sources.get(name);
        if (source != null)
        {
            if (force)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "group " + name + " is the source here: " +
                    "--force is for a failover on the destination; here run 'blockmover group switch " + name + "'");
            }
            source.requestSwitch(client, id, conductor.clock().nanoTime());
            return;
        }
        final DestinationGroupHandle destination = destinations.get(name);
        if (destination == null)
        {
            throw noSuchGroup(name);
        }
        if (!force && destination.isReceiving())
        {
            // A planned switch asked for here: the source drives it.
            switchRequests.add(new SwitchRequest(conductor, name, destination.config.peer, client, id,
                conductor.clock().nanoTime()));
            return;
        }
        if (!force)
        {
            // Asked here, a planned switch goes through the source's session to us, and there is none right now.
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is a destination here and " +
                "its source, " + destination.config.peer + ", is not sending to it right now (" +
                destination.state().label() + "): if " + destination.config.peer + " is up, it reconnects by " +
                "itself, so try again once 'blockmover group status " + name + "' says receiving, or run " +
                "'blockmover group switch " + name + "' there; add --force here for a failover if " +
                destination.config.peer + " is lost (writes it acknowledged but did not send are then lost, and " +
                "it must rejoin as a destination)");
        }
        if (destination.isReceiving())
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is receiving from " +
                destination.config.peer + " right now: the source is alive, so switch there without --force");
        }
        if (!destination.isOpen())
        {
            reopen(destination); // Then its applier applies what the log holds, and the failover waits for that.
        }
        // The applier applies only what is durable in the log, and the session that forced it is gone.
        destination.forceLog();
        if (!destination.isApplied())
        {
            // Answered once the applier is through (doWork): the volumes must hold all the log holds before they are
            // exported. It used to answer BUSY here, which a person at a terminal in a disaster had to retry.
            conductor.log("group " + name + ": failover waits for the log to be applied (LSN " +
                destination.appliedLsn() + " of " + destination.heldLsn() + ")");
            failovers.add(new PendingFailover(client, id, name, allowInconsistent, destination.appliedLsn(),
                conductor.clock().nanoTime()));
            return;
        }
        failOver(client, id, destination, allowInconsistent);
    }

    /**
     * The failover itself, once the destination has applied everything its log holds.
     */
    private void failOver(final ControlServer.Client client, final Object id,
        final DestinationGroupHandle destination, final boolean allowInconsistent)
    {
        final String name = destination.config.name;
        final boolean consistent = destination.isConsistent();
        if (!consistent && !allowInconsistent)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is inconsistent here: its " +
                "initial sync or a resync from " + destination.config.peer + " did not finish, so its volumes may " +
                "mix old and new blocks and a file system on them may not mount. Bring " + destination.config.peer +
                " back and let it finish, or, to take over anyway and check the data yourself, add " +
                "--allow-inconsistent");
        }
        final long lsn = destination.heldLsn();
        final Map<String, Object> report = destination.sourceReport();
        becomeSource(destination, swap(destination.config.volumes), true);
        if (!consistent)
        {
            conductor.error("group " + name + ": failover to INCONSISTENT volumes (--allow-inconsistent); check " +
                "the data before use");
        }
        final String lost = lostAtFailover(destination.config.peer, destination.config.mode, lsn, report);
        conductor.log("group " + name + ": FAILOVER, this host is now the source (LSN " + lsn + "); " + lost + "; " +
            destination.config.peer + " must rejoin as a destination ('blockmover group delete " + name + "' there)");
        final Map<String, Object> answer = new LinkedHashMap<>(status(name));
        final Map<String, Object> failover = new LinkedHashMap<>();
        failover.put("lsn", lsn);
        failover.put("source_report", report);
        failover.put("lost", lost);
        answer.put("failover", failover);
        client.reply(id, answer);
    }

    /**
     * What a failover at {@code lsn} leaves behind, as far as this host can tell: what the lost source last said
     * about how far ahead it was. It may have taken more writes after that report.
     */
    static String lostAtFailover(final String peer, final GroupMode mode, final long lsn,
        final Map<String, Object> report)
    {
        if (report == null)
        {
            return peer + " said nothing about how far ahead it was since this daemon started, so what it held " +
                "beyond LSN " + lsn + " is unknown";
        }
        final long behind = ((Number)report.get("records_behind")).longValue();
        final long dirty = ((Number)report.get("dirty_regions")).longValue();
        final String when = peer + " last reported " +
            io.blockmover.cli.Format.ago(((Number)report.get("seconds_ago")).doubleValue()) + " before the failover";
        if (behind == 0 && dirty == 0)
        {
            return when + ": this host held everything it had logged (LSN " + report.get("lsn") + "), so nothing " +
                "is lost unless it took writes after that";
        }
        return String.format(Locale.ROOT, "%s: it had logged through LSN %d, %d records more than this host " +
            "holds%s (by its count %s not yet durable here, the oldest write %.1f s old): those writes are lost, " +
            "and any it took after that%s", when, ((Number)report.get("lsn")).longValue(), behind,
            dirty > 0 ? ", and had " + dirty + " regions to resync" : "",
            io.blockmover.cli.Format.bytes(((Number)report.get("rpo_bytes")).longValue()),
            ((Number)report.get("rpo_seconds")).doubleValue(),
            mode == GroupMode.SYNC && dirty == 0 ?
                ", though as a sync source it had acknowledged none of them to a client" : "");
    }

    /**
     * @return the destination of a test failover's mount or dismount, opened for a mount.
     */
    private DestinationGroupHandle testFailover(final String name, final boolean mount)
    {
        final DestinationGroupHandle destination = destinations.get(name);
        if (destination == null)
        {
            if (sources.containsKey(name))
            {
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is the source here: a " +
                    "test failover mounts the destination's copy; run 'blockmover group test-failover " +
                    (mount ? "mount " : "dismount ") + name + "' on its destination, " + sources.get(name).config.peer);
            }
            throw noSuchGroup(name);
        }
        if (mount && !destination.isOpen())
        {
            reopen(destination);
        }
        return destination;
    }

    private static List<GroupConfig.VolumePair> swap(final List<GroupConfig.VolumePair> pairs)
    {
        final List<GroupConfig.VolumePair> swapped = new ArrayList<>();
        for (final GroupConfig.VolumePair pair : pairs)
        {
            swapped.add(new GroupConfig.VolumePair(pair.target, pair.source, pair.size));
        }
        return swapped;
    }

    /**
     * Turns a destination group into a source: same log (its LSNs continue), volumes now exported.
     *
     * @param failover whether the old source is lost: then every region is resent to whoever rejoins.
     */
    private void becomeSource(final DestinationGroupHandle destination, final List<GroupConfig.VolumePair> pairs,
        final boolean failover)
    {
        final GroupConfig old = destination.config;
        final long following = destination.followingLogSize();
        for (final GroupConfig.VolumePair pair : pairs)
        {
            if (pair.source == null || "null".equals(pair.source))
            {
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + old.name + " does not know the " +
                    "source's volume paths (created by an older blockmoverd): delete and recreate it");
            }
        }
        destinations.remove(old.name);
        destination.close();
        try
        {
            // What the old source said is history once this host is the source: as a destination again, it hears
            // afresh.
            java.nio.file.Files.deleteIfExists(store.dir(old.name).resolve(SourceReport.FILE_NAME));
        }
        catch (final java.io.IOException ex)
        {
            conductor.log("group " + old.name + ": cannot remove " + SourceReport.FILE_NAME + ": " + ex.getMessage());
        }
        final GroupConfig config = new GroupConfig(old.name, GroupConfig.ROLE_SOURCE, old.peer, old.mode,
            old.blockOnDisconnect, pairs, old.logSize, old.regionLength, old.createdMs);
        config.initialSyncDone = !failover;
        config.rpoTargetMs = old.rpoTargetMs;
        config.verifyIntervalMs = old.verifyIntervalMs; // kept for when the role comes back
        // A resize this host's log was following goes on here: the size the admin set outlives the switch.
        config.logResizeTo = following;
        SourceGroupHandle.createBitmaps(store.dir(old.name), config, failover);
        store.save(config);
        final SourceGroupHandle handle = new SourceGroupHandle(conductor, store, config);
        sources.put(config.name, handle);
        try
        {
            handle.open(false);
            register(handle);
        }
        catch (final BlockmoverException ex)
        {
            handle.failed(ex.getMessage());
            throw ex;
        }
        handle.resumeLogResize(logPreparer, "by " + old.peer + " while it was the source (this host's log was " +
            "following it)");
    }

    /**
     * The partner accepted a planned switch: this source becomes its destination.
     */
    void switchedToDestination(final SourceGroupHandle source)
    {
        final GroupConfig old = source.config;
        unregister(source);
        sources.remove(old.name);
        source.close();
        final GroupConfig config = new GroupConfig(old.name, GroupConfig.ROLE_DESTINATION, old.peer, old.mode,
            old.blockOnDisconnect, swap(old.volumes), old.logSize, old.regionLength, old.createdMs);
        config.initialSyncDone = true;
        config.rpoTargetMs = old.rpoTargetMs;
        config.verifyIntervalMs = old.verifyIntervalMs; // kept for when the role comes back
        store.save(config);
        // The partner holds every write this source made: the volumes are the consistent image it starts from.
        new DurableConsistency(store.dir(config.name)).markClean(0);
        final DestinationGroupHandle handle = new DestinationGroupHandle(conductor, store, config);
        destinations.put(config.name, handle);
        try
        {
            handle.open();
        }
        catch (final BlockmoverException ex)
        {
            handle.failed(ex.getMessage());
            conductor.error("group " + old.name + " cannot open as a destination after the switch: " + ex.getMessage());
        }
    }

    GroupVerifies verifies()
    {
        return verifies;
    }

    /**
     * @return what writes logs on a thread of its own (new groups', resized ones) and closes replaced ones. Once
     *     the groups are loaded: their start-up gets it as an argument.
     */
    LogPreparer logPreparer()
    {
        return logPreparer;
    }

    /**
     * 'group delete' of a group whose create is still under way (its log being written, or its partner not yet
     * answering): the create is answered CANCELLED and stops, its log too, and nothing of it is kept here. A log
     * the partner began for it is deleted there once unasked for group.log.unclaimed.keep.
     */
    private Map<String, Object> cancelCreate(final SourceGroupHandle creating, final boolean interrupted)
    {
        final String name = creating.config.name;
        creating.cancelCreate(interrupted ? "the 'group create " + name + "' was interrupted before " +
            creating.config.peer + " accepted the group" : "group " + name + " was deleted ('blockmover group " +
            "delete " + name + "') before " + creating.config.peer + " accepted it");
        rejected(creating);
        conductor.log("group " + name + (interrupted ? ": its 'group create' was interrupted (Ctrl-C)" :
            " deleted while being created") + ": its create is cancelled");
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("name", name);
        result.put("role", "source");
        result.put("deleted", true);
        return result;
    }

    /**
     * group-delete with only_if_creating, from a 'group create' interrupted (Ctrl-C): cancels that create if it is
     * still under way, and touches nothing else. The create may have been answered meanwhile (the interrupt and
     * the answer cross); a group that exists is then left as it is, never deleted by a Ctrl-C.
     *
     * @return deleted true when a create was cancelled; otherwise deleted false, and whether the group exists.
     */
    private Map<String, Object> cancelInterruptedCreate(final String name)
    {
        for (final SourceGroupHandle creating : pending)
        {
            if (creating.config.name.equals(name))
            {
                return cancelCreate(creating, true);
            }
        }
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("name", name);
        result.put("deleted", false);
        result.put("exists", sources.containsKey(name) || destinations.containsKey(name));
        return result;
    }

    private Map<String, Object> delete(final String name)
    {
        final SourceGroupHandle source = sources.remove(name);
        final DestinationGroupHandle destination = source == null ? destinations.remove(name) : null;
        if (source == null && destination == null)
        {
            for (final SourceGroupHandle creating : pending)
            {
                if (creating.config.name.equals(name))
                {
                    return cancelCreate(creating, false);
                }
            }
            throw noSuchGroup(name);
        }
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("name", name);
        if (source != null)
        {
            unregister(source);
            source.close();
            result.put("role", "source");
        }
        else
        {
            destination.close();
            store.rememberDeleted(destination.config);
            result.put("role", "destination");
        }
        verifies.forget(name);
        store.delete(name);
        result.put("deleted", true);
        conductor.log("group " + name + " deleted");
        return result;
    }

    /**
     * A group new here needs its record log written first, which takes seconds to minutes: it is written on the
     * preparer's thread, and the source's OPEN is refused with PREPARING (the source asks again) until it is. The
     * volumes are checked first, so a wrong target is refused before the log is written, not after.
     *
     * @throws BlockmoverException PREPARING while the log is being written; the preparer's error if it failed.
     */
    private void awaitPreparedLog(final DestinationGroupHandle handle, final String peer, final boolean probe)
    {
        final GroupConfig config = handle.config;
        LogPreparer.Preparation preparation = preparingDestinations.get(config.name);
        if (preparation != null && !preparation.isFor(config.logSize, config.regionLength))
        {
            // A source that gave up and came back with other settings: start over once the old one is done.
            if (!preparation.isDone())
            {
                throw preparing(config, peer, null);
            }
            preparingDestinations.remove(config.name);
            preparation = null;
        }
        if (preparation == null)
        {
            handle.checkVolumes();
            // Refused now, naming this host, if it cannot fit: not after the source's log is written.
            RecordLog.checkRoomFor(store.dir(config.name).resolve("log"), config.logSize);
            store.delete(config.name);
            preparation = logPreparer.prepare(store.dir(config.name).resolve("log"), config.logSize,
                config.regionLength, config.name, peer);
            preparingDestinations.put(config.name, preparation);
            conductor.log("group " + config.name + ": writing its " + config.logSize + "-byte log before accepting " +
                peer + " as its source");
            throw preparing(config, peer, preparation);
        }
        preparation.asked(System.nanoTime());
        if (!preparation.isDone())
        {
            throw preparing(config, peer, preparation);
        }
        try
        {
            preparation.check();
        }
        catch (final BlockmoverException ex)
        {
            preparingDestinations.remove(config.name);
            store.delete(config.name);
            throw ex;
        }
        if (probe)
        {
            // Kept for the source's OPEN once its own log is written.
            throw probeAnswer(config.name, config.logSize, peer);
        }
        preparingDestinations.remove(config.name);
    }

    /**
     * The answer to a source's probe (an OPEN sent while its own log is being written) that this host would accept:
     * PREPARING, which the source asks again after, with the log written in full, so that its progress line shows
     * it. No session is opened until the source's log is written too.
     */
    private BlockmoverException probeAnswer(final String name, final long logSize, final String peer)
    {
        return new BlockmoverException(ErrorCode.PREPARING, "group " + name + " is ready on " +
            conductor.ctx().nodeName() + ", its log " + LogPreparer.progressText(logSize, logSize) + ": it accepts " +
            peer + " as its source once " + peer + "'s log is written too");
    }

    /**
     * @param preparation of this group's log, which says how far it is; null while an older one finishes.
     */
    private BlockmoverException preparing(final GroupConfig config, final String peer,
        final LogPreparer.Preparation preparation)
    {
        return new BlockmoverException(ErrorCode.PREPARING, "writing the " + config.logSize + "-byte log of group " +
            config.name + " before accepting " + peer + " as its source" +
            (preparation != null ? " " + preparation.progress() : ""));
    }

    /**
     * A source opens a group here: create it as a destination if new, check it matches if not, and hand the
     * connection to the group's receiver.
     *
     * @return the OPENED reply.
     */
    @SuppressWarnings("unchecked")
    Map<String, Object> acceptSession(final String peer, final int sessionId, final Map<String, Object> open,
        final ControlChannel channel)
    {
        final String name = String.valueOf(open.get("group"));
        final String problem = GroupConfig.checkName(name);
        if (problem != null)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, problem);
        }
        if (Boolean.TRUE.equals(open.get("switch_request")))
        {
            return acceptSwitchRequest(peer, sessionId, name, channel);
        }
        if (sources.containsKey(name))
        {
            throw new BlockmoverException(ErrorCode.GROUP_EXISTS, "group " + name + " is a source on " +
                conductor.ctx().nodeName() + " (after a switch or a failover), so " + peer + " cannot be its source " +
                "too: if " + conductor.ctx().nodeName() + " should be the source, run 'blockmover group delete " +
                name + "' on " + peer + " and it rejoins as the destination (everything is resent)");
        }
        if (Boolean.TRUE.equals(open.get("switch")))
        {
            return acceptSwitch(peer, sessionId, name, open, channel);
        }
        // Sent by a source still writing a new group's log: checked as an OPEN is, never a session (probePartner).
        final boolean probe = Boolean.TRUE.equals(open.get("probe"));
        final List<GroupConfig.VolumePair> pairs = new ArrayList<>();
        for (final Object o : (List<Object>)open.get("volumes"))
        {
            final Map<String, Object> v = (Map<String, Object>)o;
            pairs.add(new GroupConfig.VolumePair((String)v.get("source"), String.valueOf(v.get("target")),
                ((Number)v.get("size")).longValue()));
        }
        final int regionLength = ((Number)open.get("region_length")).intValue();
        if (regionLength > conductor.ctx().chunkLength())
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "region length " + regionLength + " exceeds this " +
                "host's chunk.length " + conductor.ctx().chunkLength() + ": use the same chunk.length on both hosts");
        }
        DestinationGroupHandle handle = destinations.get(name);
        if (handle != null)
        {
            if (!handle.config.peer.equals(peer))
            {
                throw new BlockmoverException(ErrorCode.GROUP_EXISTS, "group " + name + " on " +
                    conductor.ctx().nodeName() + " replicates from " + handle.config.peer + ", not " + peer);
            }
            for (int i = 0; i < pairs.size(); i++)
            {
                if (i >= handle.config.volumes.size() ||
                    !handle.config.volumes.get(i).target.equals(pairs.get(i).target))
                {
                    throw new BlockmoverException(ErrorCode.GROUP_EXISTS, "group " + name + " on " +
                        conductor.ctx().nodeName() + " has other volumes: delete it there first");
                }
            }
            if (probe)
            {
                throw probeAnswer(name, handle.config.logSize, peer);
            }
            if (handle.isSwappingLog())
            {
                throw movingToNewLog(name);
            }
            if (!handle.isOpen())
            {
                handle.open();
            }
            handle.followLogSize(((Number)(open.get("log_resize_to") instanceof Number ? open.get("log_resize_to") :
                open.get("log_size"))).longValue());
            if (handle.config.adoptSettings(open))
            {
                store.save(handle.config);
            }
            final GroupMode mode = GroupMode.parse(String.valueOf(open.get("mode")));
            if (mode != handle.config.mode)
            {
                // 'group set --mode' on the source: this session's receiver forces as the new mode wants.
                conductor.log("group " + name + ": mode changed from " + handle.config.mode.label() + " to " +
                    mode.label() + " by " + peer);
                handle.config.mode = mode;
                store.save(handle.config);
            }
        }
        else
        {
            // The source group's creation time names it across hosts and role switches (older sources send none).
            final long createdMs = open.get("created_ms") instanceof Number n ? n.longValue() :
                System.currentTimeMillis();
            final long deletedMs = store.deletedMs(name, peer, createdMs);
            if (deletedMs >= 0)
            {
                throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " was deleted on " +
                    conductor.ctx().nodeName() + " at " + Instant.ofEpochMilli(deletedMs) + ": run 'blockmover " +
                    "group delete " + name + "' on " + peer + " too; to replicate it again, create it again there " +
                    "after that");
            }
            for (final GroupConfig.VolumePair pair : pairs)
            {
                conductor.checkVolumeFree(Path.of(pair.target));
            }
            final GroupConfig config = new GroupConfig(name, GroupConfig.ROLE_DESTINATION, peer,
                GroupMode.parse(String.valueOf(open.get("mode"))), false, pairs,
                ((Number)open.get("log_size")).longValue(), regionLength, createdMs);
            config.adoptSettings(open);
            handle = new DestinationGroupHandle(conductor, store, config);
            awaitPreparedLog(handle, peer, probe);
            try
            {
                handle.open();
            }
            catch (final BlockmoverException ex)
            {
                store.delete(name);
                throw ex;
            }
            store.save(config);
            store.forgetDeleted(name);
            destinations.put(name, handle);
            conductor.log("group " + name + " created as a destination of " + peer);
        }
        final Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("held_lsn", handle.forceHeld());
        // This host's log, which follows the source's size: the source shows it (partner_log_size), and why it
        // could not follow, if it could not.
        opened.put("log_size", handle.config.logSize);
        if (handle.logResizeError() != null)
        {
            opened.put("log_resize_error", handle.logResizeError());
        }
        final List<long[]> dropped = handle.takeDroppedRegions();
        if (dropped != null)
        {
            // The regions of records this side dropped from its log (one was damaged there): a source that no
            // longer holds them resends these regions, not every region.
            opened.put("dropped_regions", dropped);
        }
        // Features this destination offers the source; an older one sends none, and the source then refuses them.
        opened.put("verify", true);
        opened.put("settings", true);
        opened.put("progress", true);
        opened.put("zero_records", true);
        try
        {
            channel.sendJson(FrameType.OPENED, sessionId, opened);
        }
        catch (final java.io.IOException ex)
        {
            throw new BlockmoverException(ErrorCode.PEER_UNREACHABLE, "cannot answer " + peer + ": " + ex, ex);
        }
        final FrameConnection connection = channel.connection();
        handle.startSession(connection, sessionId, Boolean.TRUE.equals(open.get("resend")),
            Boolean.TRUE.equals(open.get("flush_hints")));
        return opened;
    }

    private BlockmoverException movingToNewLog(final String name)
    {
        return new BlockmoverException(ErrorCode.BUSY, "group " + name + " on " + conductor.ctx().nodeName() +
            " is moving to a new log of its source's size (milliseconds); ask again shortly");
    }

    /**
     * The destination asks this source for a planned switch: start it (or refuse, saying why) and acknowledge; the
     * switch itself then runs as if 'blockmover group switch' had been typed here.
     */
    private Map<String, Object> acceptSwitchRequest(final String peer, final int sessionId, final String name,
        final ControlChannel channel)
    {
        final SourceGroupHandle source = sources.get(name);
        if (source == null || !source.config.peer.equals(peer))
        {
            throw new BlockmoverException(ErrorCode.NO_SUCH_GROUP, "no source group " + name + " replicating to " +
                peer + " on " + conductor.ctx().nodeName());
        }
        source.requestSwitch(null, null, conductor.clock().nanoTime());
        final Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("switching", true);
        try
        {
            channel.sendJson(FrameType.OPENED, sessionId, opened);
        }
        catch (final java.io.IOException ex)
        {
            conductor.log("group " + name + ": " + peer + " asked for a switch but did not hear the answer (" +
                ex.getMessage() + "); the switch goes on");
        }
        channel.connection().close();
        return opened;
    }

    /**
     * The source asks this destination to take over as source: everything must be here and applied.
     */
    @SuppressWarnings("unchecked")
    private Map<String, Object> acceptSwitch(final String peer, final int sessionId, final String name,
        final Map<String, Object> open, final ControlChannel channel)
    {
        final DestinationGroupHandle destination = destinations.get(name);
        if (destination == null || !destination.config.peer.equals(peer) || !destination.isOpen())
        {
            throw new BlockmoverException(ErrorCode.NO_SUCH_GROUP, "no destination group " + name + " of " + peer +
                " on " + conductor.ctx().nodeName());
        }
        if (destination.isSwappingLog())
        {
            throw movingToNewLog(name);
        }
        final long last = ((Number)open.get("last_lsn")).longValue();
        if (destination.heldLsn() != last)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, conductor.ctx().nodeName() + " holds LSN " +
                destination.heldLsn() + " of group " + name + ", the source is at " + last + ": not in sync");
        }
        if (!destination.isApplied())
        {
            throw new BlockmoverException(ErrorCode.BUSY, "still applying the log: applied LSN " +
                destination.appliedLsn() + " of " + destination.heldLsn());
        }
        final List<GroupConfig.VolumePair> pairs = new ArrayList<>();
        for (final Object o : (List<Object>)open.get("volumes"))
        {
            final Map<String, Object> v = (Map<String, Object>)o;
            pairs.add(new GroupConfig.VolumePair((String)v.get("target"), (String)v.get("source"),
                ((Number)v.get("size")).longValue()));
        }
        destination.config.adoptSettings(open);
        becomeSource(destination, pairs, false);
        conductor.log("group " + name + " switched: this host is now its source (LSN " + last + ")");
        final Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("switched", true);
        try
        {
            channel.sendJson(FrameType.OPENED, sessionId, opened);
        }
        catch (final java.io.IOException ex)
        {
            conductor.log("group " + name + ": the old source did not hear the switch (" + ex.getMessage() + "); it " +
                "stays a source until deleted there");
        }
        channel.connection().close();
        return opened;
    }

    List<Map<String, Object>> summary()
    {
        final List<Map<String, Object>> list = new ArrayList<>();
        for (final SourceGroupHandle handle : sources.values())
        {
            list.add(Map.of("name", handle.config.name, "role", "source", "state", handle.state().label()));
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            list.add(Map.of("name", handle.config.name, "role", "destination", "state", handle.state().label()));
        }
        return list;
    }

    /**
     * @return peer name to a group that replicates with it: a configuration reload must not remove such a peer.
     */
    Map<String, String> peersInUse()
    {
        final Map<String, String> inUse = new TreeMap<>();
        for (final SourceGroupHandle handle : sources.values())
        {
            inUse.put(handle.config.peer, "group " + handle.config.name);
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            inUse.put(handle.config.peer, "group " + handle.config.name);
        }
        return inUse;
    }

    List<Map<String, Object>> localExports()
    {
        final List<Map<String, Object>> list = new ArrayList<>();
        for (final Map.Entry<String, Path> local : conductor.ctx().localExports().entrySet())
        {
            list.add(Map.of("name", local.getKey(), "path", local.getValue().toString(), "nbd_uri",
                nbdUri(local.getKey())));
        }
        return list;
    }

    String nbdSocket()
    {
        return nbd == null || nbd.unixSocket() == null ? null : nbd.unixSocket().toString();
    }

    /**
     * Ends every NBD client's session and waits for the requests under way: after it, no write reaches a group, so
     * the groups' figures are final (what the conductor publishes last, for 'blockmover stat' of a stopped daemon).
     * Part of {@link #close}; safe to call before it.
     */
    void stopClients()
    {
        if (nbd != null && !clientsStopped)
        {
            clientsStopped = true;
            nbd.close();
        }
    }

    /**
     * A failover ('group switch --force') waiting for the destination's applier to apply what its log holds: a log
     * of gigabytes takes a while after a restart. Answered once it has, with the failover done, or with why not: the
     * group changed meanwhile, or the applier moved no further for {@link #FAILOVER_STALL_NS}. Conductor thread.
     */
    private final class PendingFailover
    {
        private final ControlServer.Client client;
        private final Object id;
        private final String name;
        private final boolean allowInconsistent;
        private final long requestedNs;
        private long appliedLsn;
        private long deadlineNs;

        PendingFailover(final ControlServer.Client client, final Object id, final String name,
            final boolean allowInconsistent, final long appliedLsn, final long nowNs)
        {
            this.client = client;
            this.id = id;
            this.name = name;
            this.allowInconsistent = allowInconsistent;
            this.appliedLsn = appliedLsn;
            this.requestedNs = nowNs;
            this.deadlineNs = nowNs + FAILOVER_STALL_NS;
        }

        /**
         * @return whether the request is answered.
         */
        boolean doWork(final long nowNs)
        {
            final DestinationGroupHandle destination = destinations.get(name);
            try
            {
                if (destination == null || !destination.isOpen())
                {
                    throw new BlockmoverException(ErrorCode.INVALID_STATE, "failover not done: group " + name +
                        (destination == null ? " is no longer a destination here (deleted, or another request " +
                        "made this host its source): see 'blockmover group status " + name + "'" :
                        " closed while it applied its log: see 'blockmover group status " + name + "'"));
                }
                if (destination.isReceiving())
                {
                    throw new BlockmoverException(ErrorCode.INVALID_STATE, "failover not done: " +
                        destination.config.peer + " reconnected while group " + name + " applied its log, so the " +
                        "source is alive: switch there without --force");
                }
                if (destination.isApplied())
                {
                    failOver(client, id, destination, allowInconsistent);
                    return true;
                }
                if (destination.appliedLsn() > appliedLsn)
                {
                    appliedLsn = destination.appliedLsn();
                    deadlineNs = nowNs + FAILOVER_STALL_NS;
                }
                else if (nowNs > deadlineNs)
                {
                    throw new BlockmoverException(ErrorCode.BUSY, "failover not done: group " + name + " applied " +
                        "nothing of its log for " + TimeUnit.NANOSECONDS.toSeconds(FAILOVER_STALL_NS) + " s " +
                        "(applied LSN " + appliedLsn + " of " + destination.heldLsn() + "): a hung or failing " +
                        "volume? See 'blockmover group status " + name + "' and the daemon's log, then retry");
                }
                return false;
            }
            catch (final BlockmoverException ex)
            {
                conductor.log("group " + name + ": " + ex.getMessage());
                client.error(id, ex.code(), ex.getMessage());
                return true;
            }
            catch (final RuntimeException ex)
            {
                // As the request dispatcher answers a request that failed at once: a bug, not the conductor's end.
                conductor.error("group " + name + ": failover failed (a bug): " + ex);
                client.error(id, ErrorCode.INTERNAL, "internal error: " + ex);
                return true;
            }
        }
    }

    @Override
    public void close()
    {
        logPreparer.close();
        for (final SourceGroupHandle handle : pending)
        {
            handle.close();
        }
        for (final SwitchRequest request : switchRequests)
        {
            request.close();
        }
        stopClients();
        for (final SourceGroupHandle handle : sources.values())
        {
            handle.close();
        }
        for (final DestinationGroupHandle handle : destinations.values())
        {
            handle.close();
        }
        for (final Volume volume : localVolumes)
        {
            volume.close();
        }
    }
}
