package io.blockmover.cli;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import io.blockmover.BlockmoverException;

/**
 * What 'blockmover group create' shows while it waits: the group's record log is written whole on each host
 * before the partner accepts it (a second or more per GiB, twice), and the create's request is answered only then.
 * A thread of the CLI asks the daemon for the group's status on a second connection, twice a second once the
 * first second has passed, and draws how far the log being written is and on which host. Nothing when quiet
 * (--json); on a terminal the line is redrawn, otherwise a line every two seconds.
 */
final class CreateProgress implements AutoCloseable
{
    private static final long FIRST_POLL_NS = TimeUnit.SECONDS.toNanos(1);
    private static final long POLL_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(500);

    private final Path socket;
    private final String group;
    private final PrintStream out;
    private final Thread thread;
    private volatile boolean running = true;
    private ProgressLine line;
    private String lineHost;
    private long lineSize;

    private CreateProgress(final Path socket, final String group, final PrintStream out)
    {
        this.socket = socket;
        this.group = group;
        this.out = out;
        this.thread = new Thread(this::run, "create-progress");
        thread.setDaemon(true);
    }

    /**
     * @param socket the daemon's control socket.
     * @param group  the group being created.
     * @param out    where the line goes.
     * @param quiet  show nothing (--json).
     * @return the running progress, to close once the create is answered.
     */
    static CreateProgress start(final Path socket, final String group, final PrintStream out, final boolean quiet)
    {
        final CreateProgress progress = new CreateProgress(socket, group, out);
        if (!quiet)
        {
            progress.thread.start();
        }
        return progress;
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
            // The create's own request says what went wrong; the progress line only stops.
        }
    }

    private void show(final Map<?, ?> status)
    {
        if (!(status.get("log_written") instanceof Number written) || !(status.get("log_size") instanceof Number size))
        {
            return;
        }
        final String host = String.valueOf(status.get("log_host"));
        if (!host.equals(lineHost))
        {
            // The other host's log starts from zero: a line of its own, with a rate of its own.
            if (line != null)
            {
                line.end();
            }
            line = new ProgressLine(out, false);
            lineHost = host;
        }
        lineSize = size.longValue();
        draw(written.longValue(), lineSize, false);
    }

    private void draw(final long done, final long total, final boolean finished)
    {
        if (!line.update(done, finished))
        {
            return;
        }
        final double fraction = total == 0 ? 1 : (double)done / total;
        line.print(String.format(Locale.ROOT, "[%s] %5.1f%% %s / %s  %s  ETA %s  writing the group's log on %s",
            ProgressLine.bar(fraction), fraction * 100, Format.bytes(done), Format.bytes(total),
            Format.rate(line.rate()), Format.duration(line.secondsLeft(total - done)), lineHost));
    }

    /**
     * The partner accepted the group, so every log is written: a line left short of the end is completed.
     */
    void succeeded()
    {
        running = false;
        joinPoller();
        if (line != null)
        {
            draw(lineSize, lineSize, true);
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
}
