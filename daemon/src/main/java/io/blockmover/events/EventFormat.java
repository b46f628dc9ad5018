package io.blockmover.events;

import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Prints events received as flat wire maps ({@link Event#toWire()}): as text lines in the manner of
 * {@code drbdsetup events2},
 * <pre>
 *   [2026-11-30T06:20:01.123+00:00 ]change group name=sql state=degraded
 * </pre>
 * where a value with spaces, quotes, backslashes or nothing in it is written as a JSON string, and a missing value as
 * {@code -}; or as one JSON object a line, with an ISO-8601 {@code time} when timestamps are asked for.
 * Stateless; any thread.
 */
public final class EventFormat
{
    private static final DateTimeFormatter ISO =
        DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSXXX").withZone(ZoneId.systemDefault());

    private EventFormat()
    {
    }

    /**
     * @param timeMs epoch milliseconds.
     * @return ISO-8601 local time with offset and milliseconds.
     */
    public static String isoTime(final long timeMs)
    {
        return ISO.format(Instant.ofEpochMilli(timeMs));
    }

    /**
     * @param wire       an event as received.
     * @param timestamps whether to prefix the time.
     * @return the text line, without a newline.
     */
    public static String text(final Map<String, Object> wire, final boolean timestamps)
    {
        final StringBuilder line = new StringBuilder(128);
        if (timestamps && wire.get("time_ms") instanceof Number time)
        {
            line.append(isoTime(time.longValue())).append(' ');
        }
        line.append(wire.get("action")).append(' ').append(wire.get("type"));
        for (final Map.Entry<String, Object> field : wire.entrySet())
        {
            final String key = field.getKey();
            if (key.equals("time_ms") || key.equals("action") || key.equals("type"))
            {
                continue;
            }
            line.append(' ').append(key).append('=');
            appendValue(line, field.getValue());
        }
        return line.toString();
    }

    /**
     * @param wire       an event as received.
     * @param timestamps whether to add an ISO-8601 {@code time} field.
     * @return the JSON object to print: action, type, then the fields.
     */
    public static Map<String, Object> json(final Map<String, Object> wire, final boolean timestamps)
    {
        final Map<String, Object> out = new LinkedHashMap<>();
        if (timestamps && wire.get("time_ms") instanceof Number time)
        {
            out.put("time", isoTime(time.longValue()));
        }
        for (final Map.Entry<String, Object> field : wire.entrySet())
        {
            if (!field.getKey().equals("time_ms"))
            {
                out.put(field.getKey(), field.getValue());
            }
        }
        return out;
    }

    static void appendValue(final StringBuilder line, final Object value)
    {
        if (value == null)
        {
            line.append('-');
            return;
        }
        final String s = value instanceof Double d && d == Math.rint(d) && !Double.isInfinite(d) ?
            Long.toString(d.longValue()) : String.valueOf(value);
        boolean plain = !s.isEmpty();
        for (int i = 0; i < s.length() && plain; i++)
        {
            final char c = s.charAt(i);
            plain = c > ' ' && c != '"' && c != '\\' && c < 0x7f;
        }
        if (plain)
        {
            line.append(s);
            return;
        }
        line.append('"');
        for (int i = 0; i < s.length(); i++)
        {
            final char c = s.charAt(i);
            switch (c)
            {
                case '"' -> line.append("\\\"");
                case '\\' -> line.append("\\\\");
                case '\n' -> line.append("\\n");
                case '\r' -> line.append("\\r");
                case '\t' -> line.append("\\t");
                default ->
                {
                    if (c < ' ')
                    {
                        line.append(String.format("\\u%04x", (int)c));
                    }
                    else
                    {
                        line.append(c);
                    }
                }
            }
        }
        line.append('"');
    }
}
