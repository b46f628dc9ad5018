package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.stream.Stream;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.frontend.nbd.ExportRegistry;
import io.blockmover.replication.group.DestinationGroup;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.snapshot.CopyOnWriteView;
import io.blockmover.replication.snapshot.GroupSnapshot;

/**
 * A test failover of a destination group (Storage Replica's Mount-SRDestination): one writable copy-on-write view
 * per volume, served as the NBD exports GROUP-test/SUFFIX while replication goes on underneath. Dismounting
 * throws the views' writes away. The views are frozen between two records once the applier has applied through
 * what this side held when the mount was asked for, its log forced first: what a failover at that moment would
 * give. Freezing at whatever was applied gave, on a partner with a long flush.interval, a view minutes behind
 * writes the source had acknowledged as written here (a sync write is acknowledged once it is in the log).
 * <p>
 * The views live in GROUP_STATE_DIR/test-mount/ and do not survive a restart of the daemon: the copy-before-write
 * store is not made durable (that would cost the applier a flush per grain), so at start-up a leftover directory
 * is removed ({@link #removeLeftover}) and the operator mounts again.
 * <p>
 * Conductor thread only.
 */
final class TestMount
{
    static final String DIR_NAME = "test-mount";
    static final String EXPORT_SUFFIX = "-test";

