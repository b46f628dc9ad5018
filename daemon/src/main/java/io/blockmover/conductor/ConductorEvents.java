package io.blockmover.conductor;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.events.Event;
import io.blockmover.events.EventBus;
import io.blockmover.events.EventSink;
import io.blockmover.events.EventTable;

/**
 * The daemon's side of {@code blockmover events}: while anyone subscribes, observes every object each
 * housekeeping tick and publishes the differences.
 * <p>
 * Why a diff of observations rather than publish calls at each transition: a group's state is derived (from the
 * shipper, the link, the bitmaps, the partner's ACKs) and several of its transitions happen on data threads
 * (catching-up becomes replicating when an ACK arrives on the shipper's thread). Observing on the conductor
 * catches every transition without touching the data path, at the cost of up to one tick (100 ms) of delay and
 * of transitions shorter than a tick going unseen; and it costs nothing while nobody subscribes. Conductor thread
 * only.
 */
final class ConductorEvents
{
    /** Most bytes a subscriber may leave unread before it is dropped. */
    static final long MAX_PENDING_BYTES = 1024 * 1024;
    /** Shortest interval between two progress-only changes of one object. */
    static final long PROGRESS_INTERVAL_MS = 1000;
    private static final Set<String> PROGRESS = Set.of("dirty_bytes", "bytes_done", "rpo_bytes");

    private final Conductor conductor;
    private final EventBus bus = new EventBus(new EventTable(PROGRESS, PROGRESS_INTERVAL_MS), MAX_PENDING_BYTES);
    private final List<Event> pending = new ArrayList<>();
    private volatile String lastError; // Set by error() from any thread.

    ConductorEvents(final Conductor conductor)
    {
        this.conductor = conductor;
    }

    /**
     * The last error the daemon reported, shown on the daemon object. Any thread.
     */
    void error(final String message)
    {
        lastError = message;
    }

    /**
     * Answers an {@code events} request: the reply, the snapshot and its marker, then changes until the client
     * goes away (or only the snapshot when {@code now} is set).
     */
    void subscribe(final ControlServer.Client client, final Object id, final Map<String, Object> args)
    {
        final long nowMs = System.currentTimeMillis();
        observe(nowMs); // Brings the table up to date for the snapshot; existing subscribers get the changes.
        final Map<String, Object> result = new LinkedHashMap<>();
        result.put("node", conductor.ctx().nodeName());
        result.put("subscribed", true);
        client.reply(id, result);
        bus.subscribe(new ClientSink(client), Boolean.TRUE.equals(args.get("now")), nowMs);
    }

    /**
     * Housekeeping: publish what changed, if anyone listens.
     */
    void tick()
    {
        if (bus.hasSubscribers())
        {
            observe(System.currentTimeMillis());
        }
    }

    /**
     * @return subscribers dropped for falling behind.
     */
    long dropped()
    {
        return bus.dropped();
    }

    void close(final String reason)
    {
        bus.closeAll(System.currentTimeMillis(), reason);
    }

