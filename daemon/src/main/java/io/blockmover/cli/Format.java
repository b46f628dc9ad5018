package io.blockmover.cli;

import java.util.Locale;

/**
 * Human formats for sizes, rates and durations.
 */
public final class Format
{
    private Format()
    {
    }

    /**
     * @param bytes a size.
     * @return it in binary units, e.g. {@code 1.5 GiB}; also used by the topology report.
     */
    public static String bytes(final long bytes)
    {
        final String[] units = {"B", "KiB", "MiB", "GiB", "TiB"};
        double value = bytes;
        int unit = 0;
        while (value >= 1024 && unit < units.length - 1)
        {
            value /= 1024;
            unit++;
        }
        return unit == 0 ? bytes + " B" : String.format(Locale.ROOT, "%.1f %s", value, units[unit]);
    }

    static String rate(final double bytesPerSecond)
    {
        return String.format(Locale.ROOT, "%.0f MB/s", bytesPerSecond / 1e6);
    }

    /**
     * @param seconds a time elapsed.
     * @return "4.2 s" under a minute, else as {@link #duration} ("1h02m"): a report from before a restart.
     */
    public static String ago(final double seconds)
    {
        return seconds < 60 ? String.format(Locale.ROOT, "%.1f s", seconds) : duration(seconds);
    }

    static String duration(final double seconds)
    {
        if (Double.isNaN(seconds) || Double.isInfinite(seconds) || seconds < 0)
        {
            return "--";
        }
        final long s = Math.round(seconds);
        if (s < 60)
        {
            return s + "s";
        }
        if (s < 3600)
        {
            return String.format(Locale.ROOT, "%dm%02ds", s / 60, s % 60);
        }
        return String.format(Locale.ROOT, "%dh%02dm", s / 3600, (s % 3600) / 60);
    }
}
