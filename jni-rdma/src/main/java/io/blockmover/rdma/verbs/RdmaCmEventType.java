package io.blockmover.rdma.verbs;

/**
 * {@code enum rdma_cm_event_type}. Constant names are the C names without the {@code RDMA_CM_EVENT_} prefix; codes
 * are checked against the header. {@link #get(int)} is allocation-free.
 */
public enum RdmaCmEventType
{
    ADDR_RESOLVED(0),
    ADDR_ERROR(1),
    ROUTE_RESOLVED(2),
    ROUTE_ERROR(3),
    CONNECT_REQUEST(4),
    CONNECT_RESPONSE(5),
    CONNECT_ERROR(6),
    UNREACHABLE(7),
    REJECTED(8),
    ESTABLISHED(9),
    DISCONNECTED(10),
    DEVICE_REMOVAL(11),
    MULTICAST_JOIN(12),
    MULTICAST_ERROR(13),
    ADDR_CHANGE(14),
    TIMEWAIT_EXIT(15),
    /** An event this table does not know (a newer librdmacm). */
    UNKNOWN(-1);

    private static final RdmaCmEventType[] BY_CODE;

    static
    {
        final RdmaCmEventType[] values = values();
        BY_CODE = new RdmaCmEventType[values.length - 1];
        for (final RdmaCmEventType type : values)
        {
            if (type.code >= 0)
            {
                BY_CODE[type.code] = type;
            }
        }
    }

    private final int code;

    RdmaCmEventType(final int code)
    {
        this.code = code;
    }

    /**
     * Type for a code read from {@code rdma_cm_event.event}.
     *
     * @param code the C value.
     * @return the constant, {@link #UNKNOWN} for values outside the table.
     */
    public static RdmaCmEventType get(final int code)
    {
        return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : UNKNOWN;
    }

    /**
     * The C enum value.
     *
     * @return e.g. 9 for {@link #ESTABLISHED}.
     */
    public int code()
    {
        return code;
    }

    /**
     * The C name, as {@code rdma_event_str} prints it.
     *
     * @return e.g. {@code "RDMA_CM_EVENT_ESTABLISHED"}.
     */
    public String cName()
    {
        return "RDMA_CM_EVENT_" + name();
    }
}