    @SuppressWarnings("unchecked")
    private void observe(final long nowMs)
    {
        final EventTable table = bus.table();
        pending.clear();
        table.begin();
        final Map<String, Object> daemon = new LinkedHashMap<>();
        daemon.put("errors", conductor.cnc().counter(SystemCounter.ERRORS).get());
        if (lastError != null)
        {
            daemon.put("last_error", lastError);
        }
        table.observe("daemon", Map.of("node", conductor.ctx().nodeName()), daemon, nowMs, pending);

        final Map<String, String> peerTransport = new HashMap<>();
        for (final Map<String, Object> group : conductor.groups().statuses())
        {
            final String name = String.valueOf(group.get("name"));
            final String role = String.valueOf(group.get("role"));
            final Map<String, Object> attrs = new LinkedHashMap<>();
            attrs.put("role", role);
            attrs.put("state", group.get("state"));
            attrs.put("mode", group.get("mode"));
            attrs.put("peer", group.get("peer"));
            attrs.put("transport", group.get("transport") == null ? "none" : group.get("transport"));
            if (group.get("rpo_target_s") instanceof Number target)
            {
                attrs.put("rpo", Boolean.TRUE.equals(group.get("rpo_target_exceeded")) ? "exceeded" : "ok");
                attrs.put("rpo_target", io.blockmover.replication.group.RpoTarget.format(
                    Math.round(target.doubleValue() * 1000)));
            }
            if (Boolean.TRUE.equals(group.get("switching")))
            {
                // Only while it lasts: a planned switch draining to the partner, writes refused.
                attrs.put("switching", "yes");
            }
            if (group.get("log_resize") instanceof Map<?, ?> resize)
            {
                // Only while it lasts, like switching: its removal, with no log_resize_error, is the resize done.
                attrs.put("log_resize", Boolean.TRUE.equals(resize.get("copying")) ? "copying" :
                    resize.get("waiting") != null ? "waiting" : "writing");
            }
            if (group.get("log_resize_error") != null)
            {
                attrs.put("log_resize_error", group.get("log_resize_error"));
            }
            if (group.get("consistent") instanceof Boolean consistent)
            {
                // A destination: whether a failover to it would be safe. A cluster manager waits for this event
                // instead of polling status (it turns no at a resync's first write, yes at its end).
                attrs.put("consistent", consistent ? "yes" : "no");
            }
            if (group.get("failover_pending") != null)
            {
                // Only while it lasts: a failover waiting for this destination to apply its log.
                attrs.put("failover", "pending");
            }
            if (group.get("test_mount") != null || group.get("test_mount_pending") != null)
            {
                // Only while it lasts: a test failover's views, which keep the old contents of every grain the
                // applier overwrites in the state directory until dismounted.
                attrs.put("test_mount", group.get("test_mount") != null ? "mounted" : "pending");
            }
            if (group.get("test_mount_error") != null)
            {
                attrs.put("test_mount_error", group.get("test_mount_error"));
            }
            if (Boolean.TRUE.equals(group.get("partner_apply_failing")))
            {
                // Only while it lasts: its removal is the recovery event.
                attrs.put("partner", "cannot-apply");
            }
            if (group.get("error") != null || group.get("last_error") != null)
            {
                attrs.put("error", group.get("error") != null ? group.get("error") : group.get("last_error"));
            }
            table.observe("group", Map.of("name", name), attrs, nowMs, pending);
            if (group.get("transport") != null)
            {
                peerTransport.put(String.valueOf(group.get("peer")), String.valueOf(group.get("transport")));
            }
            final List<Map<String, Object>> volumes = (List<Map<String, Object>>)group.get("volumes");
            for (int i = 0; volumes != null && i < volumes.size(); i++)
            {
                final Map<String, Object> volume = volumes.get(i);
                final Map<String, Object> identity = new LinkedHashMap<>();
                identity.put("group", name);
                identity.put("volume", i);
                final Map<String, Object> v = new LinkedHashMap<>();
                v.put("path", "source".equals(role) ? volume.get("source") : volume.get("target"));
                v.put("size", volume.get("size"));
                if (volume.get("dirty_bytes") != null)
                {
                    v.put("dirty_bytes", volume.get("dirty_bytes"));
                }
                if (volume.get("nbd_uri") != null)
                {
                    v.put("nbd_uri", volume.get("nbd_uri"));
                }
                table.observe("volume", identity, v, nowMs, pending);
            }
        }

        for (final Map<String, Object> job : conductor.jobDescriptions())
        {
            final Map<String, Object> attrs = new LinkedHashMap<>();
            attrs.put("state", job.get("state"));
            attrs.put("phase", job.get("phase"));
            attrs.put("source", job.get("source"));
            attrs.put("peer", job.get("peer"));
            attrs.put("target", job.get("target"));
            attrs.put("size", job.get("size"));
            attrs.put("bytes_done", job.get("bytes_done"));
            if (job.get("error") instanceof Map<?, ?> error)
            {
                attrs.put("error", error.get("code") + ": " + error.get("message"));
            }
            table.observe("job", Map.of("id", job.get("id")), attrs, nowMs, pending);
            if ("running".equals(job.get("state")) && job.get("transport") != null)
            {
                peerTransport.putIfAbsent(String.valueOf(job.get("peer")), String.valueOf(job.get("transport")));
            }
        }

        for (final PeerConfig peer : conductor.ctx().peers().values())
        {
            final String transport = peerTransport.get(peer.name());
            final Map<String, Object> attrs = new LinkedHashMap<>();
            attrs.put("address", peer.address().getHostString() + ":" + peer.address().getPort());
            attrs.put("connection", transport != null ? "connected" : "disconnected");
            attrs.put("transport", transport != null ? transport : "none");
            table.observe("peer", Map.of("name", peer.name()), attrs, nowMs, pending);
        }
        table.end(nowMs, pending);
        bus.publish(pending);
    }

    /**
     * A control client as an event subscriber.
     */
    private static final class ClientSink implements EventSink
    {
        private final ControlServer.Client client;

        ClientSink(final ControlServer.Client client)
        {
            this.client = client;
        }

        @Override
        public void send(final byte[] line)
        {
            client.sendLine(line);
        }

        @Override
        public long pendingBytes()
        {
            return client.pendingBytes();
        }

        @Override
        public void closeAfterFlush()
        {
            client.closeAfterFlush();
        }

        @Override
        public boolean isClosed()
        {
            return client.isClosed();
        }
    }
}
