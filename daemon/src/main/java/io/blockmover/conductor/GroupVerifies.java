package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.group.GroupState;
import io.blockmover.replication.group.SourceGroup;
import io.blockmover.replication.verify.SourceVerifier;
import io.blockmover.replication.verify.VerifyInterval;

/**
 * Verify jobs of the source groups of this host: 'blockmover verify GROUP [--repair]' and the scheduled verify
 * (group option verify_interval_ms). A job compares every region of every volume through the ordered stream (see
 * io.blockmover.replication.verify), reports the ranges that differ and, with repair, marks their regions dirty
 * so the resyncer resends them; it ends when the resends are logged, so a verify started afterwards compares
 * the repaired data. The last result of each group is kept in verify.json beside group.json, so 'group status'
 * and the schedule survive a restart. Conductor thread only.
 */
final class GroupVerifies
{
    private static final long POLL_NS = 200_000_000L;
    private static final long SCHEDULE_POLL_NS = 1_000_000_000L;
    private static final long STALL_NS = 60_000_000_000L;
    private static final long RETRY_FAILED_MS = 10 * 60_000L;
    private static final long SEED_RETRY_NS = 2_000_000_000L;

    private final Conductor conductor;
    private final GroupStore store;
    private final Map<String, SourceGroupHandle> sources;
    private final Map<String, DestinationGroupHandle> destinations;
    private final Map<String, Job> jobs = new HashMap<>();
    private final Map<String, Map<String, Object>> lastResults = new HashMap<>();
    private final List<Job> running = new ArrayList<>();
    /** Seeded groups: the region the next seed verify starts from (a failed one resumes where it was answered). */
    private final Map<String, Long> seedResume = new HashMap<>();
    private final Map<String, Long> seedRetryNs = new HashMap<>();
    private long nextJobId = System.currentTimeMillis() * 1000;
    private long nextPollNs;
    private long nextScheduleNs;
    private long nextSeedNs;

    /**
     * One verify of one group.
     */
    private static final class Job
    {
        final long id;
        final String group;
        final boolean repair;
        final boolean scheduled;
        /** The initial sync of a seeded group: compare everything, resend what differs. */
        final boolean seed;
        final long startedMs = System.currentTimeMillis();
        final SourceGroup source;
        final SourceVerifier verifier;
        final long totalRegions;
        String state = "verifying";
        long finishedMs;
        long compared;
        long counted;
        long progress = -1;
        long progressNs;
        long skipped;
        long different;
        long repaired;
        List<long[]> mismatches = List.of();
        ErrorCode errorCode;
        String error;

        Job(final long id, final String group, final boolean repair, final boolean scheduled, final boolean seed,
            final SourceGroup source, final SourceVerifier verifier)
        {
            this.id = id;
            this.group = group;
            this.repair = repair;
            this.scheduled = scheduled;
            this.seed = seed;
            this.source = source;
            this.verifier = verifier;
            this.totalRegions = verifier.totalRegions();
        }

        boolean isRunning()
        {
            return state.equals("verifying") || state.equals("repairing");
        }
    }

    GroupVerifies(final Conductor conductor, final GroupStore store, final Map<String, SourceGroupHandle> sources,
        final Map<String, DestinationGroupHandle> destinations)
    {
        this.conductor = conductor;
        this.store = store;
        this.sources = sources;
        this.destinations = destinations;
    }

    /**
     * @return whether a request was a verify operation (and was answered).
     */
    boolean onRequest(final ControlServer.Client client, final Object id, final String op,
        final Map<String, Object> args, final String name)
    {
        switch (op)
        {
            case "group-verify" -> client.reply(id, describe(start(name, Boolean.TRUE.equals(args.get("repair")),
                false, args.get("max_rate") instanceof Number n ? n.longValue() : 0)));
            case "group-verify-status" -> client.reply(id, verifyStatus(name));
            case "group-verify-schedule" -> client.reply(id, schedule(name, args.get("interval_ms")));
            default ->
            {
                return false;
            }
        }
        return true;
    }

