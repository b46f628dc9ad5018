package io.blockmover.rdma.verbs;

/**
 * The fields of {@code struct ibv_context} this binding relies on: the device and the provider's ops table,
 * through which the static inline data-path verbs dispatch.
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                device (struct ibv_device *)                   |   0
 *  |                                                               |
 *  +---------------------------------------------------------------+
 *  |       ops: _compat_query_device ... _compat_resize_cq         |   8
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                     ops.poll_cq (fn *)                        |  96
 *  +---------------------------------------------------------------+
 *  |                  ops.req_notify_cq (fn *)                     | 104
 *  +---------------------------------------------------------------+
 *  ...                                                           ...
 *  +---------------------------------------------------------------+
 *  |                    ops.post_send (fn *)                       | 208
 *  +---------------------------------------------------------------+
 *  |                    ops.post_recv (fn *)                       | 216
 *  +---------------------------------------------------------------+
 *  |      rest of ops, cmd_fd, async_fd, num_comp_vectors, mutex   | 224
 *  ...                                                           ...
 *  +---------------------------------------------------------------+ 328
 * </pre>
 * The ops offsets are used only by the test that checks the C shim dispatches through the right slot; the shim
 * itself takes them from the header.
 */
public final class IbvContextDescriptor
{
    public static final int DEVICE_OFFSET = 0;
    public static final int OPS_POLL_CQ_OFFSET = 96;
    public static final int OPS_REQ_NOTIFY_CQ_OFFSET = 104;
    public static final int OPS_POST_SEND_OFFSET = 208;
    public static final int OPS_POST_RECV_OFFSET = 216;
    /** {@code sizeof(struct ibv_context)}. */
    public static final int LENGTH = 328;

    private IbvContextDescriptor()
    {
    }
}
