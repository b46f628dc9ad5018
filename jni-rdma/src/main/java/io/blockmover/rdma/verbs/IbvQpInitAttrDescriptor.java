package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_qp_init_attr}, given to {@code rdma_create_qp}, which writes the actual
 * capabilities back into {@code cap}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                    qp_context (void *)                        |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                 send_cq (struct ibv_cq *)                     |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                 recv_cq (struct ibv_cq *)                     |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                   srq (struct ibv_srq *)                      |  24
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                  cap.max_send_wr (uint32_t)                   |  32
 *  +---------------------------------------------------------------+
 *  |                  cap.max_recv_wr (uint32_t)                   |  36
 *  +---------------------------------------------------------------+
 *  |                  cap.max_send_sge (uint32_t)                  |  40
 *  +---------------------------------------------------------------+
 *  |                  cap.max_recv_sge (uint32_t)                  |  44
 *  +---------------------------------------------------------------+
 *  |                cap.max_inline_data (uint32_t)                 |  48
 *  +---------------------------------------------------------------+
 *  |                 qp_type (enum ibv_qp_type)                    |  52
 *  +---------------------------------------------------------------+
 *  |                       sq_sig_all (int)                        |  56
 *  +---------------------------------------------------------------+
 *  |                          (padding)                            |  60
 *  +---------------------------------------------------------------+  64
 * </pre>
 */
public final class IbvQpInitAttrDescriptor
{
    public static final int QP_CONTEXT_OFFSET = 0;
    public static final int SEND_CQ_OFFSET = 8;
    public static final int RECV_CQ_OFFSET = 16;
    public static final int SRQ_OFFSET = 24;
    public static final int CAP_MAX_SEND_WR_OFFSET = 32;
    public static final int CAP_MAX_RECV_WR_OFFSET = 36;
    public static final int CAP_MAX_SEND_SGE_OFFSET = 40;
    public static final int CAP_MAX_RECV_SGE_OFFSET = 44;
    public static final int CAP_MAX_INLINE_DATA_OFFSET = 48;
    public static final int QP_TYPE_OFFSET = 52;
    public static final int SQ_SIG_ALL_OFFSET = 56;
    /** {@code sizeof(struct ibv_qp_init_attr)}. */
    public static final int LENGTH = 64;

    /** {@code IBV_QPT_RC}: reliable connected, the only type iWARP offers. */
    public static final int IBV_QPT_RC = 2;

    private IbvQpInitAttrDescriptor()
    {
    }
}
