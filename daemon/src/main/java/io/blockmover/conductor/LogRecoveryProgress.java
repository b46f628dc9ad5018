package io.blockmover.conductor;

import java.util.concurrent.TimeUnit;

import org.agrona.concurrent.NanoClock;

import io.blockmover.replication.log.RecordLog;
import io.blockmover.systemd.ServiceNotifier;

/**
 * Reports a group's log recovery scan while it runs, which for a full log of tens of GiB takes seconds to minutes
 * (about 0.75 s a GiB measured here; a slow disk takes longer). It runs on the main thread at start-up, before
 * READY=1, and on the conductor at a failover, where the conductor answers nothing and pets no watchdog until it
 * ends. Without word of its progress, systemd would kill a start that outlasts TimeoutStartSec= (and the restart
 * would begin the scan again, for ever) or a failover that outlasts WatchdogSec=. So systemd hears of it through
 * {@link ServiceNotifier#progress}, and the daemon's log says what it waits for once the scan has taken a while.
 * At start-up, control requests get an answer too: STARTING, with how far the scan is.
 */
final class LogRecoveryProgress implements RecordLog.RecoveryProgress
{
    /** The scan is logged once it has run this long, and then at this interval. */
    static final long LOG_INTERVAL_NS = TimeUnit.SECONDS.toNanos(10);

    private final Conductor conductor;
    private final String group;
    private final ServiceNotifier notifier;
    private final NanoClock clock;
    private final long startNs;
    private long nextLogNs;
    private boolean logged;

    LogRecoveryProgress(final Conductor conductor, final String group)
    {
        this.conductor = conductor;
        this.group = group;
        this.notifier = conductor.serviceNotifier();
        this.clock = conductor.clock();
        this.startNs = clock.nanoTime();
        this.nextLogNs = startNs + LOG_INTERVAL_NS;
    }

    @Override
    public void onProgress(final long checkedBytes, final long capacity)
    {
        conductor.answerStarting(describe(checkedBytes, capacity));
        final long nowNs = clock.nanoTime();
        if (notifier.isProgressDue(nowNs))
        {
            notifier.progress(describe(checkedBytes, capacity), nowNs);
        }
        if (nowNs >= nextLogNs)
        {
            nextLogNs = nowNs + LOG_INTERVAL_NS;
            logged = true;
            conductor.log(describe(checkedBytes, capacity) + ", for " + seconds(nowNs) + " s (replication of " +
                "this group waits for it; nothing is lost)");
        }
    }

    /**
     * The scan ended: says so in the log when it was long enough to be logged while it ran.
     *
     * @param recovery what it found.
     */
    void done(final RecordLog.Recovery recovery)
    {
        if (logged)
        {
            conductor.log("group " + group + ": its log was checked in " + seconds(clock.nanoTime()) + " s: " +
                recovery.records() + " records kept, " + mib(recovery.tailPosition() - recovery.headPosition()) +
                " MiB");
        }
    }

    private String describe(final long checkedBytes, final long capacity)
    {
        return "group " + group + ": checking the records its log holds, " + mib(checkedBytes) + " MiB so far " +
            "(at most " + mib(capacity) + " MiB)";
    }

    private String seconds(final long nowNs)
    {
        return String.format("%.1f", (nowNs - startNs) / 1e9);
    }

    private static long mib(final long bytes)
    {
        return bytes >> 20;
    }
}
