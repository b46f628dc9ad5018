package io.blockmover.events;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class EventTableTest
{
    private final EventTable table = new EventTable(Set.of("dirty_bytes"), 1000);
    private final List<Event> out = new ArrayList<>();

    private static Map<String, Object> attrs(final Object... kv)
    {
        final Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2)
        {
            m.put((String)kv[i], kv[i + 1]);
        }
        return m;
    }

    private List<String> tick(final long nowMs, final Map<String, Object> group, final Map<String, Object> volume)
    {
        out.clear();
        table.begin();
        if (group != null)
        {
            table.observe("group", Map.of("name", "sql"), group, nowMs, out);
        }
        if (volume != null)
        {
            table.observe("volume", attrs("group", "sql", "volume", 0), volume, nowMs, out);
        }
        table.end(nowMs, out);
        final List<String> lines = new ArrayList<>();
        for (final Event e : out)
        {
            lines.add(e.toString());
        }
        return lines;
    }

    @Test
    void shouldReportCreateThenOnlyChangedAttributesThenDestroy()
    {
        assertEquals(List.of("create group name=sql state=replicating peer=b",
            "create volume group=sql volume=0 dirty_bytes=0"),
            tick(0, attrs("state", "replicating", "peer", "b"), attrs("dirty_bytes", 0)));
        assertEquals(List.of(), tick(100, attrs("state", "replicating", "peer", "b"), attrs("dirty_bytes", 0)));
        assertEquals(List.of("change group name=sql state=degraded"),
            tick(200, attrs("state", "degraded", "peer", "b"), attrs("dirty_bytes", 0)));
        assertEquals(List.of("change group name=sql state=replicating"),
            tick(300, attrs("state", "replicating", "peer", "b"), attrs("dirty_bytes", 0)));
        assertEquals(List.of("destroy volume group=sql volume=0"),
            tick(400, attrs("state", "replicating", "peer", "b"), null));
    }

    @Test
    void shouldThrottleProgressAloneButNotWithAStateChange()
    {
        tick(0, attrs("state", "resync"), attrs("dirty_bytes", 100, "path", "/a"));
        assertEquals(List.of(), tick(100, attrs("state", "resync"), attrs("dirty_bytes", 90, "path", "/a")));
        assertEquals(List.of(), tick(900, attrs("state", "resync"), attrs("dirty_bytes", 80, "path", "/a")));
        assertEquals(List.of("change volume group=sql volume=0 dirty_bytes=70"),
            tick(1000, attrs("state", "resync"), attrs("dirty_bytes", 70, "path", "/a")));
        assertEquals(List.of("change volume group=sql volume=0 dirty_bytes=60 path=/b"),
            tick(1100, attrs("state", "resync"), attrs("dirty_bytes", 60, "path", "/b")));
    }

    @Test
    void shouldSnapshotWhatSubscribersWereToldAndEndWithTheMarker()
    {
        tick(0, attrs("state", "replicating", "error", null), attrs("dirty_bytes", 5));
        tick(10, attrs("state", "degraded", "error", "link down"), attrs("dirty_bytes", 6));
        final List<Event> snapshot = table.snapshot(20);
        assertEquals(3, snapshot.size());
        assertEquals("exists group name=sql state=degraded error=\"link down\"", snapshot.get(0).toString());
        assertEquals("exists volume group=sql volume=0 dirty_bytes=5", snapshot.get(1).toString());
        assertEquals("exists -", snapshot.get(2).toString());
    }

    @Test
    void shouldReportARemovedAttributeAsMissing()
    {
        tick(0, attrs("state", "degraded", "error", "timeout"), null);
        assertEquals(List.of("change group name=sql error=-"), tick(10, attrs("state", "degraded"), null));
        assertEquals(List.of(), tick(20, attrs("state", "degraded"), null));
        final String line = new String(EventBus.encode(new Event(0, Event.CHANGE, "group",
            attrs("name", "sql", "error", null))), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(line.contains("\"error\":null") && line.endsWith("\n"), line);
    }

    @Test
    void shouldQuoteValuesThatWouldBreakTheLineAndPrefixTimestamps()
    {
        final Map<String, Object> wire = new Event(0, Event.CHANGE, "daemon",
            attrs("node", "a", "last_error", "peer b: \"refused\"\nretry", "rpo_seconds", 2.0, "empty", "")).toWire();
        assertEquals("change daemon node=a last_error=\"peer b: \\\"refused\\\"\\nretry\" rpo_seconds=2 empty=\"\"",
            EventFormat.text(wire, false));
        final String stamped = EventFormat.text(wire, true);
        final String iso = "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}(Z|[+-]\\d\\d:\\d\\d)";
        assertTrue(stamped.matches(iso + " change daemon .*"), stamped);
        final Map<String, Object> json = EventFormat.json(wire, true);
        assertEquals(List.of("time", "action", "type", "node", "last_error", "rpo_seconds", "empty"),
            new ArrayList<>(json.keySet()));
    }

    @Test
    void shouldDropASubscriberThatStopsReadingWithALastLineAndKeepTheOthers()
    {
        final EventBus bus = new EventBus(table, 100);
        final Sink slow = new Sink(true);
        final Sink fast = new Sink(false);
        tick(0, attrs("state", "replicating"), null);
        bus.subscribe(slow, false, 0);
        bus.subscribe(fast, false, 0);
        assertEquals(2, fast.lines.size(), "snapshot and marker");
        for (int i = 0; i < 10; i++)
        {
            tick(i + 1, attrs("state", i % 2 == 0 ? "degraded" : "replicating"), null);
            bus.publish(out);
        }
        assertEquals(12, fast.lines.size());
        assertEquals(1, bus.dropped());
        assertTrue(slow.closing);
        assertTrue(slow.lines.get(slow.lines.size() - 1).contains("\"action\":\"end\"") &&
            slow.lines.get(slow.lines.size() - 1).contains("subscriber too slow"), slow.lines.toString());
        assertTrue(bus.hasSubscribers());
    }

    private static final class Sink implements EventSink
    {
        final List<String> lines = new ArrayList<>();
        final boolean neverReads;
        long pending;
        boolean closing;

        Sink(final boolean neverReads)
        {
            this.neverReads = neverReads;
        }

        @Override
        public void send(final byte[] line)
        {
            lines.add(new String(line, java.nio.charset.StandardCharsets.UTF_8).trim());
            pending += neverReads ? line.length : 0;
        }

        @Override
        public long pendingBytes()
        {
            return pending;
        }

        @Override
        public void closeAfterFlush()
        {
            closing = true;
        }

        @Override
        public boolean isClosed()
        {
            return false;
        }
    }
}
