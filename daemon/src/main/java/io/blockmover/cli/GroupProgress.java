package io.blockmover.cli;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import io.blockmover.BlockmoverException;

/**
 * What a group command shows while its request waits: a thread of the CLI asks the daemon for the group's status
 * on a second connection, twice a second once the first second has passed, and draws how far the wait is. A
 * request answered within the first second draws nothing. Nothing when quiet (--json); on a terminal the line is
 * redrawn, otherwise a line every two seconds.
 * <ul>
 * <li>{@link #create}: the group's record log is written whole on each host before the partner accepts it (a second
 * or more per GiB, twice): how far the log being written is, and on which host.</li>
 * <li>{@link #switchOver}: a planned switch refuses writes and drains what the partner does not hold yet (minutes
 * for gigabytes of backlog over a slow link) before the partner takes over: how much is left to send.</li>
 * <li>{@link #failover}: a failover waits until the destination has applied what its log holds: how many records
 * are left.</li>
 * <li>{@link #testMount}: a test mount waits likewise, for what the destination held when asked.</li>
 * </ul>
 */
abstract class GroupProgress implements AutoCloseable
{
    private static final long FIRST_POLL_NS = TimeUnit.SECONDS.toNanos(1);
    private static final long POLL_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(500);

    private final Path socket;
    private final String group;
    private final Thread thread;
    private final PrintStream out;
    private volatile boolean running = true;
    private ProgressLine line;
    private long total;

    private GroupProgress(final Path socket, final String group, final PrintStream out)
    {
        this.socket = socket;
        this.group = group;
        this.out = out;
        this.thread = new Thread(this::run, "group-progress");
        thread.setDaemon(true);
    }

    /**
     * @param socket the daemon's control socket.
     * @param group  the group being created.
     * @param out    where the line goes.
     * @param quiet  show nothing (--json).
     * @return the running progress of writing the group's logs, to close once the create is answered.
     */
    static GroupProgress create(final Path socket, final String group, final PrintStream out, final boolean quiet)
    {
        return new LogWritten(socket, group, out).start(quiet);
    }

    /**
     * @param socket the daemon's control socket.
     * @param group  the group being switched.
     * @param out    where the line goes.
     * @param quiet  show nothing (--json).
     * @return the running progress of the drain before the hand-over, to close once the switch is answered.
     */
    static GroupProgress switchOver(final Path socket, final String group, final PrintStream out,
        final boolean quiet)
    {
        return new Drained(socket, group, out).start(quiet);
    }

    /**
     * @param socket the daemon's control socket.
     * @param group  the group failing over (on its destination).
     * @param out    where the line goes.
     * @param quiet  show nothing (--json).
     * @return the running progress of the apply the failover waits for, to close once it is answered.
     */
    static GroupProgress failover(final Path socket, final String group, final PrintStream out, final boolean quiet)
    {
        return new Applied(socket, group, out, false).start(quiet);
    }

    /**
     * @param socket the daemon's control socket.
     * @param group  the group being test-mounted (on its destination).
     * @param out    where the line goes.
     * @param quiet  show nothing (--json).
     * @return the running progress of the apply the test mount waits for, to close once it is answered.
     */
    static GroupProgress testMount(final Path socket, final String group, final PrintStream out, final boolean quiet)
    {
        return new Applied(socket, group, out, true).start(quiet);
    }

    final GroupProgress start(final boolean quiet)
    {
        if (!quiet)
        {
            thread.start();
        }
        return this;
    }

    private void run()
    {
        LockSupport.parkNanos(FIRST_POLL_NS);
        if (!running)
        {
            return;
        }
        try (ControlClient client = ControlClient.connect(socket))
        {
            while (running)
            {
                final Object status = client.call("group-status", Map.of("name", group));
                if (status instanceof Map<?, ?> map && running)
                {
                    show(map);
                }
                LockSupport.parkNanos(POLL_INTERVAL_NS);
            }
        }
        catch (final BlockmoverException ex)
        {
            // The command's own request says what went wrong; the progress line only stops.
        }
    }

    /**
     * Draws what one status says, through {@link #draw}.
     */
    abstract void show(Map<?, ?> status);

    /**
     * @return what the line says after the figures, e.g. "writing the group's log on site-b".
     */
    abstract String doing();

    /**
     * Starts a new line, from zero, with a rate of its own.
     */
    final void newLine()
    {
        if (line != null)
        {
            line.end();
        }
        line = new ProgressLine(out, false);
    }

