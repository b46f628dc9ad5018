package io.blockmover.replication.group;

import java.util.Locale;

/**
 * When a write through the front end is acknowledged.
 */
public enum GroupMode
{
    /** When written to the source volume and appended to the destination's log (RPO zero). */
    SYNC,
    /** When written to the source volume and appended to the source log; the shipper drains the log. */
    ASYNC;

    /**
     * @param text "sync" or "async", any case.
     * @return the mode.
     * @throws IllegalArgumentException naming the choices.
     */
    public static GroupMode parse(final String text)
    {
        try
        {
            return valueOf(text.toUpperCase(Locale.ROOT));
        }
        catch (final IllegalArgumentException ex)
        {
            throw new IllegalArgumentException("mode '" + text + "' is not sync or async");
        }
    }

    public String label()
    {
        return name().toLowerCase(Locale.ROOT);
    }
}
