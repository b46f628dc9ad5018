package io.blockmover.conductor;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.agrona.CloseHelper;
import org.agrona.concurrent.AgentRunner;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;
import io.blockmover.frontend.nbd.ExportRegistry;
import io.blockmover.io.Volume;
import io.blockmover.replication.group.DestinationGroup;
import io.blockmover.replication.group.DurableConsistency;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.GroupReceiver;
import io.blockmover.replication.group.GroupState;
import io.blockmover.replication.group.LogForcer;
import io.blockmover.replication.group.RpoTarget;
import io.blockmover.replication.group.SourceReport;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.transport.ConnectionIdleStrategy;
import io.blockmover.transport.FrameConnection;

/**
 * A destination group inside the daemon: holds its volumes open (so nothing else writes them), runs the applier
 * for as long as the daemon runs, and one {@link GroupReceiver} per session from the source. A source that
 * reconnects supersedes its previous session. Conductor thread only.
 */
final class DestinationGroupHandle
{
    final GroupConfig config;
    private final Conductor conductor;
    private final GroupStore store;
    private DestinationGroup group;
    private AgentRunner applierRunner;
    private GroupReceiver receiver;
    private AgentRunner receiverRunner;
    private AgentRunner forcerRunner;
    private LogForcer forcer;
    private String transport;
    private String failure;
    // The applier's failure last reported in the log, and the LSN applied then: progress past it means recovered.
    private String reportedApplyFailure;
    /** A damaged link is logged at most this often, with the count since the last line. */
    private static final long DAMAGE_REPORT_INTERVAL_MS = 10_000;
    private long reportedDamage;
    private long damageReportedMs;
    private long appliedAtApplyFailure;
    // The LSN from which a damaged record and those after it are being dropped from the log (0: none).
    private long droppingFromLsn;
    private String lastError;
    private long sessions;
    private long linkedSinceMs;
    private TestMount testMount;
    private String testMountError;
    // Who asked for a test mount not yet served (TestMount.isMounted), answered when it is.
    private ControlServer.Client testMountClient;
    private Object testMountId;
    private final RpoTarget rpoTarget = new RpoTarget();
    /** When the last session from the source ended (0: none yet): how long a failover has been waiting. */
    private long unlinkedSinceMs;
    /** While linked, the source's last report is saved this often too (see SourceReport), not only at the end. */
    private static final long SOURCE_REPORT_SAVE_INTERVAL_NS = TimeUnit.SECONDS.toNanos(10);
    private long sourceReportSavedNs;
    /**
     * The records not yet applied when the session ends for a move to a new log: they are applied before it (the
     * new log starts empty), while the source waits to reconnect (half a second); more, and the move waits.
     */
    static final long LOG_SWAP_BACKLOG_BYTES = 16L << 20;
    /**
     * How long the move waits for the applier to come within {@link #LOG_SWAP_BACKLOG_BYTES}; then it moves anyway,
     * the session pausing while the applier applies the rest. Under a load the applier only just keeps up with
     * (a log resized because it was filling, say) the backlog never fell that low, and the move waited until the
     * load stopped: measured here with 1 MiB writes, the whole 256 MiB log unapplied for as long as they ran.
     */
    static final long LOG_SWAP_BACKLOG_WAIT_NS = TimeUnit.SECONDS.toNanos(10);
    /**
     * The log follows its source's size (the OPEN says it, after a resize there): the size asked (0: no OPEN
     * yet), the new log being written beside the group's and then opened, and a size this host failed to move to,
     * not tried again until the source asks another or the daemon restarts.
     */
    private long wantedLogSize;
    private LogPreparer.Preparation logResize;
    private RecordLog resizedLog;
    private long failedLogSize;
    private String logResizeWait;
    private String logResizeError;
    private long swapStartNs;
    // When the new log began waiting for the applier's backlog (0: it is not); set afresh for each resize.
    private long backlogWaitSinceNs;

    DestinationGroupHandle(final Conductor conductor, final GroupStore store, final GroupConfig config)
    {
        this.conductor = conductor;
        this.store = store;
        this.config = config;
    }

    /**
     * Checks the destination volumes as {@link #open} will, and lets them go: a new group's volumes are checked
     * before its log is written.
     */
    void checkVolumes()
    {
        for (final GroupConfig.VolumePair pair : config.volumes)
        {
            try (Volume volume = Volume.open(Path.of(pair.target), true))
            {
                checkSize(pair, volume);
            }
        }
    }

