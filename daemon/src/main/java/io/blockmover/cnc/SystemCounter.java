package io.blockmover.cnc;

/**
 * Daemon-wide counters, in the order they appear in the counters file. Labels are stable: monitoring keys on
 * them.
 */
public enum SystemCounter
{
    ERRORS("errors"),
    BYTES_SENT("bytes sent"),
    BYTES_RECEIVED("bytes received"),
    CHUNKS_SENT("chunks sent"),
    CHUNKS_RECEIVED("chunks received"),
    CHUNKS_WRITTEN("chunks written"),
    CHUNKS_RESENT("chunks resent"),
    PAYLOAD_CRC_ERRORS("payload crc errors"),
    FRAME_ERRORS("frame errors"),
    AUTH_FAILURES("auth failures"),
    CONNECTIONS_ACCEPTED("connections accepted"),
    CONNECTIONS_LOST("connections lost"),
    PEER_TIMEOUTS("peer timeouts"),
    CONTROL_REQUESTS("control requests"),
    CONTROL_REJECTED("control requests rejected"),
    REGIONS_COMPARED("regions compared"),
    REGIONS_DIFFERENT("regions different"),
    VERIFY_MISMATCHES("verify mismatches"),
    VOLUME_FORCES("volume forces"),
    JOBS_COMPLETED("jobs completed"),
    JOBS_FAILED("jobs failed"),
    RDMA_ZERO_COPY_SENDS("rdma zero copy sends");

    /** Type id of system counters in the counters file. */
    public static final int TYPE_ID = 1;

    private final String label;

    SystemCounter(final String label)
    {
        this.label = label;
    }

    public String label()
    {
        return label;
    }
}
