package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;

import org.agrona.CloseHelper;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.BackoffIdleStrategy;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;
import io.blockmover.io.Volume;
import io.blockmover.replication.ActivityLog;
import io.blockmover.replication.DirtyBitmap;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.GroupMode;
import io.blockmover.replication.group.GroupState;
import io.blockmover.replication.group.GroupStatus;
import io.blockmover.replication.group.Resyncer;
import io.blockmover.replication.group.Shipper;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.transport.FrameConnection;

/**
 * A source group inside the daemon: opens its files, keeps a session with the partner (connect, authenticate,
 * OPEN the group there, run a {@link Shipper}; on a lost link, wait and reconnect with back-off) and runs the
 * {@link Resyncer}. A new group is not persisted until the partner accepted it, so a typo in a target path is an
 * error at create time, not a group that never syncs. Conductor thread only.
 */
final class SourceGroupHandle
{
    /** The group's record log, in its state directory. */
    static final String LOG_FILE = "log";
    /** The log a resize writes beside it, then renames over it. */
    static final String RESIZED_LOG_FILE = "log.resize";
    /** A resize copies at most this much of the backlog per duty cycle (about 0.2 s of 4 KiB records here)... */
    private static final long LOG_COPY_STEP_BYTES = 32L << 20;
    /**
     * ...and once it has copied what was there when it began, chases the writes appended since for this many steps
     * at most, then has the writes wait for the rest: writes faster than the copy would never let it end.
     */
    private static final int LOG_COPY_CHASE_STEPS = 8;
    private static final long FIRST_RETRY_NS = 500_000_000L;
    /**
     * How soon an OPEN is sent again after the partner said BUSY (it ended the session for a move to a new log, or
     * is dropping damaged records): milliseconds of work there, so a short wait, doubled while it lasts.
     */
    private static final long BUSY_RETRY_NS = 100_000_000L;
    private int busyRetries;
    /** How soon a new group's OPEN is sent again while the partner writes its log. */
    private static final long PREPARING_RETRY_NS = 250_000_000L;
    /**
     * How many times a new group's handshake is started again when the connection broke after it was made (reset,
     * broken pipe, no answer in time): a partner busy starting up must not fail a create that a second attempt
     * completes. A refused connection or an explicit refusal fails the create at once.
     */
    private static final int CREATE_RETRIES = 2;
    private static final long CREATE_RETRY_NS = 200_000_000L;

    final GroupConfig config;
    private final Conductor conductor;
    private final GroupStore store;
    private final PeerDialer dialer;
    private SourceGroup group;
    private Resyncer resyncer;
    private AgentRunner resyncRunner;
    private Shipper shipper;
    private AgentRunner shipperRunner;
    private String failure;
    private String lastError;
    private boolean partnerApplyFailingLogged;
    private long linkedAtNs;
    private long ackedAtLink;
    // The published LSN once nothing was left to send in the initial sync, or -1 (see checkInitialSyncEnd).
    private long syncEndLsn = -1;
    private String resyncFailureLogged;
    private long recordsMendedLogged;
    private String activityFailureLogged;
    private String transport;
    private String transportReason;
    private int attempts;
    private long retryAtNs;
    private long backoffNs = FIRST_RETRY_NS;
    private long linkedSinceMs;
    private long sessions;
    private ControlServer.Client pendingClient;
    private Object pendingId;
    // A group being created: its log is being written (LogPreparer); opened in doWork once it is.
    private LogPreparer.Preparation logPreparation;
    // The partner said it is writing its side's log: logged once, not at every retry.
    private boolean partnerPreparing;
    // How far the partner's log is written, from its last PREPARING refusal; -1 when it did not say.
    private long partnerLogWritten = -1;
    // The OPEN under way was sent while this host's log is still being written ("probe": the partner checks it,
    // refuses it or starts its own log, and answers PREPARING rather than opening a session).
    private boolean probing;
    // A partner that opened a session for a probe (one older than probes): not asked again until this log is written.
    private boolean probeOpened;
    private int createRetries;
    private ControlServer.Client switchClient;
    /** A switch is running; its client is null when the destination asked for it (it learns the outcome itself). */
    private boolean switching;
    private Object switchId;
    /**
     * When a switch gives up unless it progresses: the drain moves (the partner acknowledges more, fewer regions
     * are dirty) or the partner applies more of its log, each pushing it {@link #switchStallNs} ahead. A backlog
     * that takes minutes to drain over a slow link is waited for; a partner that stops answering or applying is not.
     */
    private long switchDeadlineNs;
    private long switchAckedLsn;
    private long switchDirtyRegions;
    private long switchAppliedLsn;
    private long switchRetryNs;
    private PeerDialer switchDialer;
    private final io.blockmover.replication.group.RpoTarget rpoTarget = new io.blockmover.replication.group.RpoTarget();
    private boolean partnerVerifies;
    /** The partner's log size and why it could not follow this one's, as its last OPENED said (0: not known). */
    private long partnerLogSize;
    private String partnerLogResizeError;
    private boolean partnerTakesSettings;
    /**
     * A resize of this host's log ('group set --log-size'): the new log being written beside the group's, then
     * waiting until the records the partner lacks fit in half of it; null when none is under way.
     */
    private LogPreparer.Preparation logResize;
    private String logResizeWait;
    private String logResizeError;
    // The copy into the resized log, once under way: the log, where it goes on from in the old log, when it began;
    // where the old log's tail was then, and how many steps have chased the writes appended since.
    private RecordLog resizedLog;
    private long copyResumeAt;
    private long copyStartNs;
    private long copyChaseFrom;
    private int copyChaseSteps;

    SourceGroupHandle(final Conductor conductor, final GroupStore store, final GroupConfig config)
    {
        this.conductor = conductor;
        this.store = store;
        this.config = config;
        this.dialer = new PeerDialer(conductor, config.peer);
    }