    private void checkSize(final GroupConfig.VolumePair pair, final Volume volume)
    {
        if (volume.size() < pair.size)
        {
            throw new BlockmoverException(ErrorCode.VOLUME_TOO_SMALL, volume.tooSmallFor("destination " +
                pair.target + " on " + conductor.ctx().nodeName(), pair.size));
        }
    }

    void open()
    {
        final Volume[] volumes = new Volume[config.volumes.size()];
        RecordLog log = null;
        try
        {
            for (int i = 0; i < volumes.length; i++)
            {
                final GroupConfig.VolumePair pair = config.volumes.get(i);
                volumes[i] = Groups.openVolume(pair.target, "and the group opens again when " +
                    config.peer + ", its source, next connects, or now with 'blockmover group resume " +
                    config.name + "' (for a failover while " + config.peer + " is down)");
                checkSize(pair, volumes[i]);
            }
            if (TestMount.removeLeftover(store.dir(config.name)))
            {
                conductor.log("group " + config.name + ": a test mount does not survive a restart; its views were " +
                    "removed (mount again with 'blockmover group test-failover mount " + config.name + "')");
            }
            store.adoptLogOnDisk(config, conductor);
            final LogRecoveryProgress progress = new LogRecoveryProgress(conductor, config.name);
            log = RecordLog.open(store.dir(config.name).resolve(SourceGroupHandle.LOG_FILE), config.logSize,
                config.regionLength,
                progress);
            progress.done(log.recovery());
            if (log.headLsn() == RecordLog.NULL_LSN)
            {
                log.reset(1);
            }
            group = new DestinationGroup(config, volumes, log, conductor.clock(), conductor.ctx().flushBytes(),
                conductor.ctx().flushIntervalNs(), new DurableConsistency(store.dir(config.name)));
            group.sourceReport().load(store.dir(config.name).resolve(SourceReport.FILE_NAME));
        }
        catch (final RuntimeException ex)
        {
            for (final Volume v : volumes)
            {
                if (v != null)
                {
                    v.close();
                }
            }
            CloseHelper.quietClose(log);
            throw ex;
        }
        store.saveRun(config.name, false);
        applierRunner = conductor.newRunner(group, group.idleStrategy());
        AgentRunner.startOnThread(applierRunner);
        // Open after all, when its source connected again once the volume was back: the error is history.
        failure = null;
    }

    boolean isOpen()
    {
        return group != null;
    }

    boolean isReceiving()
    {
        return receiver != null;
    }

    /**
     * @return whether the volumes hold a crash-consistent prefix of the source's writes (no unfinished resync).
     */
    boolean isConsistent()
    {
        return group != null && group.isConsistent();
    }

    /**
     * @return whether every record held has been applied to the volumes.
     */
    boolean isApplied()
    {
        return group != null && group.appliedLsn() >= group.log().tailLsn();
    }

    void failed(final String message)
    {
        failure = message;
    }

    /**
     * Forces the log: the applier then applies everything held (it applies only what is durable there).
     */
    void forceLog()
    {
        if (group == null)
        {
            return;
        }
        try
        {
            group.forceLog();
        }
        catch (final java.io.UncheckedIOException ex)
        {
            // The disk under the log, not a bug: say so, and which file.
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot force the log of group " + config.name + " (" +
                group.log().path() + "): " + ex.getMessage() + "; see the daemon's log and the disk", ex);
        }
    }

    /**
     * @return the highest LSN this side holds: where the source continues.
     */
    long heldLsn()
    {
        return group.log().tailLsn();
    }

    long appliedLsn()
    {
        return group.appliedLsn();
    }

    /**
     * @return what the source last said about how far ahead of this host it is ({@code source_report} of group
     *     status), or null if it said nothing since this daemon started (or the group is not open).
     */
    Map<String, Object> sourceReport()
    {
        return group == null ? null : group.sourceReport().describe(heldLsn(), System.currentTimeMillis());
    }

