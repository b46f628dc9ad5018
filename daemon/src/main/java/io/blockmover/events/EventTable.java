package io.blockmover.events;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * Turns successive observations of every object into events. The owner observes all objects once per tick
 * ({@link #begin()}, {@link #observe}, {@link #end}); the table remembers what subscribers were last told about
 * each object and reports the difference: {@code create} for a new object, {@code change} with the changed
 * attributes, {@code destroy} for an object not observed this tick.
 * <p>
 * Attributes named as <em>progress</em> (bytes done, dirty bytes) change all the time: a change of progress alone
 * is reported at most once per throttle interval, while any other change is reported at once, together with
 * whatever progress moved. Conductor thread only.
 */
public final class EventTable
{
    private final Set<String> progressKeys;
    private final long throttleMs;
    private final Map<String, Entry> objects = new LinkedHashMap<>();
    private long tick;

    private static final class Entry
    {
        final String type;
        final Map<String, Object> identity;
        final Map<String, Object> reported = new LinkedHashMap<>();
        long reportedMs;
        long seenTick;

        Entry(final String type, final Map<String, Object> identity)
        {
            this.type = type;
            this.identity = new LinkedHashMap<>(identity);
        }
    }

    /**
     * @param progressKeys attribute names whose changes alone are throttled.
     * @param throttleMs   shortest interval between two progress-only changes of one object.
     */
    public EventTable(final Set<String> progressKeys, final long throttleMs)
    {
        this.progressKeys = Set.copyOf(progressKeys);
        this.throttleMs = throttleMs;
    }

    /**
     * Starts a tick: every object not observed before {@link #end} is destroyed.
     */
    public void begin()
    {
        tick++;
    }

    /**
     * Reports an object as it is now.
     *
     * @param type     of the object.
     * @param identity fields that name it (e.g. name, or group and volume), in print order.
     * @param attrs    its attributes now, in print order.
     * @param nowMs    epoch milliseconds.
     * @param out      receives the event, if any.
     */
    public void observe(final String type, final Map<String, Object> identity, final Map<String, Object> attrs,
        final long nowMs, final List<Event> out)
    {
        final String key = type + ' ' + identity;
        Entry entry = objects.get(key);
        if (entry == null)
        {
            entry = new Entry(type, identity);
            objects.put(key, entry);
            entry.reported.putAll(attrs);
            entry.reportedMs = nowMs;
            entry.seenTick = tick;
            out.add(new Event(nowMs, Event.CREATE, type, join(identity, attrs)));
            return;
        }
        entry.seenTick = tick;
        final Map<String, Object> changed = new LinkedHashMap<>();
        boolean urgent = false;
        for (final Map.Entry<String, Object> attr : attrs.entrySet())
        {
            if (!Objects.equals(entry.reported.get(attr.getKey()), attr.getValue()) ||
                !entry.reported.containsKey(attr.getKey()))
            {
                changed.put(attr.getKey(), attr.getValue());
                urgent |= !progressKeys.contains(attr.getKey());
            }
        }
        for (final String old : entry.reported.keySet())
        {
            if (!attrs.containsKey(old) && entry.reported.get(old) != null)
            {
                changed.put(old, null);
                urgent |= !progressKeys.contains(old);
            }
        }
        if (changed.isEmpty() || (!urgent && nowMs - entry.reportedMs < throttleMs))
        {
            return;
        }
        for (final Map.Entry<String, Object> attr : changed.entrySet())
        {
            if (attr.getValue() == null && !attrs.containsKey(attr.getKey()))
            {
                entry.reported.remove(attr.getKey());
            }
            else
            {
                entry.reported.put(attr.getKey(), attr.getValue());
            }
        }
        entry.reportedMs = nowMs;
        out.add(new Event(nowMs, Event.CHANGE, type, join(identity, changed)));
    }

    /**
     * Ends a tick: objects not observed in it are destroyed.
     *
     * @param nowMs epoch milliseconds.
     * @param out   receives the destroy events.
     */
    public void end(final long nowMs, final List<Event> out)
    {
        for (final Iterator<Entry> it = objects.values().iterator(); it.hasNext();)
        {
            final Entry entry = it.next();
            if (entry.seenTick != tick)
            {
                it.remove();
                out.add(new Event(nowMs, Event.DESTROY, entry.type, entry.identity));
            }
        }
    }

    /**
     * @param nowMs epoch milliseconds.
     * @return an {@code exists} event for every object as subscribers were last told, then the marker.
     */
    public List<Event> snapshot(final long nowMs)
    {
        final List<Event> events = new ArrayList<>(objects.size() + 1);
        for (final Entry entry : objects.values())
        {
            events.add(new Event(nowMs, Event.EXISTS, entry.type, join(entry.identity, entry.reported)));
        }
        events.add(Event.marker(nowMs));
        return events;
    }

    /**
     * Forgets every object, so the next tick reports all as created (used when the first subscriber arrives
     * after a time without any, when nobody kept the table current).
     */
    public void clear()
    {
        objects.clear();
    }

    /**
     * @return objects known.
     */
    public int size()
    {
        return objects.size();
    }

    private static Map<String, Object> join(final Map<String, Object> identity, final Map<String, Object> attrs)
    {
        final Map<String, Object> fields = new LinkedHashMap<>(identity);
        for (final Map.Entry<String, Object> attr : attrs.entrySet())
        {
            fields.putIfAbsent(attr.getKey(), attr.getValue());
        }
        return fields;
    }
}