    /**
     * Opens volumes, log and bitmaps and starts the resyncer. After a crash of the daemon, replays logged writes
     * that may not have reached the volume; after a crash of the host, starts over with every region dirty.
     *
     * @param fresh whether the group is being created now.
     */
    void open(final boolean fresh)
    {
        final Path dir = store.dir(config.name);
        final Volume[] volumes = new Volume[config.volumes.size()];
        RecordLog log = null;
        try
        {
            for (int i = 0; i < volumes.length; i++)
            {
                final GroupConfig.VolumePair pair = config.volumes.get(i);
                volumes[i] = Groups.openVolume(pair.source, "then run 'blockmover group resume " + config.name + "'");
                if (volumes[i].size() != pair.size)
                {
                    throw new BlockmoverException(ErrorCode.INVALID_STATE, pair.source + " is now " +
                        volumes[i].size() + " bytes, was " + pair.size + " when group " + config.name +
                        " was created: delete and recreate the group");
                }
            }
            store.adoptLogOnDisk(config, conductor);
            final LogRecoveryProgress progress = new LogRecoveryProgress(conductor, config.name);
            log = RecordLog.open(dir.resolve(LOG_FILE), config.logSize, config.regionLength, progress);
            progress.done(log.recovery());
            if (log.headLsn() == RecordLog.NULL_LSN)
            {
                log.reset(1);
            }
            final String lastRun = fresh ? "clean" : store.lastRun(config.name);
            final boolean hostCrashed = "host-crashed".equals(lastRun);
            if (hostCrashed)
            {
                // The log's unforced records went with the page cache: it starts again after what survived.
                log.reset(log.tailLsn() + 1);
            }
            if (fresh && config.seeding)
            {
                // Seeded: nothing is assumed different; the seed verify marks what is (see GroupVerifies).
                createBitmaps(dir, config, false);
            }
            group = new SourceGroup(config, dir, volumes, log,
                (fresh && !config.seeding) || (hostCrashed && config.seeding));
            logSharedFlushes(group);
            if (hostCrashed && config.seeding)
            {
                // Every region is dirty again: the initial sync resends everything, a comparison would skip it all.
                conductor.log("group " + config.name + ": the host stopped without closing the group during its " +
                    "seeded initial sync; every region will be resent");
                seedAbandoned("every region will be resent");
            }
            else if (hostCrashed)
            {
                final long marked = group.recoverAfterHostCrash();
                conductor.log("group " + config.name + ": the host stopped without closing the group; " +
                    (marked < 0 ? "every region will be resent (the group has no activity log from before)" :
                    "the " + marked + " region(s) of its activity log not already dirty will be resent, not every " +
                    "region"));
            }
            // A frozen source stays frozen across restarts: a cluster demoted it and has not promoted it since.
            group.freeze(config.frozen);
            if ("crashed".equals(lastRun))
            {
                final long replayed = group.replayUnwritten();
                conductor.log("group " + config.name + ": recovered after an unclean stop, " + replayed +
                    " logged writes replayed to the volumes");
            }
        }
        catch (final IOException ex)
        {
            closeQuietly(volumes, log);
            throw new BlockmoverException(ErrorCode.IO_ERROR, "group " + config.name + ": " + ex.getMessage(), ex);
        }
        catch (final RuntimeException ex)
        {
            closeQuietly(volumes, log);
            throw ex;
        }
        store.saveRun(config.name, false);
        resyncer = new Resyncer(group, conductor.clock());
        if (config.mode == GroupMode.SYNC)
        {
            resyncer.rateLimit(conductor.peerRates().bucket(config.peer), conductor.clock());
        }
        // Parks of up to 20 ms when idle: resync work appears with a link or a full log, verify steps with
        // results that come back 32 regions at a time; nothing here needs a millisecond's reaction.
        resyncRunner = conductor.newRunner(resyncer, new BackoffIdleStrategy(20, 5, 10_000, 20_000_000));
        AgentRunner.startOnThread(resyncRunner);
        failure = null; // Open after all ('group resume'): the error is history.
    }

    /**
     * Writes the bitmaps of a group that becomes a source after a switch: clean, since both sides hold the same
     * data, or all dirty after a failover, since the old source may hold writes never sent.
     */
    static void createBitmaps(final Path dir, final GroupConfig config, final boolean dirty)
    {
        // New bitmaps begin a new history (a seeded create, or this host becoming the source): an activity log
        // left from an earlier time as source must not speak for it.
        ActivityLog.delete(dir, config.volumes.size());
        for (int i = 0; i < config.volumes.size(); i++)
        {
            final long regions = (config.volumes.get(i).size + config.regionLength - 1) / config.regionLength;
            DirtyBitmap.create(dir.resolve("bitmap." + i), regions, config.regionLength, dirty).close();
        }
    }

    private static void closeQuietly(final Volume[] volumes, final RecordLog log)
    {
        for (final Volume v : volumes)
        {
            if (v != null)
            {
                v.close();
            }
        }
        CloseHelper.quietClose(log);
    }

    SourceGroup group()
    {
        return group;
    }

    /**
     * Says which volumes share the log's disk, where a FLUSH that needs the log durable flushes that disk once.
     */
    private void logSharedFlushes(final SourceGroup opened)
    {
        final StringBuilder shared = new StringBuilder();
        for (int i = 0; i < config.volumes.size(); i++)
        {
            if (opened.flushCoversLog(i))
            {
                shared.append(shared.length() == 0 ? "" : ", ").append(config.volumes.get(i).source);
            }
        }
        if (shared.length() > 0)
        {
            conductor.log("group " + config.name + ": " + shared + " on the log's disk: a FLUSH that needs the log " +
                "durable (async, or the partner away) flushes that disk once for both");
        }
    }

    /**
     * @return whether the partner offered verify when the group last linked.
     */
    boolean partnerVerifies()
    {
        return partnerVerifies;
    }

    boolean isPending()
    {
        return pendingClient != null;
    }

    /**
     * A create deleted before its partner accepted it: the waiting 'group create' hears why (CANCELLED). Then
     * {@link Groups#rejected} closes it.
     */
    void cancelCreate(final String why)
    {
        final ControlServer.Client client = pendingClient;
        pendingClient = null;
        if (client != null)
        {
            client.error(pendingId, ErrorCode.CANCELLED, why);
        }
    }

    void awaitAcceptance(final ControlServer.Client client, final Object id)
    {
        pendingClient = client;
        pendingId = id;
    }

    /**
     * A group being created: open it once its log is written, then dial the partner; the client hears when the
     * partner accepts or refuses, or now if the log cannot be written.
     */
    void openOnceLogPrepared(final LogPreparer.Preparation preparation, final ControlServer.Client client,
        final Object id)
    {
        logPreparation = preparation;
        awaitAcceptance(client, id);
    }

    /**
     * While this host writes a new group's log, the partner is asked already (an OPEN marked "probe"): it checks
     * the group (its volumes, their sizes, a name it has deleted) and starts writing its own log at once, so that a
     * group it refuses is refused in a second, not after this host's log is written, and the two logs are written at
     * the same time, not one after the other. Asked again every {@link #PREPARING_RETRY_NS} as after any PREPARING,
     * which also keeps the partner's log claimed (group.log.unclaimed.keep).
     */
    private int probePartner(final long nowNs)
    {
        return probeOpened ? 0 : dialOrHandshake(nowNs);
    }

    /**
     * The handshake under way, or the next OPEN once it is due.
     */
    private int dialOrHandshake(final long nowNs)
    {
        if (dialer.isActive())
        {
            return handshake(nowNs);
        }
        if (nowNs >= retryAtNs)
        {
            startConnect(nowNs);
            return 1;
        }
        return 0;
    }

