package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_mr}, a registered memory region, and the access flags for {@code ibv_reg_mr}.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |               context (struct ibv_context *)                  |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                    pd (struct ibv_pd *)                       |   8
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                        addr (void *)                          |  16
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       length (size_t)                         |  24
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       handle (uint32_t)                       |  32
 *  +---------------------------------------------------------------+
 *  |                        lkey (uint32_t)                        |  36
 *  +---------------------------------------------------------------+
 *  |                        rkey (uint32_t)                        |  40
 *  +---------------------------------------------------------------+
 *  |                          (padding)                            |  44
 *  +---------------------------------------------------------------+  48
 * </pre>
 */
public final class IbvMrDescriptor
{
    public static final int ADDR_OFFSET = 16;
    public static final int LENGTH_OFFSET = 24;
    public static final int LKEY_OFFSET = 36;
    public static final int RKEY_OFFSET = 40;
    /** {@code sizeof(struct ibv_mr)}. */
    public static final int LENGTH = 48;

    /** {@code IBV_ACCESS_LOCAL_WRITE}: the adapter may write (receives, RDMA READ results). */
    public static final int IBV_ACCESS_LOCAL_WRITE = 1;
    /** {@code IBV_ACCESS_REMOTE_WRITE}: the peer may RDMA WRITE; on iWARP also needed to receive READ data. */
    public static final int IBV_ACCESS_REMOTE_WRITE = 2;
    /** {@code IBV_ACCESS_REMOTE_READ}: the peer may RDMA READ. */
    public static final int IBV_ACCESS_REMOTE_READ = 4;

    private IbvMrDescriptor()
    {
    }
}