    private SourceGroupHandle source(final String name)
    {
        final SourceGroupHandle handle = sources.get(name);
        if (handle != null)
        {
            return handle;
        }
        final DestinationGroupHandle destination = destinations.get(name);
        if (destination != null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is a destination here: " +
                "verify runs on its source; run 'blockmover verify " + name + "' on " + destination.config.peer);
        }
        throw new BlockmoverException(ErrorCode.NO_SUCH_GROUP, "no group '" + name + "' on " +
            conductor.ctx().nodeName() + " (see 'blockmover group status')");
    }

    private Job start(final String name, final boolean repair, final boolean scheduled, final long maxRate)
    {
        final SourceGroupHandle handle = source(name);
        final Job current = jobs.get(name);
        if (current != null && current.isRunning())
        {
            throw new BlockmoverException(ErrorCode.BUSY, "a verify of group " + name + " is already running (" +
                current.compared + " of " + current.totalRegions + " regions compared): wait for it, or follow it " +
                "with 'blockmover group status " + name + "'");
        }
        final SourceGroup group = handle.group();
        final GroupConfig config = handle.config;
        if (group == null)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is not running here (see " +
                "'blockmover group status " + name + "' for why): nothing to verify");
        }
        final GroupState state = handle.state();
        if (state == GroupState.SUSPENDED)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is suspended: verify " +
                "compares both sides through the link; run 'blockmover group resume " + name + "' first");
        }
        if (state == GroupState.CONNECTING || state == GroupState.DEGRADED || !group.isLinked())
        {
            throw new BlockmoverException(ErrorCode.PEER_UNREACHABLE, "group " + name + " is not linked to " +
                config.peer + " (" + state.label() + "): verify compares both sides and needs the link; retry " +
                "once 'blockmover group status " + name + "' says replicating");
        }
        if (state == GroupState.INITIAL_SYNC || !config.initialSyncDone)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "group " + name + " is still in its initial " +
                "sync: " + (config.seeding ? "it is comparing every region with " + config.peer + " (seeded), " +
                "which is a verify with repair already" : "the destination is not a copy yet, so there is nothing " +
                "to verify") + "; run verify once 'blockmover group status " + name + "' says replicating");
        }
        if (!handle.partnerVerifies())
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, config.peer + " runs a blockmoverd that " +
                "cannot verify (it did not offer it when the group linked): upgrade blockmover there");
        }
        return launch(name, group, repair, scheduled, false, maxRate, 0);
    }

    private Job launch(final String name, final SourceGroup group, final boolean repair, final boolean scheduled,
        final boolean seed, final long maxRate, final long fromRegion)
    {
        SourceVerifier verifier = (SourceVerifier)group.verifier();
        if (verifier == null)
        {
            // Made on first use: it holds a region-sized read buffer.
            verifier = new SourceVerifier(group);
            group.verifier(verifier);
        }
        final Job job = new Job(nextJobId++, name, repair, scheduled, seed, group, verifier);
        verifier.start(job.id, maxRate, repair, fromRegion);
        jobs.put(name, job);
        running.add(job);
        conductor.log("group " + name + ": " + (seed ? "seeded initial sync: comparing regions" + (fromRegion > 0 ?
            " from region " + fromRegion : "") + ", verify " + job.id : (scheduled ? "scheduled " : "") + "verify " +
            job.id) + " started (" + job.totalRegions + " regions" + (repair ? ", repair" : "") + ")");
        return job;
    }

    /**
     * Starts or resumes the comparison of every seeded group that is linked and not comparing yet. A partner that
     * cannot verify cannot be compared with: the group falls back to sending every region.
     */
    private int seed(final long nowNs)
    {
        int started = 0;
        for (final SourceGroupHandle handle : sources.values())
        {
            final GroupConfig config = handle.config;
            final Job job = jobs.get(config.name);
            final SourceGroup group = handle.group();
            if (!config.seeding || (job != null && job.isRunning()) || group == null || config.suspended ||
                !group.isLinked() || handle.state() != GroupState.INITIAL_SYNC ||
                nowNs - seedRetryNs.getOrDefault(config.name, nowNs - 1) < 0)
            {
                continue;
            }
            if (!handle.partnerVerifies())
            {
                for (int i = 0; i < group.volumeCount(); i++)
                {
                    group.dirty(i).setAll();
                }
                group.forceBitmaps();
                handle.seedAbandoned(config.peer + " cannot compare checksums (its blockmoverd did not offer " +
                    "verify): every region will be sent");
                continue;
            }
            launch(config.name, group, true, false, true, 0, seedResume.getOrDefault(config.name, 0L));
            started++;
        }
        return started;
    }

    private Map<String, Object> verifyStatus(final String name)
    {
        final Job job = jobs.get(name);
        if (job != null)
        {
            return describe(job);
        }
        source(name);
        final Map<String, Object> last = lastResult(name);
        if (last == null)
        {
            throw new BlockmoverException(ErrorCode.NO_SUCH_JOB, "group " + name + " has never been verified: " +
                "'blockmover verify " + name + "'");
        }
        return last;
    }

    private Map<String, Object> schedule(final String name, final Object intervalMs)
    {
        final SourceGroupHandle handle = source(name);
        if (!(intervalMs instanceof Number n) || n.longValue() < 0)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "missing argument 'interval_ms' (0 = off)");
        }
        handle.config.verifyIntervalMs = n.longValue();
        store.save(handle.config);
        handle.settingsChanged();
        conductor.log("group " + name + ": scheduled verify " + VerifyInterval.format(n.longValue()));
        return handle.status();
    }

    int doWork(final long nowNs)
    {
        int work = 0;
        if (nowNs >= nextPollNs)
        {
            nextPollNs = nowNs + POLL_NS;
            for (int i = running.size() - 1; i >= 0; i--)
            {
                final Job job = running.get(i);
                poll(job, nowNs);
                if (!job.isRunning())
                {
                    running.remove(i);
                }
                work++;
            }
        }
        if (nowNs >= nextScheduleNs)
        {
            nextScheduleNs = nowNs + SCHEDULE_POLL_NS;
            work += schedule();
        }
        if (nowNs >= nextSeedNs)
        {
            nextSeedNs = nowNs + POLL_NS;
            work += seed(nowNs);
        }
        return work;
    }

    private void poll(final Job job, final long nowNs)
    {
        final SourceGroupHandle handle = sources.get(job.group);
        final SourceVerifier verifier = job.verifier;
        job.compared = verifier.compared();
        job.skipped = verifier.skipped();
        job.different = verifier.different();
        conductor.cnc().counter(SystemCounter.REGIONS_COMPARED).getAndAdd(job.compared - job.counted);
        job.counted = job.compared;
        if (handle == null || handle.group() != job.source)
        {
            fail(job, ErrorCode.INVALID_STATE, "group " + job.group + " stopped being a source here (deleted or " +
                "switched) during verify");
            return;
        }
        if (handle.config.suspended || !job.source.isLinked())
        {
            fail(job, ErrorCode.PEER_UNREACHABLE, "the link to " + handle.config.peer + " was lost during verify " +
                "(" + handle.state().label() + "): run it again once 'blockmover group status " + job.group +
                "' says replicating");
            return;
        }
        if (job.state.equals("verifying"))
        {
            if (verifier.failure() != null)
            {
                fail(job, ErrorCode.IO_ERROR, verifier.failure());
                return;
            }
            if (job.compared + job.skipped != job.progress)
            {
                job.progress = job.compared + job.skipped;
                job.progressNs = nowNs;
            }
            else if (nowNs - job.progressNs > STALL_NS)
            {
                fail(job, ErrorCode.PEER_UNREACHABLE, "no region compared for " + STALL_NS / 1_000_000_000L +
                    " s: " + (verifier.outstanding() > 0 ? handle.config.peer + " does not answer (see 'blockmover " +
                    "group status " + job.group + "' there)" : "the log has no room (see 'blockmover group status " +
                    job.group + "')"));
                return;
            }
            if (!verifier.isDone())
            {
                return;
            }
            job.mismatches = verifier.mismatches();
            job.repaired = verifier.markedDirty();
            verifier.abandon();
            if (job.repaired > 0)
            {
                // Repair is a resend: the verifier marked each different region dirty as its result came in, and
                // the resyncer sends them through the ordered stream like any catch-up, fenced against writes.
                job.source.forceBitmaps();
                job.state = "repairing";
                conductor.log("group " + job.group + ": verify " + job.id + " found " + job.different + " regions " +
                    "different; resending them");
                return;
            }
            finish(job);
        }
        else if (job.source.dirtyRegions() == 0)
        {
            // Nothing dirty is left: every region marked for repair has been resent (and anything else too).
            finish(job);
        }
    }

    private void finish(final Job job)
    {
        job.state = "completed";
        job.finishedMs = System.currentTimeMillis();
        if (job.seed)
        {
            seedResume.remove(job.group);
            final SourceGroupHandle handle = sources.get(job.group);
            if (handle != null)
            {
                handle.seedCompared();
            }
        }
        conductor.cnc().counter(SystemCounter.VERIFY_MISMATCHES).getAndAdd(job.different);
        final String result = result(job);
        final String line = "group " + job.group + ": verify " + job.id + " " + result + ", " + job.compared +
            " regions compared, " + job.different + " different" + (job.skipped > 0 ? ", " + job.skipped +
            " skipped (dirty, being resent)" : "");
        // Not conductor.error: a difference is a finding about the data, counted in 'verify mismatches'; the
        // errors counter is kept for faults of the daemon.
        conductor.log(line);
        saveLast(job);
    }

    private void fail(final Job job, final ErrorCode code, final String message)
    {
        if (job.seed)
        {
            // Not a verify anyone asked for: no result to keep. Regions answered stay compared (their
            // differences are dirty, being resent), so the next attempt resumes after them.
            seedResume.put(job.group, job.verifier.answeredThrough() + 1);
            seedRetryNs.put(job.group, System.nanoTime() + SEED_RETRY_NS);
        }
        job.verifier.abandon();
        job.state = "failed";
        job.finishedMs = System.currentTimeMillis();
        job.errorCode = code;
        job.error = message;
        job.mismatches = job.verifier.mismatches();
        if (job.seed)
        {
            conductor.log("group " + job.group + ": seeded initial sync paused (" + message + "); the comparison " +
                "resumes from region " + seedResume.get(job.group) + " when the group is linked again");
            return;
        }
        conductor.log("group " + job.group + ": verify " + job.id + " failed: " + message);
        saveLast(job);
    }

    private static String result(final Job job)
    {
        if (job.state.equals("failed"))
        {
            return "failed";
        }
        if (job.isRunning())
        {
            return null;
        }
        if (job.different == 0)
        {
            return "identical";
        }
        return job.repair ? "repaired" : "different";
    }

    private int schedule()
    {
        int started = 0;
        final long nowMs = System.currentTimeMillis();
        for (final SourceGroupHandle handle : sources.values())
        {
            final GroupConfig config = handle.config;
            final Job job = jobs.get(config.name);
            if (config.verifyIntervalMs <= 0 || (job != null && job.isRunning()) || handle.group() == null ||
                handle.state() != GroupState.REPLICATING || !handle.partnerVerifies())
            {
                continue;
            }
            final Map<String, Object> last = lastResult(config.name);
            long dueMs = config.createdMs + config.verifyIntervalMs;
            if (last != null && last.get("finished_ms") instanceof Number finished)
            {
                dueMs = finished.longValue() + ("failed".equals(last.get("result")) ?
                    Math.min(config.verifyIntervalMs, RETRY_FAILED_MS) : config.verifyIntervalMs);
            }
            if (nowMs >= dueMs)
            {
                start(config.name, false, true, 0);
                started++;
            }
        }
        return started;
    }

    private Map<String, Object> describe(final Job job)
    {
        final int regionLength = job.source.config().regionLength;
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("group", job.group);
        m.put("job", job.id);
        m.put("state", job.state);
        m.put("result", result(job));
        m.put("repair", job.repair);
        m.put("scheduled", job.scheduled);
        m.put("seed", job.seed);
        m.put("started_ms", job.startedMs);
        m.put("finished_ms", job.finishedMs);
        m.put("region_length", regionLength);
        m.put("sub_block_length", job.verifier.subBlockLength());
        m.put("regions_total", job.totalRegions);
        m.put("regions_compared", job.isRunning() ? job.verifier.compared() : job.compared);
        m.put("regions_skipped", job.isRunning() ? job.verifier.skipped() : job.skipped);
        m.put("regions_different", job.isRunning() ? job.verifier.different() : job.different);
        m.put("regions_repaired", job.state.equals("completed") ? job.repaired : 0);
        final List<Map<String, Object>> ranges = new ArrayList<>();
        final List<long[]> mismatches = job.isRunning() && job.state.equals("verifying") ?
            job.verifier.mismatches() : job.mismatches;
        for (final long[] r : mismatches)
        {
            final GroupConfig.VolumePair pair = job.source.config().volumes.get((int)r[0]);
            final Map<String, Object> range = new LinkedHashMap<>();
            range.put("volume", (int)r[0]);
            range.put("source", pair.source);
            range.put("target", pair.target);
            range.put("offset", r[1]);
            range.put("length", r[2]);
            ranges.add(range);
        }
        m.put("mismatches", ranges);
        if (job.error != null)
        {
            final Map<String, Object> error = new LinkedHashMap<>();
            error.put("code", job.errorCode.name());
            error.put("message", job.error);
            m.put("error", error);
        }
        return m;
    }

    private void saveLast(final Job job)
    {
        final Map<String, Object> record = describe(job);
        lastResults.put(job.group, record);
        try
        {
            JsonFiles.writeAtomically(store.dir(job.group).resolve("verify.json"), record);
        }
        catch (final IOException ex)
        {
            conductor.error("group " + job.group + ": cannot save the verify result: " + ex.getMessage());
        }
    }

    private Map<String, Object> lastResult(final String name)
    {
        final Map<String, Object> cached = lastResults.get(name);
        if (cached != null)
        {
            return cached;
        }
        final Path file = store.dir(name).resolve("verify.json");
        if (!Files.exists(file))
        {
            return null;
        }
        try
        {
            final Map<String, Object> record = JsonFiles.read(file);
            lastResults.put(name, record);
            return record;
        }
        catch (final IOException ex)
        {
            conductor.error("group " + name + ": cannot read " + file + ": " + ex.getMessage());
            return null;
        }
    }

    /**
     * Adds the verify part of 'group status' of a source group: schedule, running job, last result.
     */
    void describe(final GroupConfig config, final Map<String, Object> status)
    {
        final Map<String, Object> v = new LinkedHashMap<>();
        v.put("interval", VerifyInterval.format(config.verifyIntervalMs));
        final Job job = jobs.get(config.name);
        if (job != null && job.isRunning())
        {
            v.put("running", describe(job));
        }
        final Map<String, Object> last = lastResult(config.name);
        if (last != null)
        {
            final Map<String, Object> summary = new LinkedHashMap<>();
            for (final String key : new String[] {"job", "result", "scheduled", "finished_ms", "regions_compared",
                "regions_different", "regions_repaired", "error"})
            {
                if (last.containsKey(key))
                {
                    summary.put(key, last.get(key));
                }
            }
            v.put("last", summary);
        }
        status.put("verify", v);
    }

    /**
     * A group was deleted: forget its jobs (its directory, verify.json included, is gone).
     */
    void forget(final String name)
    {
        final Job job = jobs.remove(name);
        if (job != null)
        {
            job.verifier.abandon();
            running.remove(job);
        }
        lastResults.remove(name);
        seedResume.remove(name);
        seedRetryNs.remove(name);
    }
}