    /** A mount waiting for the applier gives up once it applied nothing for this long (as a failover does). */
    static final long STALL_NS = TimeUnit.SECONDS.toNanos(30);
    private static final long DISARM_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);

    private final GroupConfig config;
    private final DestinationGroup group;
    private final GroupSnapshot snapshot;
    private final ExportRegistry exports;
    private final Path dir;
    private final List<String> exportNames = new ArrayList<>();
    private final String node;
    private final long fromLsn;
    private final long requestedNs;
    private long progressLsn;
    private long stallDeadlineNs;
    private boolean mounted;
    private long lsn = -1;
    private long mountedAtMs;

    private TestMount(final GroupConfig config, final DestinationGroup group, final GroupSnapshot snapshot,
        final ExportRegistry exports, final Path dir, final String node, final long fromLsn, final long nowNs)
    {
        this.node = node;
        this.config = config;
        this.group = group;
        this.snapshot = snapshot;
        this.exports = exports;
        this.dir = dir;
        this.fromLsn = fromLsn;
        this.requestedNs = nowNs;
        this.progressLsn = group.appliedLsn();
        this.stallDeadlineNs = nowNs + STALL_NS;
    }

    /**
     * Starts a mount: creates the views and asks the applier to freeze them once it has applied through
     * {@code fromLsn}; {@link #tryFinish} serves them once it has.
     *
     * @param config   the group.
     * @param group    its open destination side.
     * @param groupDir its state directory.
     * @param exports  the NBD server's exports.
     * @param node     this host's name, for messages.
     * @param fromLsn  the LSN the views must hold at least: what this side held when asked, its log forced.
     * @param nowNs    now.
     * @return the mount, not yet served.
     */
    static TestMount begin(final GroupConfig config, final DestinationGroup group, final Path groupDir,
        final ExportRegistry exports, final String node, final long fromLsn, final long nowNs)
    {
        if (!group.isConsistent())
        {
            throw notConsistent(config, group, node);
        }
        final Path dir = groupDir.resolve(DIR_NAME);
        final CopyOnWriteView[] views = new CopyOnWriteView[group.volumeCount()];
        final GroupSnapshot snapshot;
        try
        {
            removeTree(dir);
            Files.createDirectories(dir);
            for (int i = 0; i < views.length; i++)
            {
                final GroupConfig.VolumePair pair = config.volumes.get(i);
                views[i] = new CopyOnWriteView(exportName(config, pair), group.volume(i), pair.size, dir,
                    "volume-" + i, CopyOnWriteView.DEFAULT_GRAIN_LENGTH);
            }
            snapshot = new GroupSnapshot(views);
        }
        catch (final IOException ex)
        {
            new GroupSnapshot(views).close();
            removeQuietly(dir);
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot create the test views of group " + config.name +
                " in " + dir + ": " + ex.getMessage(), ex);
        }
        // Freeze: the applier arms the views between two records, once through fromLsn; from then on it preserves
        // before it writes.
        group.requestHook(snapshot, fromLsn);
        return new TestMount(config, group, snapshot, exports, dir, node, fromLsn, nowNs);
    }

    /**
     * Serves the views once the applier has frozen them. Until then, gives up if it applies nothing for
     * {@link #STALL_NS}: a hung or failing volume, which 'group status' names.
     *
     * @param nowNs now.
     * @return whether the views are served now; false while the applier has not reached the LSN asked for.
     * @throws BlockmoverException when the mount cannot be made; it is abandoned then, its files removed.
     */
    boolean tryFinish(final long nowNs)
    {
        if (mounted)
        {
            return true;
        }
        if (group.armedHook() != snapshot)
        {
            final long applied = group.appliedLsn();
            if (applied > progressLsn)
            {
                progressLsn = applied;
                stallDeadlineNs = nowNs + STALL_NS;
                return false;
            }
            if (nowNs - stallDeadlineNs < 0)
            {
                return false;
            }
            dismount();
            throw new BlockmoverException(ErrorCode.BUSY, "test mount not done: group " + config.name + " applied " +
                "nothing of its log for " + TimeUnit.NANOSECONDS.toSeconds(STALL_NS) + " s (applied LSN " + applied +
                " of the " + fromLsn + " the view must hold): a hung or failing volume? See 'blockmover group " +
                "status " + config.name + "' and the daemon's log, then retry");
        }
        lsn = group.armedLsn();
        // A resync record may have been applied between the check and the freeze: then the view would not be a
        // consistent image.
        if (!group.isConsistent())
        {
            dismount();
            throw notConsistent(config, group, node);
        }
        try
        {
            for (int i = 0; i < snapshot.viewCount(); i++)
            {
                final CopyOnWriteView view = snapshot.view(i);
                exports.add(view);
                exportNames.add(view.name());
            }
        }
        catch (final IllegalArgumentException ex)
        {
            dismount();
            throw new BlockmoverException(ErrorCode.INVALID_STATE, ex.getMessage() + ": rename that group or " +
                "export (test views are served as GROUP" + EXPORT_SUFFIX + "/VOLUME)");
        }
        mounted = true;
        mountedAtMs = System.currentTimeMillis();
        return true;
    }

    /**
     * @return whether the views are served ({@link #tryFinish} said so).
     */
    boolean isMounted()
    {
        return mounted;
    }

    /**
     * @return a mount not yet served, for 'group status': how long it waits, and for what.
     */
    Map<String, Object> pendingStatus(final long nowNs)
    {
        final Map<String, Object> s = new LinkedHashMap<>();
        s.put("waiting_s", (nowNs - requestedNs) / 1e9);
        s.put("applied_lsn", group.appliedLsn());
        s.put("from_lsn", fromLsn);
        return s;
    }

    private static BlockmoverException notConsistent(final GroupConfig config, final DestinationGroup group,
        final String node)
    {
        return new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " on " + node + " is not " +
            "consistent now (applied LSN " + group.appliedLsn() + (group.cleanLsn() < 0 ? ", the source has not " +
            "confirmed it has nothing left to resync since this daemon started" : ", the source confirmed " +
            "nothing to resync at LSN " + group.cleanLsn()) + "): during an initial sync or a resync the " +
            "destination mixes old and new regions. Wait until 'blockmover group status " + config.name + "' " +
            "says replicating on the source, " + config.peer + ", and consistent here, then mount again");
    }

    /**
     * Waits for the applier to drop the hook (it does between two records); a hook never armed is dropped already.
     */
    private static void awaitDisarmed(final DestinationGroup group)
    {
        final long deadline = System.nanoTime() + DISARM_TIMEOUT_NS;
        while (group.armedHook() != null && System.nanoTime() - deadline < 0)
        {
            LockSupport.parkNanos(100_000);
        }
    }

    static String exportName(final GroupConfig config, final GroupConfig.VolumePair pair)
    {
        return config.name + EXPORT_SUFFIX + "/" + pair.exportSuffix();
    }

    /**
     * @return why the views failed (their store's I/O error, such as a full disk), or null.
     */
    String failure()
    {
        return snapshot.failure();
    }

    /**
     * @return the LSN the views were frozen at, once mounted.
     */
    long lsn()
    {
        return lsn;
    }

    /**
     * @return the LSN the views must hold at least: what the destination held when the mount was asked for.
     */
    long fromLsn()
    {
        return fromLsn;
    }

    /**
     * Stops serving the views, stops the applier preserving for them (or arming them, for a mount not yet
     * served), and deletes their files.
     */
    void dismount()
    {
        for (final String name : exportNames)
        {
            exports.remove(name);
        }
        group.requestHook(null);
        // If the applier is stuck in I/O the views are closed anyway: they take every grain lock to close, and a
        // preserve that comes after sees them closed.
        awaitDisarmed(group);
        snapshot.close();
        removeQuietly(dir);
    }

    Map<String, Object> status(final Groups groups)
    {
        final Map<String, Object> s = new LinkedHashMap<>();
        s.put("lsn", lsn);
        s.put("mounted_at_ms", mountedAtMs);
        final String failure = failure();
        if (failure != null)
        {
            s.put("error", failure);
        }
        final List<Map<String, Object>> vols = new ArrayList<>();
        for (int i = 0; i < snapshot.viewCount(); i++)
        {
            final CopyOnWriteView view = snapshot.view(i);
            final Map<String, Object> v = new LinkedHashMap<>();
            v.put("target", config.volumes.get(i).target);
            v.put("export", view.name());
            v.put("nbd_uri", groups.nbdUri(view.name()));
            v.put("preserved_bytes", view.preservedBytes());
            v.put("written_bytes", view.overlayBytes());
            vols.add(v);
        }
        s.put("volumes", vols);
        return s;
    }

    /**
     * At start-up: a test mount does not survive a restart; removes what one left behind.
     *
     * @return whether there was one.
     */
    static boolean removeLeftover(final Path groupDir)
    {
        final Path dir = groupDir.resolve(DIR_NAME);
        if (!Files.exists(dir))
        {
            return false;
        }
        try
        {
            removeTree(dir);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot remove the leftover test mount " + dir + ": " +
                ex.getMessage() + ": remove it by hand", ex);
        }
        return true;
    }

    private static void removeQuietly(final Path dir)
    {
        try
        {
            removeTree(dir);
        }
        catch (final IOException ex)
        {
            System.getLogger("blockmoverd").log(System.Logger.Level.WARNING, "cannot remove " + dir + ": " + ex +
                " (it is removed at the next start)");
        }
    }

    private static void removeTree(final Path dir) throws IOException
    {
        if (!Files.exists(dir))
        {
            return;
        }
        try (Stream<Path> files = Files.walk(dir))
        {
            for (final Path p : files.sorted(Comparator.reverseOrder()).toList())
            {
                Files.delete(p);
            }
        }
    }
}