    private int openPreparedLog()
    {
        if (!logPreparation.isDone())
        {
            return 0;
        }
        final LogPreparer.Preparation done = logPreparation;
        logPreparation = null;
        try
        {
            done.check();
            open(true);
            conductor.log("group " + config.name + ": log written, asking " + config.peer + " to accept the group");
            // A probe's PREPARING answered from here on is asked again at once, as a real OPEN.
            retryAtNs = 0;
        }
        catch (final BlockmoverException ex)
        {
            final ControlServer.Client client = pendingClient;
            pendingClient = null;
            conductor.groups().rejected(this);
            client.error(pendingId, ex.code(), ex.getMessage());
        }
        return 1;
    }

    /**
     * 'group set --log-size': this host's log takes another size while the group runs, with nothing resent. The new
     * log is written whole beside the old one, on the preparer's thread, as a new group's is; once it is, and the
     * records the partner lacks fit in half of it, they move to it (byte for byte, writes waiting only for that copy)
     * and it takes the old one's place ({@link SourceGroup#startLogCopy}). The session with the partner starts over,
     * from the new log.
     *
     * @param size     the new capacity, checked.
     * @param preparer writes the new log.
     * @return the resize as the answer and the log say it.
     */
    String resizeLog(final long size, final LogPreparer preparer)
    {
        if (logResize != null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "the log of group " + config.name + " is " +
                "already being resized to " + logResize.capacity + " bytes: set another size once 'blockmover " +
                "group status " + config.name + "' no longer shows the resize");
        }
        if (size == config.logSize)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "nothing to set: the log of group " + config.name +
                " is " + size + " bytes already");
        }
        if (switching)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " is switching roles " +
                "with " + config.peer + ": resize its log once the switch is done");
        }
        if (group == null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " is not open here (" +
                (failure != null ? failure : state().label()) + "): resize its log once it is");
        }
        RecordLog.checkRoomFor(store.dir(config.name).resolve(RESIZED_LOG_FILE), size);
        logResizeError = null;
        logResizeWait = null;
        logResize = preparer.prepare(store.dir(config.name).resolve(RESIZED_LOG_FILE), size, config.regionLength,
            config.name, config.peer);
        if (config.logResizeTo != size)
        {
            config.logResizeTo = size;
            store.save(config);
        }
        return "writing a " + size + "-byte log beside its " + config.logSize + "-byte one; it takes the old one's " +
            "place once written, with the records " + config.peer + " lacks (nothing is resent)";
    }

    /**
     * A resize asked before the daemon stopped (kill -9, a reboot, a restart) goes on once the group is open again:
     * the new log is written again from the start (a half-written one was dropped at the open), and the records
     * the partner lacks move to it as before. Refused now (no room any more), it is dropped and says why. The same
     * for a resize this host's log was following as a destination when it became the source.
     *
     * @param asked when, or by whom, the resize was asked, for the log.
     */
    void resumeLogResize(final LogPreparer preparer, final String asked)
    {
        final long size = config.logResizeTo;
        if (size == 0 || logResize != null || group == null)
        {
            return;
        }
        if (size == config.logSize)
        {
            // The daemon stopped once the new log was in place (its size adopted at the open): done.
            config.logResizeTo = 0;
            store.save(config);
            return;
        }
        try
        {
            conductor.log("group " + config.name + ": resuming the resize of its log to " + size + " bytes, asked " +
                asked + ": " + resizeLog(size, preparer));
        }
        catch (final BlockmoverException ex)
        {
            config.logResizeTo = 0;
            store.save(config);
            logResizeError = "the resize of its log to " + size + " bytes, asked " + asked + ", cannot go on: " +
                ex.getMessage();
            conductor.log("group " + config.name + ": " + logResizeError);
        }
    }

    /**
     * @return whether the log is being resized: a switch waits for it.
     */
    boolean isResizingLog()
    {
        return logResize != null;
    }

    /**
     * A step of a log resize, once its new log is written: wait until the records the partner lacks fit in half of
     * it (the session goes on meanwhile); then, with the session ended, copy them, {@link #LOG_COPY_STEP_BYTES} a
     * duty cycle while writes go on; then the last of them while writes wait, and the new log takes the old one's
     * place. A conductor that stopped for the whole copy answered nothing meanwhile, and a large backlog takes long
     * enough for systemd's watchdog to kill the daemon.
     *
     * @return work done; the session waits while a copy runs ({@link #isCopyingLog}).
     */
    private int stepLogResize()
    {
        final LogPreparer.Preparation prepared = logResize;
        final Path file = store.dir(config.name).resolve(RESIZED_LOG_FILE);
        try
        {
            if (resizedLog == null)
            {
                return beginLogCopy(prepared, file);
            }
            if (!group.isLogCopyNearlyDone(copyResumeAt) && (copyResumeAt < copyChaseFrom || copyChaseSteps++ <
                LOG_COPY_CHASE_STEPS))
            {
                copyResumeAt = group.continueLogCopy(resizedLog, copyResumeAt, LOG_COPY_STEP_BYTES);
                if (copyResumeAt < 0)
                {
                    return abortLogCopy("the records " + config.peer + " lacks outgrew it during the copy");
                }
                return 1;
            }
            final long used = group.log().usedBytes();
            final long leftForTheWait = group.log().tailPosition() - copyResumeAt;
            final long moved = group.finishLogCopy(resizedLog, copyResumeAt, store.dir(config.name).resolve(LOG_FILE),
                conductor.groups().logPreparer()::closeReplaced);
            if (moved < 0)
            {
                return abortLogCopy("the records " + config.peer + " lacks outgrew half of it during the copy");
            }
            resizedLog = null;
            final long was = config.logSize;
            config.logSize = prepared.capacity;
            config.logResizeTo = 0;
            store.save(config);
            logResize = null;
            logResizeWait = null;
            conductor.log(String.format(java.util.Locale.ROOT, "group %s: its log is now %d bytes (was %d): " +
                "the %d records %s lacks (%s) moved to it in %.1f ms, writes waiting for the last %.1f ms of " +
                "it (%s); nothing is resent", config.name, config.logSize, was, moved, config.peer,
                io.blockmover.cli.Format.bytes(used), (System.nanoTime() - copyStartNs) / 1e6,
                group.logReplacePauseNs() / 1e6, io.blockmover.cli.Format.bytes(leftForTheWait)));
        }
        catch (final BlockmoverException | java.io.UncheckedIOException | IllegalStateException ex)
        {
            if (resizedLog != null && group.log() != resizedLog)
            {
                resizedLog.closeReplaced(); // Deleted below: nothing of it to force.
            }
            else if (resizedLog != null)
            {
                // Renamed into place, then its directory failed to force: it is the group's log now.
                config.logSize = prepared.capacity;
            }
            config.logResizeTo = 0;
            store.save(config);
            resizedLog = null;
            logResize = null;
            logResizeWait = null;
            logResizeError = "the log was not resized to " + prepared.capacity + " bytes: " + ex.getMessage();
            conductor.log("group " + config.name + ": " + logResizeError + "; it keeps its " + config.logSize +
                "-byte log");
            try
            {
                Files.deleteIfExists(file);
            }
            catch (final IOException ignored)
            {
                // Deleted at the group's next open.
            }
        }
        retryAtNs = 0;
        backoffNs = FIRST_RETRY_NS;
        return 1;
    }

    private int beginLogCopy(final LogPreparer.Preparation prepared, final Path file)
    {
        prepared.check();
        final long used = group.log().usedBytes();
        if (used > prepared.capacity / 2)
        {
            // An outage's or a slow link's backlog that a smaller log cannot hold: wait for the partner to take it
            // rather than drop it to the bitmaps (a resync, and an inconsistent destination meanwhile).
            if (logResizeWait == null)
            {
                conductor.log("group " + config.name + ": its new " + prepared.capacity + "-byte log waits until " +
                    "the records " + config.peer + " lacks fit in half of it (" + io.blockmover.cli.Format.bytes(used) +
                    " now)");
            }
            logResizeWait = "the records " + config.peer + " lacks (" + io.blockmover.cli.Format.bytes(used) +
                ") must fit in half of the new log";
            return 0;
        }
        resizedLog = RecordLog.open(file, prepared.capacity, config.regionLength);
        closeSession();
        copyStartNs = System.nanoTime();
        copyResumeAt = group.startLogCopy(resizedLog);
        copyChaseFrom = group.log().tailPosition();
        copyChaseSteps = 0;
        if (copyResumeAt < 0)
        {
            return abortLogCopy("more arrived");
        }
        return 1;
    }

    /**
     * The records outgrew the new log while they were copied: it is empty again, and the resize waits as before.
     */
    private int abortLogCopy(final String why)
    {
        resizedLog.close();
        resizedLog = null;
        logResizeWait = "copy started again: " + why;
        retryAtNs = 0;
        return 1;
    }

    /**
     * @return whether the group's records are being copied to a new log: no session meanwhile.
     */
    private boolean isCopyingLog()
    {
        return resizedLog != null;
    }

    boolean isHandshaking()
    {
        return dialer.isActive() || switchDialer != null;
    }

    /**
     * @param message why the group could not open.
     */
    void failed(final String message)
    {
        failure = message;
    }

    int doWork(final long nowNs)
    {
        if (logPreparation != null)
        {
            final int work = openPreparedLog();
            return logPreparation != null ? work + probePartner(nowNs) : work;
        }
        if (group == null)
        {
            return 0;
        }
        if (logResize != null && logResize.isDone())
        {
            final int work = stepLogResize();
            if (work > 0 || isCopyingLog())
            {
                return work;
            }
        }
        if (config.suspended)
        {
            return 0;
        }
        if (switching)
        {
            return doSwitch(nowNs);
        }
        if (shipper != null)
        {
            return checkSession(nowNs);
        }
        return dialOrHandshake(nowNs);
    }

    /**
     * The group's settings travel with every OPEN, so that the destination holds them when it becomes the source
     * (a switch or a failover): the RPO target, the verify schedule and on-disconnect belong to the group, not to
     * one host.
     */
    private void putSettings(final Map<String, Object> open)
    {
        open.putAll(config.settings());
    }

    /**
     * The RPO target or the verify schedule changed here: a linked destination that takes SETTINGS gets them now,
     * not only at the next session. Conductor thread.
     */
    void settingsChanged()
    {
        if (shipper != null && partnerTakesSettings)
        {
            try
            {
                shipper.sendSettings(com.fasterxml.jackson.jr.ob.JSON.std.asBytes(config.settings()));
            }
            catch (final java.io.IOException ex)
            {
                conductor.log("group " + config.name + ": settings not sent to " + config.peer + " (" +
                    ex.getMessage() + "); it gets them when it next connects");
            }
        }
    }

    boolean isSwitching()
    {
        return switching;
    }

    /**
     * 'group set --on-disconnect': writes held for an absent partner re-check (SourceGroup reads the setting for
     * each write).
     */
    void onDisconnectChanged()
    {
        if (group != null)
        {
            group.onDisconnectChanged();
        }
    }

    /**
     * The group's mode changed ('group set --mode'): writes follow it at once (SourceGroup reads it for each one);
     * the session starts over so that the partner takes it from the next OPEN and its receiver forces as the mode
     * wants, and the bandwidth limit moves to where the mode puts it (async: the shipper, the whole stream; sync:
     * the resync only, never the writes). Whatever the partner lacks is sent again from the log when it
     * reconnects, at once.
     */
    void modeChanged()
    {
        if (resyncer != null)
        {
            resyncer.rateLimit(config.mode == GroupMode.SYNC ? conductor.peerRates().bucket(config.peer) : null,
                conductor.clock());
        }
        closeSession();
        retryAtNs = 0;
        backoffNs = FIRST_RETRY_NS;
    }

    private void startConnect(final long nowNs)
    {
        attempts++;
        final Map<String, Object> open = new LinkedHashMap<>();
        open.put("group", config.name);
        open.put("mode", config.mode.label());
        open.put("volumes", config.volumeList());
        open.put("log_size", config.logSize);
        if (config.logResizeTo != 0)
        {
            // Where this log is going: the partner's follows there, not back to the size this one still has.
            open.put("log_resize_to", config.logResizeTo);
        }
        open.put("region_length", config.regionLength);
        // Names this group, not one created again under its name: a destination deleted there refuses only it.
        open.put("created_ms", config.createdMs);
        // This shipper resends from a record its partner got damaged (NACK), so the session need not end.
        open.put("resend", true);
        // This shipper marks the records its clients' FLUSHes may soon wait for (RecordFlags.FLUSHING): a sync
        // partner need not force after every batch while none come.
        open.put("flush_hints", true);
        putSettings(open);
        probing = group == null;
        if (probing)
        {
            // This host's log is still being written (see probePartner).
            open.put("probe", true);
        }
        try
        {
            dialer.start(open, nowNs);
            transportReason = dialer.transportReason();
        }
        catch (final IOException | RdmaException | BlockmoverException ex)
        {
            connectionFailed("cannot connect to " + config.peer + ": " + ex.getMessage(), nowNs,
                ErrorCode.PEER_UNREACHABLE);
        }
    }

    private int handshake(final long nowNs)
    {
        try
        {
            final int work = dialer.doWork(nowNs);
            if (dialer.isOpened() && group == null)
            {
                // A partner that does not know probes took it as an OPEN: this log is not written yet, so no
                // session; it is asked again once it is.
                dialer.close();
                probeOpened = true;
                conductor.log("group " + config.name + ": " + config.peer + " accepted the group before this " +
                    "host's log is written; it is asked again once it is");
            }
            else if (dialer.isOpened())
            {
                startSession(dialer.opened(), nowNs);
            }
            return work;
        }
        catch (final PeerRefusal ex)
        {
            dialer.close();
            connectionFailed(ex.getMessage(), nowNs, ex.code());
        }
        catch (final IOException ex)
        {
            // A create whose connection broke after it was made: not an absent partner.
            final boolean createBroke = pendingClient != null && dialer.isConnected();
            dialer.close();
            if (createBroke && createRetries < CREATE_RETRIES)
            {
                createRetries++;
                conductor.log("group " + config.name + ": " + config.peer + ": " + ex.getMessage() + " during the " +
                    "handshake, asking again (" + createRetries + " of " + CREATE_RETRIES + ")");
                retryAtNs = nowNs + CREATE_RETRY_NS;
                return 1;
            }
            connectionFailed(config.peer + ": " + ex.getMessage() +
                (createBroke ? " (" + (CREATE_RETRIES + 1) + " attempts)" : ""), nowNs, ErrorCode.PEER_UNREACHABLE);
        }
        return 1;
    }

    private void startSession(final Map<String, Object> opened, final long nowNs)
    {
        final long held = ((Number)opened.get("held_lsn")).longValue();
        partnerVerifies = Boolean.TRUE.equals(opened.get("verify"));
        partnerTakesSettings = Boolean.TRUE.equals(opened.get("settings"));
        partnerLogSize = opened.get("log_size") instanceof Number n ? n.longValue() : 0;
        partnerLogResizeError = opened.get("log_resize_error") instanceof String error ? error : null;
        final boolean partnerTakesProgress = Boolean.TRUE.equals(opened.get("progress"));
        final boolean partnerTakesZeroRecords = Boolean.TRUE.equals(opened.get("zero_records"));
        final int sessionId = dialer.sessionId();
        final FrameConnection connection = dialer.takeConnection();
        final RecordLog log = group.log();
        boolean restart = false;
        if (held < log.headLsn() - 1 || held > log.tailLsn())
        {
            restart = true;
            // Before a restart empties the log.
            final String holdings = config.peer + " holds LSN " + held + ", this log holds " + log.headLsn() + ".." +
                log.tailLsn();
            if (group.restartAfterHostCrash(held))
            {
                conductor.log("group " + config.name + ": " + holdings + " after this host's crash: the regions it " +
                    "was writing are resent (" + group.dirtyRegions() + " dirty)");
            }
            else if (held < log.headLsn() - 1 && opened.get("dropped_regions") instanceof List<?> dropped &&
                group.restartAfterPartnerDropped(held, dropped))
            {
                conductor.log("group " + config.name + ": " + holdings + ": it dropped records damaged in its log; " +
                    "their regions and this log's are resent (" + group.dirtyRegions() + " dirty), not every region");
            }
            else
            {
                conductor.log("group " + config.name + ": " + holdings + ": continuity lost, every region will be " +
                    "resent");
                group.restartFrom(held);
                if (config.seeding)
                {
                    seedAbandoned("every region will be resent");
                }
            }
        }
        group.sessionStarted();
        transport = connection.transportName();
        shipper = new Shipper(group, connection, sessionId, restart ? group.log().tailLsn() : held, restart,
            conductor.clock(), conductor.ctx().heartbeatIntervalNs(), conductor.ctx().peerTimeoutNs(),
            conductor.ctx().ackTimeoutNs());
        shipper.countFrameErrorsIn(conductor.cnc().counter(SystemCounter.FRAME_ERRORS));
        if (partnerTakesProgress)
        {
            shipper.sendProgress();
        }
        if (partnerTakesZeroRecords)
        {
            shipper.sendZeroRecords();
        }
        if (config.mode == GroupMode.ASYNC)
        {
            shipper.rateLimit(conductor.peerRates().bucket(config.peer));
        }
        shipperRunner = conductor.newRunner(shipper, Shipper.idleStrategy(shipper));
        AgentRunner.startOnThread(shipperRunner);
        sessions++;
        linkedSinceMs = System.currentTimeMillis();
        // The backoff is reset when a session ends having achieved something (see checkSession), not here: a
        // partner that takes the session and drops it at once (its log full, its disk failing) must not be
        // redialled twice a second.
        linkedAtNs = nowNs;
        ackedAtLink = group.ackedLsn();
        busyRetries = 0;
        lastError = null;
        conductor.log("group " + config.name + " linked to " + config.peer + " over " + transport + " (partner " +
            "holds LSN " + held + ")");
        if (pendingClient != null)
        {
            final ControlServer.Client client = pendingClient;
            pendingClient = null;
            store.save(config);
            conductor.groups().accepted(this);
            client.reply(pendingId, status());
        }
    }

    private int checkSession(final long nowNs)
    {
        checkInitialSyncEnd();
        if (shipper.status().isRunning())
        {
            return 0;
        }
        final String why = shipper.status().message();
        final ErrorCode code = shipper.status().code() == ErrorCode.BUSY ? ErrorCode.BUSY : ErrorCode.PEER_UNREACHABLE;
        closeSession();
        if (group.ackedLsn() > ackedAtLink || nowNs - linkedAtNs >= conductor.ctx().reconnectMaxIntervalNs())
        {
            backoffNs = FIRST_RETRY_NS;
        }
        connectionFailed(why, nowNs, code);
        return 1;
    }

    /**
     * The initial sync ends once the partner holds durably every record up to the point where nothing was left to
     * send (the last region's record is at or before it; read in that order, as the shipper does): not every write
     * since, which under writes that never pause it never does. The partner is asked to force that far at once,
     * not left to its next flush.interval.
     */
    private void checkInitialSyncEnd()
    {
        if (config.initialSyncDone || config.seeding || !group.isLinked() || group.dirtyRegions() > 0)
        {
            syncEndLsn = -1;
            return;
        }
        if (syncEndLsn < 0)
        {
            syncEndLsn = group.publishedLsn();
            group.askPartnerToForce(syncEndLsn);
        }
        if (group.durableLsn() >= syncEndLsn)
        {
            config.initialSyncDone = true;
            store.save(config);
            conductor.log("group " + config.name + ": initial sync complete");
        }
    }

    /**
     * The seed verify compared every region and every different one has been resent: from here the initial sync
     * ends like any other, once nothing is dirty and the partner holds the log.
     */
    void seedCompared()
    {
        config.seeding = false;
        store.save(config);
        conductor.log("group " + config.name + ": seeded initial sync compared every region");
    }

    /**
     * The initial sync of a seeded group goes on without the comparison: every region is dirty (sent whole).
     */
    void seedAbandoned(final String why)
    {
        config.seeding = false;
        if (pendingClient == null)
        {
            // A group still waiting for its partner's acceptance is saved when accepted.
            store.save(config);
        }
        conductor.log("group " + config.name + ": seeded initial sync abandoned, " + why);
    }

    private void connectionFailed(final String message, final long nowNs, final ErrorCode code)
    {
        if (pendingClient != null && code == ErrorCode.PREPARING)
        {
            // The partner is writing its side's log for this new group: ask again shortly, without back-off (the
            // client waits for the answer), and say so once.
            final Matcher progress = LogPreparer.PROGRESS.matcher(message);
            partnerLogWritten = progress.find() ? Long.parseLong(progress.group(1)) : -1;
            // A handshake that was answered: the link works. Broken handshakes are counted in a row, or a long
            // log write (asked every 250 ms, both logs at once) gathered three odd breaks and failed the create.
            createRetries = 0;
            if (!partnerPreparing)
            {
                partnerPreparing = true;
                conductor.log("group " + config.name + ": " + config.peer + " is writing its log before it accepts " +
                    "the group");
            }
            // A probe's refusal once this log is written (the real OPEN is due): at once.
            retryAtNs = probing && group != null ? nowNs : nowNs + PREPARING_RETRY_NS;
            return;
        }
        if (pendingClient != null)
        {
            final ControlServer.Client client = pendingClient;
            pendingClient = null;
            conductor.groups().rejected(this);
            client.error(pendingId, code, message + (code == ErrorCode.PEER_UNREACHABLE ? " (is blockmoverd " +
                "running on " + config.peer + ", and does peer." + config.peer + ".address point at it?)" : ""));
            return;
        }
        if (lastError == null || !lastError.equals(message))
        {
            conductor.log("group " + config.name + " degraded: " + message);
        }
        lastError = message;
        if (code == ErrorCode.BUSY)
        {
            retryAtNs = nowNs + (BUSY_RETRY_NS << Math.min(busyRetries++, 3));
            return;
        }
        retryAtNs = nowNs + backoffNs;
        backoffNs = Math.min(backoffNs * 2, conductor.ctx().reconnectMaxIntervalNs());
    }

    private void closeSession()
    {
        if (shipperRunner != null)
        {
            shipper.status().fail(ErrorCode.CANCELLED, "session closed", true);
            CloseHelper.quietClose(shipperRunner);
            shipper.connection().close();
            shipperRunner = null;
            shipper = null;
        }
        dialer.close();
    }

    /**
     * Starts a planned role switch: refuse new writes, wait until the partner holds everything durably, ask it
     * to become the source, then become its destination. Answered when done or failed.
     */
    void requestSwitch(final ControlServer.Client client, final Object id, final long nowNs)
    {
        if (switching)
        {
            throw new BlockmoverException(ErrorCode.BUSY, "group " + config.name + " is already switching");
        }
        if (logResize != null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "the log of group " + config.name + " is being " +
                "resized to " + logResize.capacity + " bytes: switch once 'blockmover group status " + config.name +
                "' no longer shows the resize");
        }
        if (!config.initialSyncDone)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " is still in its " +
                "initial sync: switch once 'blockmover group status " + config.name + "' says replicating");
        }
        if (config.suspended || shipper == null || !group.isLinked())
        {
            throw new BlockmoverException(ErrorCode.PEER_UNREACHABLE, "group " + config.name + " is not linked to " +
                config.peer + " (" + state().label() + "): a planned switch needs both hosts; if this host is lost, " +
                "run 'blockmover group switch " + config.name + " --force' on " + config.peer + " (a failover)");
        }
        group.freeze(true);
        switchClient = client;
        switching = true;
        switchId = id;
        switchDeadlineNs = nowNs + switchStallNs();
        switchAckedLsn = group.ackedLsn();
        switchDirtyRegions = group.dirtyRegions();
        switchAppliedLsn = -1;
        conductor.log("group " + config.name + ": switching roles with " + config.peer + ", writes refused while " +
            "it drains (" + io.blockmover.cli.Format.bytes(group.rpoBytes()) + " not yet on " + config.peer + ")");
    }

    /**
     * Writes are refused while a switch drains: once nothing is dirty and none is in flight, what the log holds is
     * all the partner must make durable, and it is asked to force that far at once. Left to its flush.interval, the
     * drain waited for the partner's next timed force, and one of 30 s or more made every switch give up.
     */
    private void askForTheSwitchsForce()
    {
        if (group.dirtyRegions() == 0 && !group.hasWritesInFlight())
        {
            group.askPartnerToForce(group.publishedLsn()); // Read after the dirty count, as the shipper reads them.
        }
    }

    /**
     * @return how long a switch waits without progress before it gives up: six connect timeouts, 30 s by default.
     */
    private long switchStallNs()
    {
        return conductor.ctx().connectTimeoutNs() * 6;
    }

    /**
     * Pushes the switch's deadline ahead when the drain moved since the last look.
     */
    private void switchProgressed(final long nowNs)
    {
        final long acked = group.ackedLsn();
        final long dirty = group.dirtyRegions();
        if (acked > switchAckedLsn || dirty < switchDirtyRegions)
        {
            switchAckedLsn = acked;
            switchDirtyRegions = dirty;
            switchDeadlineNs = nowNs + switchStallNs();
        }
    }

    private int doSwitch(final long nowNs)
    {
        if (nowNs > switchDeadlineNs)
        {
            abortSwitch(ErrorCode.PEER_UNREACHABLE, "the switch made no progress for " +
                TimeUnit.NANOSECONDS.toSeconds(switchStallNs()) + " s (" + (switchDialer == null ? config.peer +
                " acknowledged nothing more, " + io.blockmover.cli.Format.bytes(group.rpoBytes()) + " not yet " +
                "durable there" :
                config.peer + " did not answer, or applied nothing more of its log") + ")");
            return 1;
        }
        if (switchDialer == null)
        {
            switchProgressed(nowNs);
            if (shipper == null || !shipper.status().isRunning())
            {
                abortSwitch(ErrorCode.PEER_UNREACHABLE, "the link to " + config.peer + " broke while draining");
                return 1;
            }
            askForTheSwitchsForce();
            if (!group.isInSync() || group.hasWritesInFlight() || nowNs < switchRetryNs)
            {
                return 0;
            }
            closeSession();
            switchDialer = new PeerDialer(conductor, config.peer);
            switchRetryNs = 0;
        }
        if (!switchDialer.isActive() && !switchDialer.isOpened())
        {
            if (nowNs < switchRetryNs)
            {
                return 0;
            }
            final Map<String, Object> open = new LinkedHashMap<>();
            open.put("group", config.name);
            open.put("switch", true);
            open.put("last_lsn", group.publishedLsn());
            final List<Map<String, Object>> vols = new ArrayList<>();
            for (final GroupConfig.VolumePair pair : config.volumes)
            {
                vols.add(Map.of("source", pair.source, "target", pair.target, "size", pair.size));
            }
            open.put("volumes", vols);
            putSettings(open);
            try
            {
                switchDialer.start(open, nowNs);
            }
            catch (final IOException | RdmaException | BlockmoverException ex)
            {
                abortSwitch(ErrorCode.PEER_UNREACHABLE, "cannot reach " + config.peer + ": " + ex.getMessage());
            }
            return 1;
        }
        try
        {
            final int work = switchDialer.doWork(nowNs);
            if (switchDialer.isOpened())
            {
                switchDialer.close();
                final ControlServer.Client client = switchClient;
                final Object id = switchId;
                switchClient = null;
                switching = false;
                switchDialer = null;
                final long lsn = group.publishedLsn();
                conductor.groups().switchedToDestination(this);
                conductor.log("group " + config.name + " switched: " + config.peer + " is now its source (LSN " +
                    lsn + ")");
                if (client != null)
                {
                    client.reply(id, conductor.groups().statusOf(config.name));
                }
            }
            return work;
        }
        catch (final PeerRefusal ex)
        {
            switchDialer.close();
            if (ex.code() == ErrorCode.BUSY)
            {
                // The partner is still applying its log: ask again shortly, and wait on while it gets on with it.
                final Matcher applied = Groups.APPLIED.matcher(ex.getMessage());
                final long appliedLsn = applied.find() ? Long.parseLong(applied.group(1)) : -1;
                if (appliedLsn > switchAppliedLsn)
                {
                    switchAppliedLsn = appliedLsn;
                    switchDeadlineNs = nowNs + switchStallNs();
                }
                switchRetryNs = nowNs + 200_000_000L;
                return 1;
            }
            abortSwitch(ex.code(), ex.getMessage());
        }
        catch (final IOException ex)
        {
            switchDialer.close();
            abortSwitch(ErrorCode.PEER_UNREACHABLE, config.peer + ": " + ex.getMessage());
        }
        return 1;
    }

    private void abortSwitch(final ErrorCode code, final String message)
    {
        if (switchDialer != null)
        {
            switchDialer.close();
            switchDialer = null;
        }
        group.freeze(config.frozen);
        final ControlServer.Client client = switchClient;
        switchClient = null;
        switching = false;
        retryAtNs = 0;
        conductor.log("group " + config.name + ": switch abandoned, still the source: " + message);
        if (client != null)
        {
            client.error(switchId, code, "switch abandoned, " + conductor.ctx().nodeName() + " is still the source: " +
                message);
        }
    }

    /**
     * Refuses (or accepts again) writes through the group's NBD exports while it stays the source and keeps
     * replicating: what a cluster's demote does, so that the partner's promote can then switch without a race.
     */
    void freeze(final boolean value)
    {
        if (switching)
        {
            throw new BlockmoverException(ErrorCode.BUSY, "group " + config.name + " is switching roles: retry when " +
                "the switch is over");
        }
        config.frozen = value;
        store.save(config);
        if (group != null)
        {
            group.freeze(value);
        }
        conductor.log("group " + config.name + (value ? " frozen: writes through its exports are refused" :
            " thawed: writes through its exports are accepted"));
    }

    void suspend()
    {
        config.suspended = true;
        store.save(config);
        if (group != null)
        {
            group.suspended(true);
        }
        closeSession();
        conductor.log("group " + config.name + " suspended");
    }

    void resume()
    {
        config.suspended = false;
        store.save(config);
        if (group != null)
        {
            group.suspended(false);
        }
        retryAtNs = 0;
        backoffNs = FIRST_RETRY_NS;
        conductor.log("group " + config.name + " resumed");
    }

    /**
     * Stops everything and closes the files; the group stays on disk and resumes at the next start.
     */
    void close()
    {
        if (logPreparation != null)
        {
            // A create refused or deleted while its log is written: stopped, and nothing of it kept.
            logPreparation.cancel();
            logPreparation.discardWhenDone(store.dir(config.name).resolve(LOG_FILE));
            logPreparation = null;
        }
        if (resizedLog != null)
        {
            resizedLog.closeReplaced(); // Deleted below: nothing of it to force.
            resizedLog = null;
        }
        if (logResize != null)
        {
            // A resize the group is closed in (deleted, switched, the daemon stopping): its new log goes once the
            // preparer is done with it, whatever the group's directory has become.
            logResize.cancel();
            logResize.discardWhenDone(store.dir(config.name).resolve(RESIZED_LOG_FILE));
            logResize = null;
        }
        closeSession();
        CloseHelper.quietClose(resyncRunner);
        resyncRunner = null;
        if (group != null)
        {
            group.close();
            if (group.isClosePending())
            {
                conductor.log("group " + config.name + ": reads or writes are still in its volumes' disks after " +
                    TimeUnit.NANOSECONDS.toSeconds(group.closeWaitNs()) + " s; its files stay open until they end " +
                    "(a disk this slow is failing: see dmesg)");
            }
            group = null;
            store.saveRun(config.name, true);
        }
    }

    void forceBitmaps()
    {
        if (group != null)
        {
            group.forceBitmaps();
        }
    }

    /**
     * Housekeeping: make log space the partner has released reusable (a flush, kept off the data path), when due.
     */
    void reclaimLogSpace()
    {
        if (group != null)
        {
            group.reclaimLogSpaceWhenDue();
        }
    }

    /**
     * Housekeeping: shrinks the activity log when it outgrew activity.regions (a volume force when it does).
     */
    void checkpointActivity()
    {
        if (group == null)
        {
            return;
        }
        try
        {
            group.checkpointActivity(conductor.ctx().activityRegions());
        }
        catch (final IOException | RuntimeException ex)
        {
            final String message = "group " + config.name + ": cannot shrink the activity log (" + ex.getMessage() +
                "); a crash of this host would resend more regions";
            if (!message.equals(activityFailureLogged))
            {
                conductor.error(message);
                activityFailureLogged = message;
            }
        }
    }

    /**
     * Housekeeping: logs when the partner starts or stops failing to apply, and compares the RPO with the group's
     * target, logging when it passes it or recovers (events and counters show both from the status).
     */
    void checkHealth()
    {
        if (group == null)
        {
            return;
        }
        final String resyncFailure = resyncer != null ? resyncer.failure() : null;
        if (resyncFailure != null && !resyncFailure.equals(resyncFailureLogged))
        {
            conductor.error("group " + config.name + ": resync " + resyncFailure);
        }
        resyncFailureLogged = resyncFailure;
        if (group.isPartnerApplyFailing() != partnerApplyFailingLogged)
        {
            partnerApplyFailingLogged = group.isPartnerApplyFailing();
            if (partnerApplyFailingLogged)
            {
                conductor.error("group " + config.name + ": " + config.peer + " cannot apply to its volumes (a full " +
                    "or failing disk there?): it keeps the records in its log and retries; see 'blockmover group " +
                    "status " + config.name + "' on " + config.peer);
            }
            else
            {
                conductor.log("group " + config.name + ": " + config.peer + " applies to its volumes again");
            }
        }
        final long mended = group.recordsMended();
        if (mended != recordsMendedLogged)
        {
            conductor.error("group " + config.name + ": " + (mended - recordsMendedLogged) + " record(s) of this " +
                "host's log " + group.log().path() + " were found damaged (CRC32C mismatch) when " + config.peer +
                " asked for them again; each was mended (a write's from its volume, its regions being resent; a " +
                "verify's voided, its region compared again) (" + mended + " since start: the disk or memory under " +
                "the log changes what was written; check them)");
            recordsMendedLogged = mended;
        }
        final double rpoSeconds = GroupStatus.rpoSeconds(group);
        askForceWithinTarget(rpoSeconds);
        if (rpoTarget.update(rpoSeconds, config.rpoTargetMs))
        {
            conductor.log("group " + config.name + ": RPO " + String.format(java.util.Locale.ROOT, "%.1f", rpoSeconds) +
                " s " + (rpoTarget.isExceeded() ? "exceeds" : "is back within") + " its target of " +
                io.blockmover.replication.group.RpoTarget.format(config.rpoTargetMs));
        }
    }

    /**
     * The partner forces its log every flush.interval, or when asked: a write it holds counts for the RPO only once
     * durable there. With an interval longer than half the group's RPO target, the RPO passed the target while every
     * write had reached the partner long before; so once the RPO is half the target, the partner is asked to force
     * what it acknowledged. Not while regions are resent: the RPO then stays high until that ends, whatever the
     * partner forces.
     */
    private void askForceWithinTarget(final double rpoSeconds)
    {
        if (config.rpoTargetMs <= 0 || rpoSeconds * 1000 < config.rpoTargetMs / 2.0 || !group.isLinked() ||
            group.dirtyRegions() > 0)
        {
            return;
        }
        final long acked = group.ackedLsn();
        if (acked > group.durableLsn())
        {
            group.askPartnerToForce(acked);
        }
    }

    GroupState state()
    {
        if (group == null)
        {
            return GroupState.FAILED;
        }
        if (config.suspended)
        {
            return GroupState.SUSPENDED;
        }
        if (shipper == null || !group.isLinked())
        {
            // A session whose shipper has not started yet is still connecting, not degraded.
            return shipper != null || pendingClient != null || (sessions == 0 && attempts <= 1) ?
                GroupState.CONNECTING : GroupState.DEGRADED;
        }
        if (!config.initialSyncDone)
        {
            return GroupState.INITIAL_SYNC;
        }
        if (group.dirtyRegions() > 0)
        {
            return GroupState.RESYNC;
        }
        return group.isPartnerCurrent() || GroupStatus.isDrained(group) ? GroupState.REPLICATING :
            GroupState.CATCHING_UP;
    }

    /**
     * @return the status of a group being created (not yet accepted by its partner): where the create stands.
     */
    Map<String, Object> creatingStatus()
    {
        final Map<String, Object> s = config.statusHead("creating");
        s.put("creating", logPreparation != null ? "writing its " + config.logSize + "-byte log" :
            partnerPreparing ? config.peer + " is writing its log" : "waiting for " + config.peer + " to accept it");
        // How far the log being written is (this host's first, then the partner's), for a progress line.
        final long written = logPreparation != null ? logPreparation.written() :
            partnerPreparing ? partnerLogWritten : -1;
        if (written >= 0)
        {
            s.put("log_host", logPreparation != null ? conductor.ctx().nodeName() : config.peer);
            s.put("log_written", written);
            s.put("log_size", config.logSize);
            if (logPreparation != null && partnerPreparing && partnerLogWritten >= 0)
            {
                // Both logs are written at once (see probePartner): the partner's too, from its last refusal.
                s.put("partner_log_written", partnerLogWritten);
            }
        }
        s.put("volumes", config.volumeList());
        if (lastError != null)
        {
            s.put("last_error", lastError);
        }
        return s;
    }

    Map<String, Object> status()
    {
        final Map<String, Object> s = config.statusHead(state().label());
        s.put("on_disconnect", config.onDisconnectLabel());
        s.put("frozen", config.frozen);
        if (switching)
        {
            // Frozen for the switch, not by the operator: config.frozen stays as it was, and comes back if it fails.
            s.put("switching", true);
        }
        s.put("transport", shipper != null ? transport : null);
        if (transportReason != null)
        {
            s.put("transport_reason", transportReason);
        }
        if (failure != null)
        {
            s.put("error", failure);
        }
        if (lastError != null)
        {
            s.put("last_error", lastError);
        }
        if (resyncer != null && resyncer.failure() != null)
        {
            s.put("resync_error", resyncer.failure());
        }
        if (resyncer != null)
        {
            s.put("resync_read_failures", resyncer.failures());
        }
        s.put("initial_sync_done", config.initialSyncDone);
        s.put("seeding", config.seeding);
        s.put("linked_since_ms", shipper != null ? linkedSinceMs : 0);
        s.put("sessions", sessions);
        final List<Map<String, Object>> vols = new ArrayList<>();
        for (int i = 0; i < config.volumes.size(); i++)
        {
            final GroupConfig.VolumePair pair = config.volumes.get(i);
            final Map<String, Object> v = new LinkedHashMap<>();
            v.put("source", pair.source);
            v.put("target", pair.target);
            v.put("size", pair.size);
            v.put("export", config.name + "/" + pair.exportSuffix());
            v.put("nbd_uri", conductor.groups().nbdUri(config.name + "/" + pair.exportSuffix()));
            if (group != null)
            {
                v.put("dirty_bytes", io.blockmover.replication.DirtyBitmap.dirtyBytes(group.dirty(i),
                    config.regionLength, pair.size));
            }
            vols.add(v);
        }
        s.put("volumes", vols);
        if (group != null)
        {
            GroupStatus.describe(group, s);
        }
        if (config.rpoTargetMs > 0)
        {
            s.put("rpo_target_s", config.rpoTargetMs / 1000.0);
            s.put("rpo_target_exceeded", rpoTarget.isExceeded());
        }
        if (shipper != null)
        {
            s.put("bytes_sent", shipper.connection().bytesSent());
            s.put("bytes_received", shipper.connection().bytesReceived());
        }
        if (logResize != null)
        {
            s.put("log_resize", logResize.describeAsResize(resizedLog == null ? logResizeWait : null,
                resizedLog != null));
        }
        if (logResizeError != null)
        {
            s.put("log_resize_error", logResizeError);
        }
        if (partnerLogSize != 0)
        {
            // As of the session's start: the partner's move to this log's size ends the session, so the next one
            // says the new size.
            s.put("partner_log_size", partnerLogSize);
            if (partnerLogResizeError != null)
            {
                s.put("partner_log_resize_error", partnerLogResizeError);
            }
        }
        conductor.groups().verifies().describe(config, s);
        return s;
    }
}
