package io.blockmover.rdma.verbs;

/**
 * The fields of {@code struct ibv_cq} this binding reads.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |     context (struct ibv_context *): ops table for poll_cq     |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |              channel, cq_context, handle                      |   8
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                cqe (int): actual number of entries            |  28
 *  +---------------------------------------------------------------+
 *  |      mutex, cond, comp_events_completed ...                   |  32
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 128
 * </pre>
 */
public final class IbvCqDescriptor
{
    public static final int CONTEXT_OFFSET = 0;
    public static final int CQE_OFFSET = 28;
    /** {@code sizeof(struct ibv_cq)}. */
    public static final int LENGTH = 128;

    private IbvCqDescriptor()
    {
    }
}
