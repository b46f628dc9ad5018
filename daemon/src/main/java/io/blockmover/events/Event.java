package io.blockmover.events;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One line of the event stream: an action on an object, with the object's identity first and then the
 * attributes the line reports (all of them for {@code exists} and {@code create}, the changed ones for
 * {@code change}, none for {@code destroy}). Immutable once built.
 */
public final class Event
{
    /** The object was there when the subscription started. */
    public static final String EXISTS = "exists";
    /** The object appeared. */
    public static final String CREATE = "create";
    /** Some attributes of the object changed. */
    public static final String CHANGE = "change";
    /** The object went away. */
    public static final String DESTROY = "destroy";
    /** The last line of a stream: the daemon ends it, and says why. */
    public static final String END = "end";
    /** Type of the marker line that ends the snapshot, and of the end line. */
    public static final String NO_TYPE = "-";

    private final long timeMs;
    private final String action;
    private final String type;
    private final Map<String, Object> fields;

    /**
     * @param timeMs epoch milliseconds of the observation.
     * @param action exists, create, change, destroy or end.
     * @param type   daemon, group, volume, peer, job, or {@link #NO_TYPE}.
     * @param fields identity, then attributes, in print order (copied).
     */
    public Event(final long timeMs, final String action, final String type, final Map<String, Object> fields)
    {
        this.timeMs = timeMs;
        this.action = action;
        this.type = type;
        this.fields = new LinkedHashMap<>(fields);
    }

    /**
     * @param timeMs epoch milliseconds.
     * @return the marker that ends the snapshot ({@code exists -}).
     */
    public static Event marker(final long timeMs)
    {
        return new Event(timeMs, EXISTS, NO_TYPE, Map.of());
    }

    /**
     * @param timeMs epoch milliseconds.
     * @param reason why the stream ends, for the operator.
     * @return the last line of a stream ({@code end - reason="..."}).
     */
    public static Event end(final long timeMs, final String reason)
    {
        return new Event(timeMs, END, NO_TYPE, Map.of("reason", reason));
    }

    public long timeMs()
    {
        return timeMs;
    }

    public String action()
    {
        return action;
    }

    public String type()
    {
        return type;
    }

    /**
     * @return identity and attributes, in print order (do not modify).
     */
    public Map<String, Object> fields()
    {
        return fields;
    }

    /**
     * @return the event as it travels over the control socket: a flat JSON object
     *     {@code {"time_ms": ..., "action": ..., "type": ..., field: value, ...}}.
     */
    public Map<String, Object> toWire()
    {
        final Map<String, Object> wire = new LinkedHashMap<>();
        wire.put("time_ms", timeMs);
        wire.put("action", action);
        wire.put("type", type);
        for (final Map.Entry<String, Object> field : fields.entrySet())
        {
            if (!wire.containsKey(field.getKey()))
            {
                wire.put(field.getKey(), field.getValue());
            }
        }
        return wire;
    }

    @Override
    public String toString()
    {
        return EventFormat.text(toWire(), false);
    }
}
