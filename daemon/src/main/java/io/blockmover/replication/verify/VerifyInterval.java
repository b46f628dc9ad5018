package io.blockmover.replication.verify;

import java.util.Locale;

/**
 * The interval of a scheduled verify as an admin writes it: "7d", "12h", "30m", "90s", "2w", or "off".
 */
public final class VerifyInterval
{
    private static final String[] UNITS = {"w", "d", "h", "m", "s"};
    private static final long[] UNIT_MS = {7 * 86_400_000L, 86_400_000L, 3_600_000L, 60_000L, 1000L};

    private VerifyInterval()
    {
    }

    /**
     * @param text "off", "0", or a whole number with a w, d, h, m or s suffix.
     * @return milliseconds; 0 for off.
     * @throws IllegalArgumentException naming the accepted forms.
     */
    public static long parseMs(final String text)
    {
        final String t = text.trim().toLowerCase(Locale.ROOT);
        if (t.equals("off") || t.equals("0"))
        {
            return 0;
        }
        for (int i = 0; i < UNITS.length; i++)
        {
            if (t.endsWith(UNITS[i]) && t.length() > 1)
            {
                try
                {
                    final long n = Long.parseLong(t.substring(0, t.length() - 1));
                    if (n > 0)
                    {
                        return Math.multiplyExact(n, UNIT_MS[i]);
                    }
                }
                catch (final NumberFormatException | ArithmeticException ex)
                {
                    break;
                }
            }
        }
        throw new IllegalArgumentException("verify interval '" + text + "' is not a positive whole number of weeks, " +
            "days, hours, minutes or seconds (7d, 12h, 30m, 90s) nor 'off'");
    }

    /**
     * @param ms an interval in milliseconds.
     * @return its shortest exact form in days or less ("7d", "14d", "90s"), or "off" for 0.
     */
    public static String format(final long ms)
    {
        if (ms <= 0)
        {
            return "off";
        }
        // Days at most: an admin who wrote 7d or 14d reads it back as written.
        for (int i = 1; i < UNITS.length; i++)
        {
            if (ms % UNIT_MS[i] == 0)
            {
                return ms / UNIT_MS[i] + UNITS[i];
            }
        }
        return ms + "ms";
    }
}
