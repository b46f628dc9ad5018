package io.blockmover.cli;

import java.io.Console;
import java.io.PrintStream;
import java.util.concurrent.TimeUnit;

/**
 * A live progress line for a long job the CLI follows (copy, verify): redrawn in place on a terminal, a line every
 * two seconds otherwise (so logs of scripts stay short), nothing when quiet (--json). Keeps a smoothed rate of
 * whatever unit the caller counts.
 */
final class ProgressLine
{
    private static final int BAR_WIDTH = 30;
    private static final long LOG_INTERVAL_NS = TimeUnit.SECONDS.toNanos(2);

    private final PrintStream out;
    private final boolean quiet;
    private final boolean terminal;
    private long lastNs = System.nanoTime();
    private long lastDone = -1;
    private long firstNs;
    private long firstDone = -1;
    private double rate;
    private boolean rateKnown;
    private long lastPrintNs;
    private boolean drawn;

    ProgressLine(final PrintStream out, final boolean quiet)
    {
        this.out = out;
        this.quiet = quiet;
        final Console console = System.console();
        this.terminal = console != null;
    }

    /**
     * Records progress and says whether a line should be printed now. Once the job has ended or reached its total,
     * the rate is its average over the whole line: a smoothed rate then told of the last moments only (a copy
     * that ran at 283 MB/s ended its line at "10 MB/s", slowed by its last chunks; a create whose logs were
     * written waited for its partner at "0 MB/s, ETA --", which read as a stall).
     *
     * @param done     units done so far.
     * @param total    units in all.
     * @param finished whether the job has ended (its last line is always printed).
     * @return whether to call {@link #print(String)}.
     */
    boolean update(final long done, final long total, final boolean finished)
    {
        final long now = System.nanoTime();
        if (firstDone < 0)
        {
            firstDone = done;
            firstNs = now;
        }
        if ((finished || done >= total) && done > firstDone && now > firstNs)
        {
            rate = (done - firstDone) / ((now - firstNs) / 1e9);
            rateKnown = true;
        }
        else if (lastDone >= 0 && now > lastNs && done < total)
        {
            final double instant = (done - lastDone) / ((now - lastNs) / 1e9);
            rate = rateKnown ? 0.7 * rate + 0.3 * instant : instant;
            rateKnown = true;
        }
        lastDone = done;
        lastNs = now;
        if (quiet || (!terminal && now - lastPrintNs < LOG_INTERVAL_NS && !finished))
        {
            return false;
        }
        lastPrintNs = now;
        return true;
    }

    /**
     * @return units per second, smoothed; 0 until two updates were seen.
     */
    double rate()
    {
        return rate;
    }

    /**
     * @param bytesPerSecond {@link #rate()} in bytes.
     * @return the rate as {@link Format#rate} gives it, or "-- MB/s" until two updates were seen: the first line
     *     of a job followed from the middle (a second log, a create asked about late) said "0 MB/s".
     */
    String formatRate(final double bytesPerSecond)
    {
        return rateKnown ? Format.rate(bytesPerSecond) : "-- MB/s";
    }

    /**
     * @param remaining units left.
     * @return the estimated time left, for {@link Format#duration(double)}: 0 with nothing left, NaN while the
     *     rate is unknown.
     */
    double secondsLeft(final long remaining)
    {
        if (remaining <= 0)
        {
            return 0;
        }
        return rateKnown && rate > 0 ? remaining / rate : Double.NaN;
    }

    void print(final String line)
    {
        if (terminal)
        {
            out.print("\r" + line + "   ");
            drawn = true;
        }
        else
        {
            out.println(line);
        }
        out.flush();
    }

    void end()
    {
        if (drawn)
        {
            out.println();
        }
    }

    /**
     * @param fraction done, 0 to 1.
     * @return {@code [=====     ]} for that fraction, without the brackets.
     */
    static String bar(final double fraction)
    {
        final int filled = Math.max(0, Math.min(BAR_WIDTH, (int)Math.round(fraction * BAR_WIDTH)));
        return "=".repeat(filled) + " ".repeat(BAR_WIDTH - filled);
    }
}
