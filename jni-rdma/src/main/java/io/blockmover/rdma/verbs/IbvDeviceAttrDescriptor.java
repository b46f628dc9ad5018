package io.blockmover.rdma.verbs;

/**
 * The fields of {@code struct ibv_device_attr} (filled by {@code ibv_query_device}) used to size queues.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                      fw_ver (char[64])                        |   0
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |            node_guid, sys_image_guid (__be64 x 2)             |  64
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                    max_mr_size (uint64_t)                     |  80
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |  page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp     |  88
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                       max_qp_wr (int)                         | 112
 *  +---------------------------------------------------------------+
 *  |                  device_cap_flags (unsigned)                  | 116
 *  +---------------------------------------------------------------+
 *  |                        max_sge (int)                          | 120
 *  +---------------------------------------------------------------+
 *  |                  max_sge_rd, max_cq (int x 2)                 | 124
 *  +---------------------------------------------------------------+
 *  |                        max_cqe (int)                          | 132
 *  +---------------------------------------------------------------+
 *  |                max_mr, max_pd (int x 2)                       | 136
 *  +---------------------------------------------------------------+
 *  |                     max_qp_rd_atom (int)                      | 144
 *  +---------------------------------------------------------------+
 *  |             max_ee_rd_atom, max_res_rd_atom (int x 2)         | 148
 *  +---------------------------------------------------------------+
 *  |                  max_qp_init_rd_atom (int)                    | 156
 *  +---------------------------------------------------------------+
 *  |                     ... phys_port_cnt                         | 160
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 232
 * </pre>
 */
public final class IbvDeviceAttrDescriptor
{
    public static final int MAX_MR_SIZE_OFFSET = 80;
    public static final int MAX_QP_WR_OFFSET = 112;
    public static final int MAX_SGE_OFFSET = 120;
    public static final int MAX_CQE_OFFSET = 132;
    public static final int MAX_QP_RD_ATOM_OFFSET = 144;
    public static final int MAX_QP_INIT_RD_ATOM_OFFSET = 156;
    /** {@code sizeof(struct ibv_device_attr)}. */
    public static final int LENGTH = 232;

    private IbvDeviceAttrDescriptor()
    {
    }
}
