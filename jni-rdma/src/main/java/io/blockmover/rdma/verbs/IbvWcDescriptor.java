package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_wc}, one work completion filled in by {@code ibv_poll_cq}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                       wr_id (uint64_t)                        |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                  status (enum ibv_wc_status)                  |   8
 *  +---------------------------------------------------------------+
 *  |                  opcode (enum ibv_wc_opcode)                  |  12
 *  +---------------------------------------------------------------+
 *  |                     vendor_err (uint32_t)                     |  16
 *  +---------------------------------------------------------------+
 *  |                      byte_len (uint32_t)                      |  20
 *  +---------------------------------------------------------------+
 *  |                  imm_data (__be32, unused)                    |  24
 *  +---------------------------------------------------------------+
 *  |                       qp_num (uint32_t)                       |  28
 *  +---------------------------------------------------------------+
 *  |                       src_qp (uint32_t)                       |  32
 *  +---------------------------------------------------------------+
 *  |                    wc_flags (unsigned int)                    |  36
 *  +---------------------------------------------------------------+
 *  |   pkey_index, slid, sl, dlid_path_bits (UD only), padding     |  40
 *  |                                                               |
 *  +---------------------------------------------------------------+  48
 * </pre>
 * Only {@code wr_id}, {@code status}, {@code vendor_err} and {@code qp_num} are valid when {@code status} is not
 * {@code IBV_WC_SUCCESS}; in particular {@code opcode} is undefined for flushed requests.
 */
public final class IbvWcDescriptor
{
    public static final int WR_ID_OFFSET = 0;
    public static final int STATUS_OFFSET = 8;
    public static final int OPCODE_OFFSET = 12;
    public static final int VENDOR_ERR_OFFSET = 16;
    public static final int BYTE_LEN_OFFSET = 20;
    public static final int QP_NUM_OFFSET = 28;
    public static final int WC_FLAGS_OFFSET = 36;
    /** {@code sizeof(struct ibv_wc)}: stride of the array given to {@code ibv_poll_cq}. */
    public static final int LENGTH = 48;

    /** {@code IBV_WC_SEND}. */
    public static final int IBV_WC_SEND = 0;
    /** {@code IBV_WC_RDMA_WRITE}. */
    public static final int IBV_WC_RDMA_WRITE = 1;
    /** {@code IBV_WC_RDMA_READ}. */
    public static final int IBV_WC_RDMA_READ = 2;
    /** {@code IBV_WC_RECV}: a receive consumed by a SEND from the peer. */
    public static final int IBV_WC_RECV = 128;

    private IbvWcDescriptor()
    {
    }
}
