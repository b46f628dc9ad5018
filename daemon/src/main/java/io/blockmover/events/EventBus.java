package io.blockmover.events;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;

/**
 * Fans events out to the subscribers of {@code blockmover events}. Each event is encoded once
 * ({@code {"event": {...}}\n}) and the same bytes are queued for every subscriber. A subscriber that lets more
 * than {@code maxPendingBytes} pile up (stopped reading, or a pipe into something slow) is dropped with a last
 * {@code end} line that says why, so it can never make the daemon buffer without bound or stall the conductor.
 * Conductor thread only.
 */
public final class EventBus
{
    private static final JSON NULLS = JSON.std.with(JSON.Feature.WRITE_NULL_PROPERTIES);
    private final EventTable table;
    private final long maxPendingBytes;
    private final List<EventSink> subscribers = new ArrayList<>();
    private long dropped;

    /**
     * @param table           the objects, kept current by the owner while there are subscribers.
     * @param maxPendingBytes most bytes a subscriber may leave unread before it is dropped.
     */
    public EventBus(final EventTable table, final long maxPendingBytes)
    {
        this.table = table;
        this.maxPendingBytes = maxPendingBytes;
    }

    public EventTable table()
    {
        return table;
    }

    /**
     * @return whether anyone listens (the owner need not observe objects otherwise).
     */
    public boolean hasSubscribers()
    {
        for (final Iterator<EventSink> it = subscribers.iterator(); it.hasNext();)
        {
            if (it.next().isClosed())
            {
                it.remove();
            }
        }
        return !subscribers.isEmpty();
    }

    /**
     * @return subscribers dropped for falling behind, since start.
     */
    public long dropped()
    {
        return dropped;
    }

    /**
     * Sends the snapshot and its marker, then keeps the sink for changes unless it only wanted the snapshot.
     * The owner must have brought the table up to date first.
     *
     * @param sink  the new subscriber.
     * @param now   whether to end the stream after the marker ({@code events --now}).
     * @param nowMs epoch milliseconds.
     */
    public void subscribe(final EventSink sink, final boolean now, final long nowMs)
    {
        for (final Event event : table.snapshot(nowMs))
        {
            sink.send(encode(event));
        }
        if (now)
        {
            sink.closeAfterFlush();
            return;
        }
        subscribers.add(sink);
    }

    /**
     * @param events to send to every subscriber, in order.
     */
    public void publish(final List<Event> events)
    {
        if (events.isEmpty() || subscribers.isEmpty())
        {
            return;
        }
        for (final Event event : events)
        {
            final byte[] line = encode(event);
            for (final Iterator<EventSink> it = subscribers.iterator(); it.hasNext();)
            {
                final EventSink sink = it.next();
                if (sink.isClosed())
                {
                    it.remove();
                }
                else if (sink.pendingBytes() > maxPendingBytes)
                {
                    it.remove();
                    dropped++;
                    sink.send(encode(Event.end(event.timeMs(), "subscriber too slow: more than " + maxPendingBytes +
                        " bytes of events unread; reconnect to get a fresh snapshot")));
                    sink.closeAfterFlush();
                }
                else
                {
                    sink.send(line);
                }
            }
        }
    }

    /**
     * Ends every stream with a last line.
     *
     * @param nowMs  epoch milliseconds.
     * @param reason why, for the operator.
     */
    public void closeAll(final long nowMs, final String reason)
    {
        final byte[] line = encode(Event.end(nowMs, reason));
        for (final EventSink sink : subscribers)
        {
            if (!sink.isClosed())
            {
                sink.send(line);
                sink.closeAfterFlush();
            }
        }
        subscribers.clear();
    }

    /**
     * @param event an event.
     * @return its line on the control socket, with the newline.
     */
    public static byte[] encode(final Event event)
    {
        try
        {
            // Nulls are written: in a change they say that an attribute went away.
            final byte[] json = NULLS.asBytes(Map.of("event", event.toWire()));
            final byte[] line = new byte[json.length + 1];
            System.arraycopy(json, 0, line, 0, json.length);
            line[json.length] = '\n';
            return line;
        }
        catch (final IOException ex)
        {
            throw new IllegalStateException("cannot encode event " + event.type() + ": " + ex, ex);
        }
    }
}
