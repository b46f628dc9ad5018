package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct ibv_comp_channel}: the context it belongs to, then the file descriptor that becomes
 * readable when an armed completion queue gets a completion. The fd is set O_NONBLOCK so that
 * {@code ibv_get_cq_event} can be polled.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                  context (struct ibv_context *)               |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |                           fd (int)                            |   8
 *  +---------------------------------------------------------------+
 *  |                         refcnt (int)                          |  12
 *  +---------------------------------------------------------------+  16
 * </pre>
 */
public final class IbvCompChannelDescriptor
{
    public static final int FD_OFFSET = 8;
    /** {@code sizeof(struct ibv_comp_channel)}. */
    public static final int LENGTH = 16;

    private IbvCompChannelDescriptor()
    {
    }
}