    /**
     * Ends a previous session still running (its source reconnected before this side saw it go) and forces the
     * log, for the OPENED answer: the source counts every record held here as durable (it releases its own log by
     * it and acknowledges FLUSHes by it), so none may sit unforced.
     *
     * @return the highest LSN this side holds, durably.
     */
    long forceHeld()
    {
        if (group.damagedLsn() != 0)
        {
            // The held LSN is about to go down (dropDamaged): answering now would skip the records to resend.
            throw new BlockmoverException(ErrorCode.BUSY, "group " + config.name + " on " +
                conductor.ctx().nodeName() + " is dropping records damaged in its log from LSN " + group.damagedLsn() +
                "; ask again shortly");
        }
        closeLingeringSession();
        group.forceLog();
        return heldLsn();
    }

    /**
     * @return the regions of the records last dropped from the log, once, or null.
     */
    List<long[]> takeDroppedRegions()
    {
        return group.takeDroppedRegions();
    }

    private void closeLingeringSession()
    {
        if (receiver != null)
        {
            conductor.log("group " + config.name + ": " + config.peer + " reconnected, closing its previous session");
            closeSession();
        }
    }

    /**
     * @param resend whether the source resends a record this side got damaged (NACK) instead of reconnecting.
     * @param flushHints whether the source marks the records its clients' FLUSHes may soon wait for; an older one
     *                   does not, and a sync partner then forces after every batch, as it did.
     */
    void startSession(final FrameConnection connection, final int sessionId, final boolean resend,
        final boolean flushHints)
    {
        closeLingeringSession();
        transport = connection.transportName();
        forcer = new LogForcer(group, group.log().tailLsn());
        receiver = new GroupReceiver(group, connection, sessionId, conductor.clock(),
            conductor.ctx().heartbeatIntervalNs(), conductor.ctx().peerTimeoutNs(), conductor.ctx().flushBytes(),
            conductor.ctx().flushIntervalNs(), conductor.cnc().counter(SystemCounter.PAYLOAD_CRC_ERRORS),
            conductor.cnc().counter(SystemCounter.FRAME_ERRORS), forcer);
        forcerRunner = conductor.newRunner(forcer, forcer.idleStrategy());
        AgentRunner.startOnThread(forcerRunner);
        if (resend)
        {
            receiver.askForResends();
        }
        if (flushHints)
        {
            receiver.followFlushHints();
        }
        // No spins, as for the source's shipper: a spin is a failed read system call.
        receiverRunner = conductor.newRunner(receiver, new ConnectionIdleStrategy(connection, receiver, 0));
        AgentRunner.startOnThread(receiverRunner);
        sessions++;
        linkedSinceMs = System.currentTimeMillis();
        lastError = null;
        conductor.log("group " + config.name + ": receiving from " + config.peer + " over " + transport + " from LSN " +
            (heldLsn() + 1));
    }

    int doWork(final long nowNs)
    {
        if (finishTestMount(nowNs))
        {
            return 1;
        }
        if (testMount != null && testMount.isMounted() && testMount.failure() != null)
        {
            testMountError = testMount.failure();
            conductor.error("group " + config.name + ": test mount failed and was dismounted (replication goes " +
                "on): " + testMountError);
            testMount.dismount();
            testMount = null;
            return 1;
        }
        final int reported = reportApplyFailure() + adoptSettings() + reportDamage() + dropDamaged() + checkRpo() +
            stepLogResize();
        saveSourceReportWhenDue(nowNs);
        if (receiver == null || receiver.status().isRunning())
        {
            return reported;
        }
        lastError = receiver.status().message();
        unlinkedSinceMs = System.currentTimeMillis();
        conductor.log("group " + config.name + ": session from " + config.peer + " ended: " + lastError);
        closeSession();
        return 1;
    }

    /**
     * The source's OPEN gives its log's size: this host's log follows it (a resize there), so that after a switch
     * the group has the log the admin set. It is written beside the group's while the session goes on.
     */
    void followLogSize(final long size)
    {
        if (size != wantedLogSize)
        {
            failedLogSize = 0;
        }
        wantedLogSize = size;
    }

    /**
     * @return the size this host's log is following its source's to and has not reached yet (0: none): after a
     *     switch or a failover, the resize goes on here as the source's own.
     */
    long followingLogSize()
    {
        return wantedLogSize != 0 && wantedLogSize != config.logSize && wantedLogSize != failedLogSize ?
            wantedLogSize : 0;
    }

    /**
     * @return why this host's log could not follow its source's size, or null.
     */
    String logResizeError()
    {
        return logResizeError;
    }

    /**
     * @return whether this host is moving to a new log: the session is ended for it, and an OPEN must wait.
     */
    boolean isSwappingLog()
    {
        return resizedLog != null;
    }

