package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct rdma_conn_param}, given to {@code rdma_connect} and {@code rdma_accept}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                private_data (const void *)                    |   0
 *  |                                                               |
 *  +---------------+---------------+---------------+---------------+
 *  | priv_data_len |  responder_   |  initiator_   | flow_control  |   8
 *  |   (uint8_t)   |  resources    |  depth        |               |
 *  +---------------+---------------+---------------+---------------+
 *  |  retry_count  |rnr_retry_count|      srq      |   (padding)   |  12
 *  +---------------+---------------+---------------+---------------+
 *  |                     qp_num (uint32_t)                         |  16
 *  +---------------------------------------------------------------+
 *  |                          (padding)                            |  20
 *  +---------------------------------------------------------------+  24
 * </pre>
 * {@code responder_resources} bounds the RDMA READs the peer may have outstanding against us,
 * {@code initiator_depth} the READs we may have outstanding; RDMA WRITE and SEND need neither.
 * {@code retry_count} and {@code rnr_retry_count} are 3-bit values (7 means infinite RNR retry).
 */
public final class RdmaConnParamDescriptor
{
    public static final int PRIVATE_DATA_OFFSET = 0;
    public static final int PRIVATE_DATA_LEN_OFFSET = 8;
    public static final int RESPONDER_RESOURCES_OFFSET = 9;
    public static final int INITIATOR_DEPTH_OFFSET = 10;
    public static final int FLOW_CONTROL_OFFSET = 11;
    public static final int RETRY_COUNT_OFFSET = 12;
    public static final int RNR_RETRY_COUNT_OFFSET = 13;
    public static final int SRQ_OFFSET = 14;
    public static final int QP_NUM_OFFSET = 16;
    /** {@code sizeof(struct rdma_conn_param)}. */
    public static final int LENGTH = 24;

    private RdmaConnParamDescriptor()
    {
    }
}
