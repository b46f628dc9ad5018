package io.blockmover.rdma.verbs;

/**
 * The part of {@code struct ibv_qp_attr} used with {@code ibv_modify_qp} to move a QP to the error state, which
 * flushes every outstanding work request as IBV_WC_WR_FLUSH_ERR (the way the kernel's ib_drain_qp does it).
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                qp_state (enum ibv_qp_state)                   |   0
 *  +---------------------------------------------------------------+
 *  |              cur_qp_state (enum ibv_qp_state)                 |   4
 *  +---------------------------------------------------------------+
 *  |      path_mtu, path_mig_state, qkey, rq_psn, sq_psn ...       |   8
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 144
 * </pre>
 */
public final class IbvQpAttrDescriptor
{
    public static final int QP_STATE_OFFSET = 0;
    /** {@code sizeof(struct ibv_qp_attr)}. */
    public static final int LENGTH = 144;

    /** {@code IBV_QPS_ERR}: error state; outstanding work requests are flushed. */
    public static final int IBV_QPS_ERR = 6;
    /** {@code IBV_QP_STATE}: attribute mask bit selecting {@code qp_state}. */
    public static final int IBV_QP_STATE = 1;

    private IbvQpAttrDescriptor()
    {
    }
}
