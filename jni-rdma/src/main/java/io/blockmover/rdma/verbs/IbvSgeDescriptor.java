package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_sge}, one scatter/gather element of a work request.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                        addr (uint64_t)                        |  0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                       length (uint32_t)                       |  8
 *  +---------------------------------------------------------------+
 *  |                        lkey (uint32_t)                        | 12
 *  +---------------------------------------------------------------+
 * </pre>
 * Host byte order. {@code lkey} is the local key of the memory region that covers {@code addr..addr+length}.
 */
public final class IbvSgeDescriptor
{
    public static final int ADDR_OFFSET = 0;
    public static final int LENGTH_OFFSET = 8;
    public static final int LKEY_OFFSET = 12;
    /** {@code sizeof(struct ibv_sge)}. */
    public static final int LENGTH = 16;

    private IbvSgeDescriptor()
    {
    }
}
