package io.blockmover.systemd;

import java.util.concurrent.TimeUnit;

/**
 * Tells systemd what the daemon is doing (sd_notify(3), Type=notify): READY=1 once it serves, STATUS= with the
 * state of each group and job when it changes (at most once a second, so a busy resync does not flood PID 1),
 * RELOADING=1 and READY=1 around a configuration reload, STOPPING=1 on SIGTERM, and WATCHDOG=1 at half of
 * WATCHDOG_USEC when the unit sets WatchdogSec=. The keep-alive is sent from the conductor's duty cycle
 * ({@link #onDutyCycle(long)}), never from a timer thread of its own: a wedged conductor stops petting and systemd
 * restarts the daemon, which is the point of a watchdog.
 * <p>
 * Off (every method a no-op) when libsystemd cannot be loaded or NOTIFY_SOCKET is unset. Conductor thread only,
 * except {@link #ready(String)} and {@link #stopping(String)}, which the main thread calls before the conductor
 * starts and after it stopped.
 */
public final class ServiceNotifier
{
    /** At most one STATUS= a second. */
    public static final long STATUS_INTERVAL_NS = TimeUnit.SECONDS.toNanos(1);
    /**
     * How long systemd is asked to wait for the next message of a long step ({@link #progress}): many times the
     * one-second interval between them, so only a step that stopped progressing (a hung disk) runs it out.
     */
    public static final long PROGRESS_EXTEND_USEC = TimeUnit.SECONDS.toMicros(30);

    private final boolean enabled;
    private final long watchdogIntervalNs;
    private long nextWatchdogNs;
    private long nextStatusNs;
    private long nextProgressNs;
    private String lastStatus = "";

    private ServiceNotifier(final boolean enabled, final long watchdogIntervalNs)
    {
        this.enabled = enabled;
        this.watchdogIntervalNs = watchdogIntervalNs;
    }

    /**
     * @return a notifier for the environment systemd gave this process (NOTIFY_SOCKET, WATCHDOG_USEC).
     */
    public static ServiceNotifier fromEnvironment()
    {
        final String socket = System.getenv("NOTIFY_SOCKET");
        if (socket == null || socket.isEmpty() || !SdNotify.isAvailable())
        {
            return new ServiceNotifier(false, 0);
        }
        final long[] usec = new long[1];
        final long intervalNs = SdNotify.sdWatchdogEnabled(0, usec) > 0 ?
            TimeUnit.MICROSECONDS.toNanos(usec[0]) / 2 : 0;
        return new ServiceNotifier(true, intervalNs);
    }

    /**
     * @return whether messages go anywhere.
     */
    public boolean isEnabled()
    {
        return enabled;
    }

    /**
     * @return how often WATCHDOG=1 is sent, or 0 when the unit has no WatchdogSec=.
     */
    public long watchdogIntervalNs()
    {
        return watchdogIntervalNs;
    }

    /**
     * @return one line for the start-up log: whether systemd is told anything, and the watchdog.
     */
    public String describe()
    {
        if (!enabled)
        {
            return SdNotify.isAvailable() ? "systemd notification off: no NOTIFY_SOCKET" :
                "systemd notification off: libsystemd not loadable (" + SdNotify.unavailableReason() + ")";
        }
        return "systemd notification on" + (watchdogIntervalNs > 0 ?
            ", watchdog pinged every " + TimeUnit.NANOSECONDS.toMillis(watchdogIntervalNs) + " ms" : "");
    }

    /**
     * The daemon serves: control socket up, groups and jobs loaded.
     *
     * @param status first STATUS= text.
     */
    public void ready(final String status)
    {
        lastStatus = status;
        send("READY=1\nSTATUS=" + status);
    }

    /**
     * A reload starts; {@link #ready(String)} must follow when it is done, refused or not.
     */
    public void reloading()
    {
        // MONOTONIC_USEC lets systemd 253+ (Type=notify-reload) tell this reload from an older one.
        send("RELOADING=1\nMONOTONIC_USEC=" + TimeUnit.NANOSECONDS.toMicros(System.nanoTime()));
    }

    /**
     * SIGTERM arrived: the daemon stops its groups and jobs and exits.
     *
     * @param status what it is doing.
     */
    public void stopping(final String status)
    {
        send("STOPPING=1\nSTATUS=" + status);
    }

    /**
     * @param nowNs conductor clock.
     * @return whether a STATUS= may be sent now, so the caller builds its text only then.
     */
    public boolean isStatusDue(final long nowNs)
    {
        return enabled && nowNs >= nextStatusNs;
    }

    /**
     * Sends STATUS= when the text changed since the last one sent.
     *
     * @param status the state of every group and job, one line.
     * @param nowNs  conductor clock.
     */
    public void status(final String status, final long nowNs)
    {
        nextStatusNs = nowNs + STATUS_INTERVAL_NS;
        if (!status.equals(lastStatus))
        {
            lastStatus = status;
            send("STATUS=" + status);
        }
    }

    /**
     * @param nowNs conductor clock.
     * @return whether {@link #progress} would send now, so the caller builds its text only then.
     */
    public boolean isProgressDue(final long nowNs)
    {
        return enabled && nowNs >= nextProgressNs;
    }

    /**
     * A long step that keeps the conductor from its duty cycle (a group's log recovery scan, at start or at a
     * failover) has moved on. At most once a second: STATUS= says what it is, EXTEND_TIMEOUT_USEC= asks systemd
     * to wait {@link #PROGRESS_EXTEND_USEC} more for the next message (it only ever lengthens TimeoutStartSec=
     * and its peers), and WATCHDOG=1 is sent when the unit has a watchdog. A step that stops progressing stops
     * calling, and systemd's timeouts then run out as they should. Main thread before the conductor starts,
     * conductor thread after.
     *
     * @param status what the step is doing and how far it is.
     * @param nowNs  conductor clock.
     */
    public void progress(final String status, final long nowNs)
    {
        if (!isProgressDue(nowNs))
        {
            return;
        }
        nextProgressNs = nowNs + STATUS_INTERVAL_NS;
        lastStatus = status;
        if (watchdogIntervalNs > 0)
        {
            nextWatchdogNs = nowNs + watchdogIntervalNs;
        }
        send("STATUS=" + status + "\nEXTEND_TIMEOUT_USEC=" + PROGRESS_EXTEND_USEC +
            (watchdogIntervalNs > 0 ? "\nWATCHDOG=1" : ""));
    }

    /**
     * Called on every housekeeping tick of the conductor: sends WATCHDOG=1 when it is due.
     *
     * @param nowNs conductor clock.
     * @return 1 when a keep-alive was sent.
     */
    public int onDutyCycle(final long nowNs)
    {
        if (watchdogIntervalNs > 0 && nowNs >= nextWatchdogNs)
        {
            nextWatchdogNs = nowNs + watchdogIntervalNs;
            send("WATCHDOG=1");
            return 1;
        }
        return 0;
    }

    private void send(final String state)
    {
        if (enabled)
        {
            // A failed send (the manager went away) must not stop the daemon: sd_notify's result is advisory.
            SdNotify.sdNotify(0, state);
        }
    }
}