    /**
     * A step of following the source's log size: write the new log beside the group's (the session goes on), then,
     * once the applier has little left to apply, end the session and have the applier apply the rest and move to
     * the new log, empty at the next LSN ({@link DestinationGroup#requestLogReplacement}); the source reconnects to
     * it. Nothing is resent: the new log holds no record the source must send again.
     */
    private int stepLogResize()
    {
        if (group == null)
        {
            return 0;
        }
        if (resizedLog != null)
        {
            return finishLogSwap();
        }
        final Path file = store.dir(config.name).resolve(SourceGroupHandle.RESIZED_LOG_FILE);
        if (logResize == null)
        {
            if (wantedLogSize == 0 || wantedLogSize == config.logSize || wantedLogSize == failedLogSize)
            {
                return 0;
            }
            try
            {
                RecordLog.checkRoomFor(file, wantedLogSize);
            }
            catch (final BlockmoverException ex)
            {
                return logResizeFailed(wantedLogSize, ex.getMessage());
            }
            logResizeError = null;
            logResizeWait = null;
            backlogWaitSinceNs = 0; // Every resize waits afresh: each begins here.
            logResize = conductor.groups().logPreparer().prepare(file, wantedLogSize, config.regionLength,
                config.name, config.peer);
            conductor.log("group " + config.name + ": its log follows " + config.peer + "'s to " + wantedLogSize +
                " bytes: writing it beside the " + config.logSize + "-byte one (replication goes on)");
            return 1;
        }
        if (!logResize.isDone())
        {
            return 0;
        }
        if (logResize.capacity != wantedLogSize)
        {
            // The source's log changed size again (or back) meanwhile: start over for the size it has now.
            logResize = null;
            logResizeWait = null;
            deleteQuietly(file);
            return 1;
        }
        try
        {
            logResize.check();
        }
        catch (final BlockmoverException ex)
        {
            logResize = null;
            return logResizeFailed(wantedLogSize, ex.getMessage());
        }
        final long nowNs = System.nanoTime();
        final long unapplied = group.unappliedBytes();
        final boolean behind = unapplied > LOG_SWAP_BACKLOG_BYTES;
        if (!behind)
        {
            backlogWaitSinceNs = 0;
        }
        else if (backlogWaitSinceNs == 0)
        {
            backlogWaitSinceNs = nowNs;
        }
        final boolean waitedLongEnough = behind && nowNs - backlogWaitSinceNs >= LOG_SWAP_BACKLOG_WAIT_NS;
        final String wait = group.failure() != null ? "the applier to recover (" + group.failure() + ")" :
            group.damagedLsn() != 0 ? "damaged records to be dropped" :
            testMount != null ? "the test failover to be dismounted" :
            behind && !waitedLongEnough ? "the applier to catch up (" + io.blockmover.cli.Format.bytes(unapplied) +
                " unapplied)" : null;
        if (wait != null)
        {
            if (logResizeWait == null)
            {
                conductor.log("group " + config.name + ": its new " + logResize.capacity + "-byte log waits for " +
                    wait);
            }
            logResizeWait = wait;
            return 0;
        }
        try
        {
            resizedLog = RecordLog.open(file, logResize.capacity, config.regionLength);
        }
        catch (final BlockmoverException | java.io.UncheckedIOException ex)
        {
            logResize = null;
            return logResizeFailed(wantedLogSize, ex.getMessage());
        }
        swapStartNs = System.nanoTime();
        if (waitedLongEnough)
        {
            conductor.log("group " + config.name + ": its applier stayed more than " +
                io.blockmover.cli.Format.bytes(LOG_SWAP_BACKLOG_BYTES) + " behind for " +
                TimeUnit.NANOSECONDS.toSeconds(LOG_SWAP_BACKLOG_WAIT_NS) + " s (" +
                io.blockmover.cli.Format.bytes(unapplied) + " unapplied now): moving to the new log anyway, the " +
                "session pausing while they are applied");
        }
        if (receiver != null)
        {
            conductor.log("group " + config.name + ": ending the session from " + config.peer + " to move to the new " +
                "log; it reconnects to it");
            closeSession(ErrorCode.BUSY, "moving to a new log of its size; reconnect shortly");
        }
        group.requestLogReplacement(resizedLog, store.dir(config.name).resolve(SourceGroupHandle.LOG_FILE),
            conductor::wakeUp, conductor.groups().logPreparer()::closeReplaced);
        return 1;
    }

