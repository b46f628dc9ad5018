package io.blockmover.replication.group;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The persisted definition of a group on one host: its role, its partner, its volumes and its log. Saved as
 * group.json in the group's directory; everything else (log, bitmaps) is derived from it.
 */
public final class GroupConfig
{
    public static final String ROLE_SOURCE = "source";
    public static final String ROLE_DESTINATION = "destination";

    public final String name;
    public final String role;
    public final String peer;
    /** Changed only by 'group set --mode' on the source (and on the destination by the next OPEN). */
    public volatile GroupMode mode;
    /**
     * Whether a sync source's writes wait while its partner is away (on-disconnect block) rather than go on, tracked
     * (continue). A setting of the group: it travels to the destination (OPEN, SETTINGS), so a switch keeps it,
     * and 'group set --on-disconnect' changes it.
     */
    public volatile boolean blockOnDisconnect;
    public final List<VolumePair> volumes;
    /** Changes only by a resize of this host's log (group set --log-size), on the conductor's thread. */
    public volatile long logSize;
    /**
     * Source only: the size a resize under way moves the log to (0: none), kept so that a daemon that stops in the
     * middle (kill -9, a reboot) goes on with it when it starts again rather than drop what was asked.
     */
    public long logResizeTo;
    public final int regionLength;
    public final long createdMs;
    public boolean suspended;
    public boolean initialSyncDone;
    /**
     * Source only, during the initial sync of a group created with --seeded: the partner's volumes already hold a
     * similar copy, so the initial sync compares every region (a repairing verify) and resends only those that
     * differ, instead of sending everything.
     */
    public volatile boolean seeding;
    /** RPO target in milliseconds; 0 for none (see {@link RpoTarget}). */
    public long rpoTargetMs;
    /** Scheduled verify (source only): run 'blockmover verify' this often, 0 = off. */
    public long verifyIntervalMs;

    /**
     * Takes the group's settings (RPO target, verify schedule, on-disconnect) as the source sent them; a key that is
     * missing (a source older than this one) keeps what is here.
     *
     * @param from the OPEN or SETTINGS fields.
     * @return whether a setting changed.
     */
    public boolean adoptSettings(final java.util.Map<String, Object> from)
    {
        final long rpo = from.get("rpo_target_ms") instanceof Number n ? n.longValue() : rpoTargetMs;
        final long verify = from.get("verify_interval_ms") instanceof Number n ? n.longValue() : verifyIntervalMs;
        final boolean block = from.get("on_disconnect") instanceof String text ? "block".equals(text) :
            blockOnDisconnect;
        final boolean changed = rpo != rpoTargetMs || verify != verifyIntervalMs || block != blockOnDisconnect;
        rpoTargetMs = rpo;
        verifyIntervalMs = verify;
        blockOnDisconnect = block;
        return changed;
    }

    /**
     * @return "block" or "continue", as --on-disconnect says it.
     */
    public String onDisconnectLabel()
    {
        return blockOnDisconnect ? "block" : "continue";
    }

    /**
     * @return the settings that travel with the group to its destination (OPEN, SETTINGS).
     */
    public java.util.Map<String, Object> settings()
    {
        final java.util.Map<String, Object> m = new java.util.LinkedHashMap<>();
        m.put("rpo_target_ms", rpoTargetMs);
        m.put("verify_interval_ms", verifyIntervalMs);
        m.put("on_disconnect", onDisconnectLabel());
        return m;
    }
    /** Source only: writes through the NBD exports refused by 'group freeze' (a cluster demoted it). */
    public boolean frozen;

    /**
     * One replicated volume: where it lives on the source and on the destination, and its size.
     */
    public static final class VolumePair
    {
        public final String source;
        public final String target;
        public final long size;

        public VolumePair(final String source, final String target, final long size)
        {
            this.source = source;
            this.target = target;
            this.size = size;
        }

        /**
         * @return the last path element of the source, the volume's name inside its NBD export name.
         */
        public String exportSuffix()
        {
            final int slash = source.lastIndexOf('/');
            return slash >= 0 ? source.substring(slash + 1) : source;
        }
    }

