package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_recv_wr}, the work request given to {@code ibv_post_recv}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                       wr_id (uint64_t)                        |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                 next (struct ibv_recv_wr *)                   |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                  sg_list (struct ibv_sge *)                   |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                        num_sge (int)                          |  24
 *  +---------------------------------------------------------------+
 *  |                          (padding)                            |  28
 *  +---------------------------------------------------------------+  32
 * </pre>
 */
public final class IbvRecvWrDescriptor
{
    public static final int WR_ID_OFFSET = 0;
    public static final int NEXT_OFFSET = 8;
    public static final int SG_LIST_OFFSET = 16;
    public static final int NUM_SGE_OFFSET = 24;
    /** {@code sizeof(struct ibv_recv_wr)}. */
    public static final int LENGTH = 32;

    private IbvRecvWrDescriptor()
    {
    }
}