    /**
     * The applier moves to the new log: once it is done (or failed), close the log it replaced and keep the size.
     */
    private int finishLogSwap()
    {
        final int state = group.logReplacementState();
        if (state == DestinationGroup.REPLACEMENT_REQUESTED && group.failure() != null &&
            group.cancelLogReplacement())
        {
            // The volumes failed while the last records were applied: wait for them as before, sessions go on.
            resizedLog.close();
            resizedLog = null;
            return 1;
        }
        if (state != DestinationGroup.REPLACEMENT_DONE && state != DestinationGroup.REPLACEMENT_FAILED)
        {
            return 0;
        }
        final String error = group.logReplacementError();
        group.endLogReplacement();
        final long size = logResize.capacity;
        final long was = config.logSize;
        if (group.log() == resizedLog)
        {
            // Renamed into place (even when its directory's force then failed): it is the group's log now.
            config.logSize = size;
            store.save(config);
        }
        else
        {
            resizedLog.closeReplaced();
        }
        resizedLog = null;
        logResize = null;
        logResizeWait = null;
        if (error != null)
        {
            return logResizeFailed(size, error);
        }
        conductor.log(String.format(java.util.Locale.ROOT, "group %s: its log is now %d bytes (was %d), as %s's " +
            "is; the move took %.1f ms without a session", config.name, size, was, config.peer,
            (System.nanoTime() - swapStartNs) / 1e6));
        return 1;
    }

    private int logResizeFailed(final long size, final String why)
    {
        failedLogSize = size;
        logResizeError = "the log was not resized to " + size + " bytes, as " + config.peer + "'s is: " + why;
        conductor.log("group " + config.name + ": " + logResizeError + "; it keeps its " + config.logSize +
            "-byte log (tried again when " + config.peer + "'s log changes size, or this daemon restarts)");
        if (receiver != null)
        {
            // The source hears why in its next OPENED (log_resize_error) and shows it: without this, only after
            // the next lost link, which may be weeks away, while it showed the old size with no reason.
            conductor.log("group " + config.name + ": ending the session from " + config.peer + " so that it " +
                "hears why; it reconnects at once");
            closeSession(ErrorCode.BUSY, "this host's log could not follow yours; reconnect to hear why");
        }
        deleteQuietly(store.dir(config.name).resolve(SourceGroupHandle.RESIZED_LOG_FILE));
        return 1;
    }

    private static void deleteQuietly(final Path file)
    {
        try
        {
            java.nio.file.Files.deleteIfExists(file);
        }
        catch (final java.io.IOException ignored)
        {
            // Deleted at the group's next open.
        }
    }

    /**
     * A record damaged in this host's log stops the applier at it: end the session, so nothing is appended any
     * more, and have the applier drop it with every record after it; the source then sends them again when it
     * reconnects (its OPEN is refused until the drop is done).
     */
    private int dropDamaged()
    {
        if (group == null)
        {
            return 0;
        }
        final long damaged = group.damagedLsn();
        if (damaged == 0)
        {
            if (droppingFromLsn != 0)
            {
                conductor.log("group " + config.name + ": records from LSN " + droppingFromLsn + " on dropped from " +
                    "its log (" + group.recordsDropped() + " since start); " + config.peer + " sends them again");
                droppingFromLsn = 0;
                return 1;
            }
            return 0;
        }
        if (droppingFromLsn != 0)
        {
            return 0;
        }
        droppingFromLsn = damaged;
        if (receiver != null)
        {
            lastError = "record LSN " + damaged + " is damaged in this host's log: dropping it and those after it";
            unlinkedSinceMs = System.currentTimeMillis();
            closeSession();
        }
        group.dropDamagedRecords();
        return 1;
    }

    private int adoptSettings()
    {
        final Map<String, Object> settings = receiver != null ? receiver.takeSettings() : null;
        if (settings == null || !config.adoptSettings(settings))
        {
            return 0;
        }
        store.save(config);
        conductor.log("group " + config.name + ": settings from " + config.peer + " kept for a switch: RPO target " +
            RpoTarget.format(config.rpoTargetMs) + ", verify every " +
            io.blockmover.replication.verify.VerifyInterval.format(config.verifyIntervalMs) + ", on-disconnect " +
            config.onDisconnectLabel());
        return 1;
    }

