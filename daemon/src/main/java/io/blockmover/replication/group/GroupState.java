package io.blockmover.replication.group;

import java.util.Locale;

/**
 * What a group is doing, as 'blockmover group status' shows it.
 */
public enum GroupState
{
    /** Source: connecting or authenticating to the partner. */
    CONNECTING,
    /** Source: every region of a new group is being sent. */
    INITIAL_SYNC,
    /** Source: connected, sending regions that an outage or a full log left dirty. */
    RESYNC,
    /** Source: connected, shipping a log backlog. */
    CATCHING_UP,
    /** Source: connected and current; sync groups acknowledge writes only once the partner holds them. */
    REPLICATING,
    /** Source: the partner is unreachable; writes go on, tracked by the log and then the bitmaps. */
    DEGRADED,
    /** Source: replication stopped by the operator; writes go on, tracked. */
    SUSPENDED,
    /** Destination: waiting for the source. */
    WAITING,
    /** Destination: receiving and applying records. */
    RECEIVING,
    /** The group cannot run (a volume failed); the message says why. */
    FAILED;

    public String label()
    {
        return name().toLowerCase(Locale.ROOT).replace('_', '-');
    }
}
