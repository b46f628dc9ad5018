package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_send_wr}, the work request given to {@code ibv_post_send}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                       wr_id (uint64_t)                        |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                 next (struct ibv_send_wr *)                   |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                  sg_list (struct ibv_sge *)                   |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                        num_sge (int)                          |  24
 *  +---------------------------------------------------------------+
 *  |                 opcode (enum ibv_wr_opcode)                   |  28
 *  +---------------------------------------------------------------+
 *  |                   send_flags (unsigned int)                   |  32
 *  +---------------------------------------------------------------+
 *  |          imm_data / invalidate_rkey (__be32, unused)          |  36
 *  +---------------------------------------------------------------+
 *  |               wr.rdma.remote_addr (uint64_t)                  |  40
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                  wr.rdma.rkey (uint32_t)                      |  48
 *  +---------------------------------------------------------------+
 *  |     rest of the wr union, qp_type, bind_mw/tso union ...      |  52
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 128
 * </pre>
 * Host byte order. The library copies the request into the send queue during {@code ibv_post_send}, so one
 * pre-built request can be refilled and posted again at once. No write-with-immediate opcode is defined here on
 * purpose: iWARP has none, and the wire protocol must work on iWARP.
 */
public final class IbvSendWrDescriptor
{
    public static final int WR_ID_OFFSET = 0;
    public static final int NEXT_OFFSET = 8;
    public static final int SG_LIST_OFFSET = 16;
    public static final int NUM_SGE_OFFSET = 24;
    public static final int OPCODE_OFFSET = 28;
    public static final int SEND_FLAGS_OFFSET = 32;
    public static final int IMM_DATA_OFFSET = 36;
    public static final int RDMA_REMOTE_ADDR_OFFSET = 40;
    public static final int RDMA_RKEY_OFFSET = 48;
    /** {@code sizeof(struct ibv_send_wr)}. */
    public static final int LENGTH = 128;

    /** {@code IBV_WR_RDMA_WRITE}: write local SGEs to remote_addr/rkey, no completion at the peer. */
    public static final int IBV_WR_RDMA_WRITE = 0;
    /** {@code IBV_WR_SEND}: consumes one receive at the peer. */
    public static final int IBV_WR_SEND = 2;
    /** {@code IBV_WR_RDMA_READ}: read remote_addr/rkey into the local SGEs. */
    public static final int IBV_WR_RDMA_READ = 4;

    private IbvSendWrDescriptor()
    {
    }
}
