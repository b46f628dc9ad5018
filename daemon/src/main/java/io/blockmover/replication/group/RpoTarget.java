package io.blockmover.replication.group;

import java.util.Locale;

/**
 * The recovery point objective an operator sets on a group ({@code group create --rpo-target 30s}), and whether
 * the group's RPO is over it. With hysteresis: the target counts as exceeded once the RPO passes it, and as met
 * again only once the RPO is back under half of it, so a group hovering near its target does not flap.
 * <p>
 * This is a separate fact from {@code rpo_exceeded} in the group status, which keeps its meaning: the log
 * overflowed into the bitmaps, so the destination is no longer a write-order-consistent prefix until resync
 * ends. A group can exceed its target with an intact log (an outage longer than the target) and overflow its log
 * within its target (a burst). Conductor thread only.
 */
public final class RpoTarget
{
    private boolean exceeded;

    /**
     * @param rpoSeconds the group's RPO now.
     * @param targetMs   its target; 0 for none.
     * @return whether the state changed (exceeded, or recovered).
     */
    public boolean update(final double rpoSeconds, final long targetMs)
    {
        final boolean now;
        if (targetMs <= 0)
        {
            now = false;
        }
        else if (exceeded)
        {
            now = rpoSeconds * 1000 >= targetMs / 2.0;
        }
        else
        {
            now = rpoSeconds * 1000 > targetMs;
        }
        final boolean changed = now != exceeded;
        exceeded = now;
        return changed;
    }

    public boolean isExceeded()
    {
        return exceeded;
    }

    /**
     * @param text a duration: a number with an optional unit, ms, s, m or h (seconds without one).
     * @return milliseconds, or -1 when malformed.
     */
    public static long parse(final String text)
    {
        final String t = text.trim().toLowerCase(Locale.ROOT);
        int end = 0;
        while (end < t.length() && (Character.isDigit(t.charAt(end)) || t.charAt(end) == '.'))
        {
            end++;
        }
        if (end == 0)
        {
            return -1;
        }
        final double value;
        try
        {
            value = Double.parseDouble(t.substring(0, end));
        }
        catch (final NumberFormatException ex)
        {
            return -1;
        }
        final long scale = switch (t.substring(end).trim())
        {
            case "ms" -> 1;
            case "", "s" -> 1000;
            case "m", "min" -> 60_000;
            case "h" -> 3_600_000;
            default -> -1;
        };
        return scale < 0 ? -1 : Math.round(value * scale);
    }

    /**
     * @param ms a duration.
     * @return it in the shortest exact unit: 500ms, 30s, 2m, 1h.
     */
    public static String format(final long ms)
    {
        if (ms % 3_600_000 == 0 && ms > 0)
        {
            return ms / 3_600_000 + "h";
        }
        if (ms % 60_000 == 0 && ms > 0)
        {
            return ms / 60_000 + "m";
        }
        if (ms % 1000 == 0)
        {
            return ms / 1000 + "s";
        }
        return ms + "ms";
    }
}