    /**
     * Damaged records no longer end the session (they are asked for again), so without this line a failing NIC,
     * cable or memory would show only in the counters.
     */
    private int reportDamage()
    {
        if (group == null)
        {
            return 0;
        }
        final long damaged = group.damagedRecords() + group.badFrames();
        if (damaged == reportedDamage)
        {
            return 0; // The usual case, on every conductor cycle: no clock read.
        }
        final long nowMs = System.currentTimeMillis();
        if (nowMs - damageReportedMs < DAMAGE_REPORT_INTERVAL_MS)
        {
            return 0;
        }
        conductor.log("group " + config.name + ": " + (damaged - reportedDamage) + " record(s) from " + config.peer +
            " arrived damaged (CRC32C mismatch) or unreadable" + (reportedDamage == 0 ? "" : " in the last " +
            (nowMs - damageReportedMs) / 1000 + " s") + "; each was sent again (" + damaged + " since start: a " +
            "steady count points at a faulty NIC, cable or memory between the hosts)");
        reportedDamage = damaged;
        damageReportedMs = nowMs;
        return 1;
    }

    private int reportApplyFailure()
    {
        if (group == null)
        {
            return 0;
        }
        final String applyFailure = group.failure();
        if (applyFailure != null && !applyFailure.equals(reportedApplyFailure))
        {
            if (reportedApplyFailure == null)
            {
                appliedAtApplyFailure = group.appliedLsn();
            }
            reportedApplyFailure = applyFailure;
            conductor.error("group " + config.name + ": " + applyFailure);
            return 1;
        }
        if (applyFailure == null && reportedApplyFailure != null && group.appliedLsn() > appliedAtApplyFailure)
        {
            reportedApplyFailure = null;
            conductor.log("group " + config.name + ": applying again (LSN " + group.appliedLsn() + " applied, " +
                group.applyFailures() + " failed attempts so far)");
            return 1;
        }
        return 0;
    }

    private void closeSession()
    {
        closeSession(null, null);
    }

    /**
     * @param code    what the source is told, once the receiver has stopped; null: nothing (it sees the close).
     * @param message why.
     */
    private void closeSession(final ErrorCode code, final String message)
    {
        if (receiverRunner != null)
        {
            receiver.status().fail(ErrorCode.CANCELLED, "session closed", true);
            CloseHelper.quietClose(receiverRunner);
            forcer.stop();
            CloseHelper.quietClose(forcerRunner);
            if (code != null)
            {
                receiver.sendError(code, message);
            }
            receiver.connection().close();
            receiverRunner = null;
            forcerRunner = null;
            forcer = null;
            receiver = null;
            saveSourceReport(true);
        }
    }

    /**
     * The group's RPO target, checked here too against the RPO its source last reported (with the same hysteresis
     * as on the source): the DR site's events and metrics say when it is exceeded, without asking the source.
     */
    private int checkRpo()
    {
        final double rpoSeconds = group == null ? Double.NaN : group.sourceReport().rpoSeconds();
        if (Double.isNaN(rpoSeconds) || !rpoTarget.update(rpoSeconds, config.rpoTargetMs))
        {
            return 0;
        }
        conductor.log("group " + config.name + ": RPO " + String.format(java.util.Locale.ROOT, "%.1f", rpoSeconds) +
            " s, as " + config.peer + " reports it, " + (rpoTarget.isExceeded() ? "exceeds" : "is back within") +
            " its target of " + RpoTarget.format(config.rpoTargetMs));
        return 1;
    }

    /**
     * While linked: a crash of this daemon or host ends no session, so the report would otherwise be saved only at
     * the end of the one before.
     */
    private void saveSourceReportWhenDue(final long nowNs)
    {
        if (receiver != null && nowNs - sourceReportSavedNs >= SOURCE_REPORT_SAVE_INTERVAL_NS)
        {
            sourceReportSavedNs = nowNs;
            saveSourceReport(false);
        }
    }

    /**
     * Keeps what the source last said across a restart of this daemon: a failover may follow one.
     *
     * @param durable forced to the disk (when a session ends), or only replaced (while linked).
     */
    private void saveSourceReport(final boolean durable)
    {
        if (group == null)
        {
            return;
        }
        final Path file = store.dir(config.name).resolve(SourceReport.FILE_NAME);
        try
        {
            group.sourceReport().save(file, durable);
        }
        catch (final java.io.IOException ex)
        {
            conductor.error("group " + config.name + ": cannot save what " + config.peer + " last reported to " +
                file + " (" + ex.getMessage() + "): a restart of this daemon forgets it");
        }
    }

