package io.blockmover.rdma.verbs;

/**
 * The fields of {@code struct rdma_cm_id} this binding reads.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |    verbs (struct ibv_context *): set once bound to a device   |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |           channel (struct rdma_event_channel *)               |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       context (void *)                        |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |     qp (struct ibv_qp *): set by rdma_create_qp               |  24
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |   route.addr.src_addr (union, struct sockaddr_storage)        |  32
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |   route.addr.dst_addr (union, struct sockaddr_storage)        | 160
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |   route.addr.addr (ib/iboe), path_rec, num_paths, ps ...      | 288
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 416
 * </pre>
 */
public final class RdmaCmIdDescriptor
{
    public static final int VERBS_OFFSET = 0;
    public static final int CHANNEL_OFFSET = 8;
    public static final int QP_OFFSET = 24;
    public static final int ROUTE_ADDR_SRC_ADDR_OFFSET = 32;
    public static final int ROUTE_ADDR_DST_ADDR_OFFSET = 160;
    /** {@code sizeof(struct rdma_cm_id)}. */
    public static final int LENGTH = 416;

    private RdmaCmIdDescriptor()
    {
    }
}
