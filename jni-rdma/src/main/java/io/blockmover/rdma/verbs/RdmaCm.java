package io.blockmover.rdma.verbs;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

/**
 * librdmacm with its C names, direct-mapped: pointers are passed and returned as {@code long} addresses.
 * <p>
 * Functions returning {@code int} return 0 on success and -1 with errno in {@code Native.getLastError()};
 * functions returning pointers return 0 on failure. On a host without RDMA,
 * {@link #rdma_create_event_channel} fails with ENODEV.
 * <p>
 * Made non-blocking with {@link LibC#setNonBlocking}, an event channel can be polled:
 * {@link #rdma_get_cm_event} then fails with EAGAIN when no event is pending.
 * <p>
 * Thread-safe as far as librdmacm is.
 */
public final class RdmaCm
{
    /** The shared library bound, by its versioned name so that the -dev package is not needed at run time. */
    public static final String LIBRARY_NAME = "librdmacm.so.1";

    /** {@code RDMA_PS_TCP}: reliable connected port space, as used for RC queue pairs. */
    public static final int RDMA_PS_TCP = 262;

    static
    {
        Native.register(RdmaCm.class, NativeLibrary.getInstance(LIBRARY_NAME));
    }

    private RdmaCm()
    {
    }

    /**
     * {@code struct rdma_event_channel *rdma_create_event_channel(void)}.
     *
     * @return channel address, or 0 with errno (ENODEV without RDMA devices or kernel support).
     */
    public static native long rdma_create_event_channel();

    /**
     * {@code void rdma_destroy_event_channel(struct rdma_event_channel *channel)}.
     *
     * @param channel event channel with no ids left on it.
     */
    public static native void rdma_destroy_event_channel(long channel);

    /**
     * {@code int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
     * enum rdma_port_space ps)}.
     *
     * @param channel event channel.
     * @param idOut   address of a pointer that receives the new id.
     * @param context opaque user pointer.
     * @param ps      port space, {@link #RDMA_PS_TCP}.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_create_id(long channel, long idOut, long context, int ps);

    /**
     * {@code int rdma_destroy_id(struct rdma_cm_id *id)}: waits until every event reported for this id has been
     * acknowledged, so callers must ack events promptly or this blocks forever.
     *
     * @param id cm id without a QP.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_destroy_id(long id);

    /**
     * {@code int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)}: moves the id's
     * future events to another channel; waits until its events on the old channel are acknowledged.
     *
     * @param id      cm id.
     * @param channel new event channel.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_migrate_id(long id, long channel);

    /**
     * {@code int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)}: binding to an address of an RDMA
     * netdev sets {@code id->verbs} to that device's context.
     *
     * @param id      cm id.
     * @param address sockaddr_in or sockaddr_in6.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_bind_addr(long id, long address);

    /**
     * {@code int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
     * int timeout_ms)}: completes with RDMA_CM_EVENT_ADDR_RESOLVED or ADDR_ERROR.
     *
     * @param id                 cm id.
     * @param sourceAddress      local address or 0.
     * @param destinationAddress peer address.
     * @param timeoutMs          resolution timeout.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_resolve_addr(long id, long sourceAddress, long destinationAddress, int timeoutMs);

    /**
     * {@code int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)}: completes with
     * RDMA_CM_EVENT_ROUTE_RESOLVED or ROUTE_ERROR.
     *
     * @param id        cm id.
     * @param timeoutMs resolution timeout.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_resolve_route(long id, int timeoutMs);

    /**
     * {@code int rdma_listen(struct rdma_cm_id *id, int backlog)}.
     *
     * @param id      bound cm id.
     * @param backlog pending connection requests.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_listen(long id, int backlog);

    /**
     * {@code int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)}.
     *
     * @param channel  event channel.
     * @param eventOut address of a pointer that receives the event.
     * @return 0, or -1 with errno (EAGAIN on a non-blocking channel with nothing pending).
     */
    public static native int rdma_get_cm_event(long channel, long eventOut);

    /**
     * {@code int rdma_ack_cm_event(struct rdma_cm_event *event)}: frees the event.
     *
     * @param event event from {@link #rdma_get_cm_event}.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_ack_cm_event(long event);

    /**
     * {@code int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)}:
     * the QP is stored in {@code id->qp}; the capabilities in the attributes are updated to the actual values.
     *
     * @param id           cm id bound to a device.
     * @param pd           protection domain on the same device.
     * @param qpInitAttr   {@link IbvQpInitAttrDescriptor} layout.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_create_qp(long id, long pd, long qpInitAttr);

    /**
     * {@code void rdma_destroy_qp(struct rdma_cm_id *id)}.
     *
     * @param id cm id owning a QP.
     */
    public static native void rdma_destroy_qp(long id);

    /**
     * {@code int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)}.
     *
     * @param id        cm id with a resolved route and a QP.
     * @param connParam {@link RdmaConnParamDescriptor} layout.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_connect(long id, long connParam);

    /**
     * {@code int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)}.
     *
     * @param id        cm id from a connect request event, with a QP.
     * @param connParam {@link RdmaConnParamDescriptor} layout.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_accept(long id, long connParam);

    /**
     * {@code int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)}.
     *
     * @param id                cm id from a connect request event.
     * @param privateData       address of private data or 0.
     * @param privateDataLength bytes of private data.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_reject(long id, long privateData, byte privateDataLength);

    /**
     * {@code int rdma_disconnect(struct rdma_cm_id *id)}: moves the QP to the error state (flushing posted work)
     * and starts the disconnect; does not wait for the peer.
     *
     * @param id connected cm id.
     * @return 0 or -1 with errno.
     */
    public static native int rdma_disconnect(long id);

    /**
     * {@code const char *rdma_event_str(enum rdma_cm_event_type event)}.
     *
     * @param event event type.
     * @return librdmacm's name for it.
     */
    public static native String rdma_event_str(int event);

    /**
     * {@code struct ibv_context **rdma_get_devices(int *num_devices)}: the device contexts librdmacm keeps open.
     *
     * @param numDevices address of an int to receive the count, or 0.
     * @return NULL-terminated array, or 0 with errno (ENODEV without RDMA).
     */
    public static native long rdma_get_devices(long numDevices);

    /**
     * {@code void rdma_free_devices(struct ibv_context **list)}.
     *
     * @param list from {@link #rdma_get_devices}.
     */
    public static native void rdma_free_devices(long list);
}