    final void draw(final long done, final long size, final boolean finished)
    {
        total = size;
        if (line == null || !line.update(done, size, finished))
        {
            return;
        }
        final double fraction = size == 0 ? 1 : (double)done / size;
        line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %s / %s  %s  ETA %s  %s",
            ProgressLine.bar(fraction), fraction * 100, Format.bytes(done), Format.bytes(size),
            line.formatRate(line.rate()), Format.duration(line.secondsLeft(size - done)), doing()));
    }

    /**
     * Completes the line at its total once the request succeeded: in bytes, unless a progress counts otherwise.
     */
    void drawEnd(final long size)
    {
        draw(size, size, true);
    }

    /**
     * {@link #draw} for a count of records rather than bytes.
     */
    final void drawRecords(final long done, final long size, final boolean finished)
    {
        total = size;
        if (line == null || !line.update(done, size, finished))
        {
            return;
        }
        final double fraction = size == 0 ? 1 : (double)done / size;
        final double left = line.secondsLeft(size - done);
        line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %d / %d records  ETA %s  %s",
            ProgressLine.bar(fraction), fraction * 100, done, size, Format.duration(left), doing()));
    }

    /**
     * The request succeeded, so whatever was waited for is done: a line left short of the end is completed.
     */
    void succeeded()
    {
        running = false;
        joinPoller();
        if (line != null)
        {
            drawEnd(total);
        }
    }

    @Override
    public void close()
    {
        running = false;
        joinPoller();
        if (line != null)
        {
            line.end();
        }
    }

    private void joinPoller()
    {
        if (thread.isAlive())
        {
            thread.interrupt();
            try
            {
                thread.join(TimeUnit.SECONDS.toMillis(2));
            }
            catch (final InterruptedException ex)
            {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * group create: the hosts' logs, from the creating status's log_* fields: both at once while this host writes
     * its own and the partner says how far its is (partner_log_written), then whichever is left.
     */
    private static final class LogWritten extends GroupProgress
    {
        private String host;
        private String peer;
        private String partner;
        private boolean allWritten;

        LogWritten(final Path socket, final String group, final PrintStream out)
        {
            super(socket, group, out);
        }

        @Override
        void show(final Map<?, ?> status)
        {
            if (!(status.get("log_written") instanceof Number written) ||
                !(status.get("log_size") instanceof Number size))
            {
                return;
            }
            final String logHost = String.valueOf(status.get("log_host"));
            partner = String.valueOf(status.get("peer"));
            final String both = status.get("partner_log_written") instanceof Number ?
                String.valueOf(status.get("peer")) : null;
            if (!logHost.equals(host) || !java.util.Objects.equals(both, peer))
            {
                // Another log (or the partner's joining this one's) starts a line of its own.
                newLine();
                host = logHost;
                peer = both;
            }
            final long done = peer != null ?
                written.longValue() + ((Number)status.get("partner_log_written")).longValue() : written.longValue();
            final long total = peer != null ? 2 * size.longValue() : size.longValue();
            allWritten = done >= total;
            draw(done, total, false);
        }

        @Override
        String doing()
        {
            if (allWritten)
            {
                // Written, and the create not yet answered: the partner has yet to take the group.
                return (peer != null ? "logs" : "log") + " written, waiting for " + partner + " to open the group";
            }
            return peer != null ? "writing the group's logs on " + host + " and " + peer : "writing the group's log " +
                "on " + host;
        }
    }

    /**
     * group switch: what the partner does not hold yet (rpo_bytes, log and dirty regions) shrinks to nothing; the
     * most seen is the whole. Then the partner applies the rest of its log and takes over. Asked on the
     * destination, the same figure as its source last reported it (source_report).
     */
    private static final class Drained extends GroupProgress
    {
        private long most;
        private long left;
        private String peer;
        private boolean directionKnown;
        private boolean towardsPeer;

        Drained(final Path socket, final String group, final PrintStream out)
        {
            super(socket, group, out);
        }

        @Override
        void show(final Map<?, ?> status)
        {
            if (!directionKnown)
            {
                directionKnown = true;
                towardsPeer = "source".equals(status.get("role"));
            }
            // Once the roles are reversed, the figures are of the other direction: not this switch's.
            if (!(towardsPeer ? "source" : "destination").equals(status.get("role")))
            {
                return;
            }
            // Asked on the destination: what its source last said it lacks (a second old at most).
            final Object rpo = towardsPeer ? status.get("rpo_bytes") :
                status.get("source_report") instanceof Map<?, ?> report ? report.get("rpo_bytes") : null;
            if (!(rpo instanceof Number))
            {
                return;
            }
            peer = String.valueOf(status.get("peer"));
            left = ((Number)rpo).longValue();
            if (left > most)
            {
                most = left;
                newLine();
            }
            draw(most - left, most, false);
        }

        @Override
        String doing()
        {
            if (towardsPeer)
            {
                return left > 0 ? "sending to " + peer + " what it lacks, writes refused until the switch" :
                    peer + " applies its log and takes over";
            }
            return left > 0 ? peer + " sends what this host lacks, writes refused there until the switch" :
                "applying the log here to take over";
        }
    }

    /**
     * group switch --force: the destination applies what its log holds before it takes over (lsn.applied up to
     * lsn.held), which after a restart with a log of gigabytes takes a while. group test-failover mount: the same
     * apply, up to what the destination held when asked (test_mount_pending).
     */
    private static final class Applied extends GroupProgress
    {
        private final boolean testMount;
        private long first = -1;

        Applied(final Path socket, final String group, final PrintStream out, final boolean testMount)
        {
            super(socket, group, out);
            this.testMount = testMount;
        }

        @Override
        void show(final Map<?, ?> status)
        {
            final Map<?, ?> lsn = testMount ? (status.get("test_mount_pending") instanceof Map<?, ?> p ? p : null) :
                status.get("lsn") instanceof Map<?, ?> l ? l : null;
            if (!"destination".equals(status.get("role")) || lsn == null ||
                !(lsn.get(testMount ? "from_lsn" : "held") instanceof Number held) ||
                !(lsn.get(testMount ? "applied_lsn" : "applied") instanceof Number applied))
            {
                return;
            }
            if (first < 0)
            {
                first = applied.longValue();
                newLine();
            }
            drawRecords(Math.min(applied.longValue(), held.longValue()) - first, held.longValue() - first, false);
        }

        @Override
        void drawEnd(final long size)
        {
            drawRecords(size, size, true);
        }

        @Override
        String doing()
        {
            return testMount ? "applying the log here before the test views are frozen" :
                "applying the log here before taking over";
        }
    }
}