    public GroupConfig(final String name, final String role, final String peer, final GroupMode mode,
        final boolean blockOnDisconnect, final List<VolumePair> volumes, final long logSize, final int regionLength,
        final long createdMs)
    {
        this.name = name;
        this.role = role;
        this.peer = peer;
        this.mode = mode;
        this.blockOnDisconnect = blockOnDisconnect;
        this.volumes = List.copyOf(volumes);
        this.logSize = logSize;
        this.regionLength = regionLength;
        this.createdMs = createdMs;
    }

    public boolean isSource()
    {
        return ROLE_SOURCE.equals(role);
    }

    /**
     * @param name a proposed group name.
     * @return null when acceptable, else why not.
     */
    public static String checkName(final String name)
    {
        if (name == null || name.isEmpty() || name.length() > 64 || !name.matches("[A-Za-z0-9][A-Za-z0-9_.-]*"))
        {
            return "group name '" + name + "' must be 1-64 letters, digits, '.', '_' or '-', starting with a " +
                "letter or digit";
        }
        return null;
    }

    /**
     * @param state the group's state label.
     * @return the first fields of every group status: name, role, mode, peer, state; more may follow.
     */
    public Map<String, Object> statusHead(final String state)
    {
        final Map<String, Object> s = new LinkedHashMap<>();
        s.put("name", name);
        s.put("role", role);
        s.put("mode", mode.label());
        s.put("peer", peer);
        s.put("state", state);
        return s;
    }

    /**
     * @return the volume pairs as the control API and the OPEN request show them: source, target, size.
     */
    public List<Map<String, Object>> volumeList()
    {
        final List<Map<String, Object>> list = new ArrayList<>();
        for (final VolumePair pair : volumes)
        {
            list.add(Map.of("source", pair.source, "target", pair.target, "size", pair.size));
        }
        return list;
    }

    public Map<String, Object> toRecord()
    {
        final Map<String, Object> r = new LinkedHashMap<>();
        r.put("name", name);
        r.put("role", role);
        r.put("peer", peer);
        r.put("mode", mode.label());
        r.put("on_disconnect", onDisconnectLabel());
        final List<Map<String, Object>> vols = new ArrayList<>();
        for (final VolumePair v : volumes)
        {
            final Map<String, Object> m = new LinkedHashMap<>();
            m.put("source", v.source);
            m.put("target", v.target);
            m.put("size", v.size);
            vols.add(m);
        }
        r.put("volumes", vols);
        r.put("log_size", logSize);
        if (logResizeTo != 0)
        {
            r.put("log_resize_to", logResizeTo);
        }
        r.put("region_length", regionLength);
        r.put("created_ms", createdMs);
        r.put("suspended", suspended);
        r.put("initial_sync_done", initialSyncDone);
        r.put("seeding", seeding);
        r.put("rpo_target_ms", rpoTargetMs);
        r.put("verify_interval_ms", verifyIntervalMs);
        r.put("frozen", frozen);
        return r;
    }

    @SuppressWarnings("unchecked")
    public static GroupConfig fromRecord(final Map<String, Object> r)
    {
        final List<VolumePair> vols = new ArrayList<>();
        for (final Object o : (List<Object>)r.get("volumes"))
        {
            final Map<String, Object> m = (Map<String, Object>)o;
            vols.add(new VolumePair((String)m.get("source"), (String)m.get("target"),
                ((Number)m.get("size")).longValue()));
        }
        final GroupConfig c = new GroupConfig((String)r.get("name"), (String)r.get("role"), (String)r.get("peer"),
            GroupMode.parse((String)r.get("mode")), "block".equals(r.get("on_disconnect")), vols,
            ((Number)r.get("log_size")).longValue(), ((Number)r.get("region_length")).intValue(),
            ((Number)r.get("created_ms")).longValue());
        c.suspended = Boolean.TRUE.equals(r.get("suspended"));
        c.initialSyncDone = Boolean.TRUE.equals(r.get("initial_sync_done"));
        c.seeding = Boolean.TRUE.equals(r.get("seeding"));
        c.rpoTargetMs = r.get("rpo_target_ms") instanceof Number n ? n.longValue() : 0;
        c.verifyIntervalMs = r.get("verify_interval_ms") instanceof Number n ? n.longValue() : 0;
        c.frozen = Boolean.TRUE.equals(r.get("frozen"));
        c.logResizeTo = r.get("log_resize_to") instanceof Number n ? n.longValue() : 0;
        return c;
    }
}
