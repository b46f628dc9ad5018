package io.blockmover.rdma.verbs;

/**
 * Layout of {@code struct rdma_event_channel}: just the file descriptor, which is set O_NONBLOCK so that
 * {@code rdma_get_cm_event} can be polled.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                           fd (int)                            |   0
 *  +---------------------------------------------------------------+   4
 * </pre>
 */
public final class RdmaEventChannelDescriptor
{
    public static final int FD_OFFSET = 0;
    /** {@code sizeof(struct rdma_event_channel)}. */
    public static final int LENGTH = 4;

    private RdmaEventChannelDescriptor()
    {
    }
}