    /**
     * Mounts a test failover: writable views of the volumes holding everything this side holds now, served over
     * NBD. Answered once the applier has applied that far (at once, unless the log holds a backlog): its log is
     * forced first, as the applier applies only what is durable there; the receiver forces it only every
     * flush.interval, or when the source asks.
     *
     * @param exports the NBD server's exports.
     * @param client  who asks: answered with the group's status, the mount in it, or with why not.
     * @param id      the request's id.
     */
    void testMount(final ExportRegistry exports, final ControlServer.Client client, final Object id)
    {
        if (group == null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " is not open" +
                (failure != null ? ": " + failure : ""));
        }
        if (testMount != null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " is test-mounted " +
                "already (" + (testMount.isMounted() ? "LSN " + testMount.lsn() + "): use its exports, or " :
                "waiting for its applier to reach LSN " + testMount.fromLsn() + "): wait for it, or ") +
                "'blockmover group test-failover dismount " + config.name + "' first");
        }
        if (conductor.groups().nbdUri("") == null)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "this host has no NBD server to serve the test " +
                "views: set nbd.socket or nbd.listen in blockmoverd.conf and restart");
        }
        // Read before the force: every record it covers is durable after it.
        final long fromLsn = heldLsn();
        forceLog();
        final long nowNs = conductor.clock().nanoTime();
        testMount = TestMount.begin(config, group, store.dir(config.name), exports, conductor.ctx().nodeName(),
            fromLsn, nowNs);
        testMountError = null;
        testMountClient = client;
        testMountId = id;
        if (!finishTestMount(nowNs) && group.appliedLsn() < fromLsn)
        {
            conductor.log("group " + config.name + ": test failover waits for the log to be applied (LSN " +
                group.appliedLsn() + " of " + fromLsn + ")");
        }
    }

    /**
     * Serves a test mount once the applier has reached its LSN, and answers whoever asked for it.
     *
     * @return whether a waiting mount was answered.
     */
    private boolean finishTestMount(final long nowNs)
    {
        if (testMount == null || testMount.isMounted())
        {
            return false;
        }
        final ControlServer.Client client = testMountClient;
        final Object id = testMountId;
        try
        {
            if (!testMount.tryFinish(nowNs))
            {
                return false;
            }
        }
        catch (final BlockmoverException ex)
        {
            // tryFinish gave the mount up.
            testMount = null;
            testMountClient = null;
            testMountId = null;
            conductor.log("group " + config.name + ": test failover not mounted: " + ex.getMessage());
            client.error(id, ex.code(), ex.getMessage());
            return true;
        }
        testMountClient = null;
        testMountId = null;
        conductor.log("group " + config.name + ": test failover mounted at LSN " + testMount.lsn() +
            " (replication goes on underneath)");
        client.reply(id, status());
        return true;
    }

    /**
     * Gives up a test mount not yet served, answering whoever asked for it.
     */
    private void cancelTestMount(final String why)
    {
        testMount.dismount();
        testMount = null;
        testMountClient.error(testMountId, ErrorCode.INVALID_STATE, "test mount of group " + config.name +
            " not done: " + why);
        testMountClient = null;
        testMountId = null;
    }

    /**
     * Dismounts the test failover, throwing its writes away.
     *
     * @return the group's status.
     */
    Map<String, Object> testDismount()
    {
        if (testMount == null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + config.name + " has no test mount" +
                (testMountError != null ? " (the last one failed: " + testMountError + ")" : "") +
                ": mount one with 'blockmover group test-failover mount " + config.name + "'");
        }
        if (!testMount.isMounted())
        {
            cancelTestMount("dismounted before its applier reached LSN " + testMount.fromLsn());
            conductor.log("group " + config.name + ": test failover cancelled before it was mounted");
            return status();
        }
        testMount.dismount();
        testMount = null;
        conductor.log("group " + config.name + ": test failover dismounted, its writes discarded");
        return status();
    }

    void close()
    {
        if (testMount != null && !testMount.isMounted())
        {
            cancelTestMount("the group closed while its applier applied the log (see 'blockmover group status " +
                config.name + "' and the daemon's log)");
        }
        if (testMount != null)
        {
            testMount.dismount();
            testMount = null;
            conductor.log("group " + config.name + ": test failover dismounted (the group closed), its writes " +
                "discarded");
        }
        closeSession();
        CloseHelper.quietClose(applierRunner);
        applierRunner = null;
        if (resizedLog != null && !group.cancelLogReplacement())
        {
            finishLogSwap(); // The applier ended it: done or failed.
        }
        if (resizedLog != null)
        {
            resizedLog.close();
            resizedLog = null;
        }
        if (logResize != null)
        {
            // Its new log goes once the preparer is done with it; the next open drops it if the daemon stops first.
            logResize.cancel();
            logResize.discardWhenDone(store.dir(config.name).resolve(SourceGroupHandle.RESIZED_LOG_FILE));
            logResize = null;
        }
        if (group != null)
        {
            group.close();
            group = null;
            store.saveRun(config.name, true);
        }
    }

    GroupState state()
    {
        if (group == null || group.failure() != null)
        {
            return GroupState.FAILED;
        }
        return receiver != null ? GroupState.RECEIVING : GroupState.WAITING;
    }

    Map<String, Object> status()
    {
        final Map<String, Object> s = config.statusHead(state().label());
        s.put("transport", receiver != null ? transport : null);
        if (failure != null)
        {
            s.put("error", failure);
        }
        if (group != null && group.failure() != null)
        {
            s.put("error", group.failure());
        }
        if (lastError != null)
        {
            s.put("last_error", lastError);
        }
        s.put("linked_since_ms", receiver != null ? linkedSinceMs : 0);
        s.put("unlinked_since_ms", receiver != null ? 0 : unlinkedSinceMs);
        s.put("sessions", sessions);
        final List<Map<String, Object>> vols = new ArrayList<>();
        for (final GroupConfig.VolumePair pair : config.volumes)
        {
            final Map<String, Object> v = new LinkedHashMap<>();
            v.put("source", pair.source);
            v.put("target", pair.target);
            v.put("size", pair.size);
            vols.add(v);
        }
        s.put("volumes", vols);
        if (group != null)
        {
            final Map<String, Object> lsn = new LinkedHashMap<>();
            lsn.put("held", group.log().tailLsn());
            lsn.put("applied", group.appliedLsn());
            s.put("lsn", lsn);
            final Map<String, Object> log = new LinkedHashMap<>();
            log.put("size", group.log().capacity());
            log.put("used", group.log().usedBytes());
            s.put("log", log);
            s.put("records_applied", group.recordsApplied());
            // Records of zeros applied as a hole or a device's WRITE ZEROES, keeping a thin destination thin.
            s.put("bytes_deallocated", group.bytesDeallocated());
            s.put("apply_failures", group.applyFailures());
            s.put("records_dropped", group.recordsDropped());
            s.put("consistent", group.isConsistent());
            // Since the daemon started, over all sessions: each damaged record or frame ends its session, so a
            // per-session count would read 0 again a moment later.
            s.put("checksum_failures", group.damagedRecords());
            s.put("frame_errors", group.badFrames());
            // Survives restarts and needs no source: what a failover ('switch --force') checks.
            s.put("consistent_through_lsn", group.durableCleanLsn());
            // How far behind the source this host is, as the source last said (kept, aging, once it is gone).
            final Map<String, Object> report = sourceReport();
            if (report != null)
            {
                s.put("source_report", report);
                if (config.rpoTargetMs > 0)
                {
                    // As on the source, from the reported RPO: events say rpo=exceeded here too.
                    s.put("rpo_target_s", config.rpoTargetMs / 1000.0);
                    s.put("rpo_target_exceeded", rpoTarget.isExceeded());
                }
            }
            if (receiver != null)
            {
                s.put("records_received", receiver.recordsReceived());
                s.put("log_force", receiver.forcesEveryBatch() ? "every_batch" : "when_due");
                s.put("bytes_received", receiver.connection().bytesReceived());
                s.put("bytes_sent", receiver.connection().bytesSent());
            }
            io.blockmover.replication.group.GroupStatus.describe(group, s);
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
        if (testMount != null && !testMount.isMounted())
        {
            s.put("test_mount_pending", testMount.pendingStatus(conductor.clock().nanoTime()));
        }
        else if (testMount != null)
        {
            s.put("test_mount", testMount.status(conductor.groups()));
        }
        else if (testMountError != null)
        {
            s.put("test_mount_error", testMountError);
        }
        return s;
    }
}
