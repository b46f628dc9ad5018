package io.blockmover.rdma.verbs;

/**
 * The fields of {@code struct ibv_qp} this binding reads.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |     context (struct ibv_context *): ops table for post_*      |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |      qp_context, pd, send_cq, recv_cq, srq, handle ...        |   8
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                       qp_num (uint32_t)                       |  52
 *  +---------------------------------------------------------------+
 *  |   state, qp_type, mutex, cond, events_completed ...           |  56
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 160
 * </pre>
 */
public final class IbvQpDescriptor
{
    public static final int CONTEXT_OFFSET = 0;
    public static final int QP_NUM_OFFSET = 52;
    /** {@code sizeof(struct ibv_qp)}. */
    public static final int LENGTH = 160;

    private IbvQpDescriptor()
    {
    }
}
