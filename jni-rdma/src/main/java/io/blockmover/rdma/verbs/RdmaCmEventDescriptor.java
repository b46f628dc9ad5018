package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct rdma_cm_event}, as returned by {@code rdma_get_cm_event} for connected port spaces.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |   id (struct rdma_cm_id *): new id for CONNECT_REQUEST        |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |            listen_id (struct rdma_cm_id *)                    |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |              event (enum rdma_cm_event_type)                  |  16
 *  +---------------------------------------------------------------+
 *  |       status (int): 0, -errno, or a transport reason          |  20
 *  +---------------------------------------------------------------+
 *  |          param.conn.private_data (const void *)               |  24
 *  |                                                               |
 *  +---------------+---------------+---------------+---------------+
 *  | priv_data_len |  responder_   |  initiator_   | flow_control  |  32
 *  |   (uint8_t)   |  resources    |  depth        |               |
 *  +---------------+---------------+---------------+---------------+
 *  |  retry_count  |rnr_retry_count|      srq      |   (padding)   |  36
 *  +---------------+---------------+---------------+---------------+
 *  |                  param.conn.qp_num (uint32_t)                 |  40
 *  +---------------------------------------------------------------+
 *  |                   rest of the param union                     |  44
 *  ...                                                           ...
 *  +---------------------------------------------------------------+  80
 * </pre>
 */
public final class RdmaCmEventDescriptor
{
    public static final int ID_OFFSET = 0;
    public static final int LISTEN_ID_OFFSET = 8;
    public static final int EVENT_OFFSET = 16;
    public static final int STATUS_OFFSET = 20;
    public static final int CONN_PRIVATE_DATA_OFFSET = 24;
    public static final int CONN_PRIVATE_DATA_LEN_OFFSET = 32;
    public static final int CONN_RESPONDER_RESOURCES_OFFSET = 33;
    public static final int CONN_INITIATOR_DEPTH_OFFSET = 34;
    public static final int CONN_QP_NUM_OFFSET = 40;
    /** {@code sizeof(struct rdma_cm_event)}. */
    public static final int LENGTH = 80;

    private RdmaCmEventDescriptor()
    {
    }
}
