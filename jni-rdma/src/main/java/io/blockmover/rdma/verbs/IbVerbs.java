package io.blockmover.rdma.verbs;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

/**
 * libibverbs with its C names, direct-mapped: pointers are passed and returned as {@code long} addresses.
 * <p>
 * Return conventions follow the C library and are not translated here: functions returning a pointer return 0
 * on failure with errno in {@code Native.getLastError()}; {@code ibv_dealloc_pd}, {@code ibv_dereg_mr},
 * {@code ibv_destroy_cq}, {@code ibv_post_send} and {@code ibv_post_recv} return the errno value itself;
 * {@code ibv_poll_cq} returns the number of completions or a negative value.
 * <p>
 * The data-path verbs {@link #ibv_post_send}, {@link #ibv_post_recv}, {@link #ibv_poll_cq} and
 * {@link #ibv_req_notify_cq} are static inline in {@code verbs.h}; they go through the
 * {@code libblockmover-verbs.so} shim, which makes the same indirect call through the context's ops table.
 * Per call: about 50 ns of JNA overhead and no allocation.
 * <p>
 * Thread-safe as far as libibverbs is (objects may be used from any thread, one at a time per QP/CQ here).
 */
public final class IbVerbs
{
    /** The shared library bound, by its versioned name so that the -dev package is not needed at run time. */
    public static final String LIBRARY_NAME = "libibverbs.so.1";

    /** {@code IBV_SEND_SIGNALED}: generate a completion for this work request. */
    public static final int IBV_SEND_SIGNALED = 2;
    /** {@code IBV_SEND_FENCE}: wait for prior RDMA READs to finish before this request. */
    public static final int IBV_SEND_FENCE = 1;

    static
    {
        Native.register(IbVerbs.class, NativeLibrary.getInstance(LIBRARY_NAME));
    }

    private IbVerbs()
    {
    }

    /**
     * {@code struct ibv_device **ibv_get_device_list(int *num_devices)}. On a kernel without RDMA this returns 0
     * with errno ENOSYS.
     *
     * @param numDevices address of an int to receive the count, or 0.
     * @return address of a NULL-terminated array of device pointers, 0 on failure.
     */
    public static native long ibv_get_device_list(long numDevices);

    /**
     * {@code void ibv_free_device_list(struct ibv_device **list)}.
     *
     * @param list from {@link #ibv_get_device_list}.
     */
    public static native void ibv_free_device_list(long list);

    /**
     * {@code const char *ibv_get_device_name(struct ibv_device *device)}.
     *
     * @param device device address.
     * @return kernel name, e.g. {@code "siw0"}.
     */
    public static native String ibv_get_device_name(long device);

    /**
     * {@code struct ibv_context *ibv_open_device(struct ibv_device *device)}.
     *
     * @param device device address.
     * @return context address or 0.
     */
    public static native long ibv_open_device(long device);

    /**
     * {@code int ibv_close_device(struct ibv_context *context)}.
     *
     * @param context context address.
     * @return 0 or -1 with errno.
     */
    public static native int ibv_close_device(long context);

    /**
     * {@code int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)}.
     *
     * @param context    context address.
     * @param deviceAttr address of {@link IbvDeviceAttrDescriptor#LENGTH} bytes to fill.
     * @return 0 or errno.
     */
    public static native int ibv_query_device(long context, long deviceAttr);

    /**
     * {@code struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)}.
     *
     * @param context context address.
     * @return protection domain address or 0.
     */
    public static native long ibv_alloc_pd(long context);

    /**
     * {@code int ibv_dealloc_pd(struct ibv_pd *pd)}.
     *
     * @param pd protection domain.
     * @return 0 or errno (EBUSY while MRs or QPs still use it).
     */
    public static native int ibv_dealloc_pd(long pd);

    /**
     * {@code struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)}: pins the pages,
     * which counts against {@code RLIMIT_MEMLOCK} unless the process has CAP_IPC_LOCK.
     *
     * @param pd      protection domain.
     * @param address start of the memory.
     * @param length  bytes.
     * @param access  {@code IBV_ACCESS_*} flags from {@link IbvMrDescriptor}.
     * @return memory region address or 0.
     */
    public static native long ibv_reg_mr(long pd, long address, long length, int access);

    /**
     * {@code int ibv_dereg_mr(struct ibv_mr *mr)}.
     *
     * @param mr memory region.
     * @return 0 or errno.
     */
    public static native int ibv_dereg_mr(long mr);

    /**
     * {@code int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)}. rdma_cm drives the
     * connection states; this binding only uses it to force the error state (see {@link IbvQpAttrDescriptor}).
     *
     * @param qp       queue pair.
     * @param attr     {@link IbvQpAttrDescriptor} layout.
     * @param attrMask {@code IBV_QP_*} bits saying which fields of {@code attr} to apply.
     * @return 0 or errno.
     */
    public static native int ibv_modify_qp(long qp, long attr, int attrMask);

    /**
     * {@code struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)}.
     *
     * @param context context address.
     * @return channel address or 0.
     */
    public static native long ibv_create_comp_channel(long context);

    /**
     * {@code int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)}.
     *
     * @param channel completion channel.
     * @return 0 or errno.
     */
    public static native int ibv_destroy_comp_channel(long channel);

    /**
     * {@code struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
     * struct ibv_comp_channel *channel, int comp_vector)}.
     *
     * @param context    context address.
     * @param cqe        minimum number of entries.
     * @param cqContext  opaque user pointer, usually 0.
     * @param channel    completion channel or 0 when the CQ is busy-polled.
     * @param compVector completion vector, 0.
     * @return completion queue address or 0.
     */
    public static native long ibv_create_cq(long context, int cqe, long cqContext, long channel, int compVector);

    /**
     * {@code int ibv_destroy_cq(struct ibv_cq *cq)}.
     *
     * @param cq completion queue.
     * @return 0 or errno (EBUSY while a QP still uses it).
     */
    public static native int ibv_destroy_cq(long cq);

    /**
     * {@code int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)}:
     * blocks unless the channel fd is non-blocking; not used by the busy-polled endpoint.
     *
     * @param channel   completion channel.
     * @param cqOut     address of a pointer to receive the CQ.
     * @param contextOut address of a pointer to receive the CQ context.
     * @return 0 or -1 with errno.
     */
    public static native int ibv_get_cq_event(long channel, long cqOut, long contextOut);

    /**
     * {@code void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)}.
     *
     * @param cq      completion queue.
     * @param nevents events to acknowledge.
     */
    public static native void ibv_ack_cq_events(long cq, int nevents);

    /**
     * {@code const char *ibv_wc_status_str(enum ibv_wc_status status)}.
     *
     * @param status work completion status.
     * @return libibverbs' description.
     */
    public static native String ibv_wc_status_str(int status);

    /**
     * {@code static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
     * struct ibv_send_wr **bad_wr)}: the work request list is copied into the send queue before the call returns,
     * so the caller may reuse its memory at once.
     *
     * @param qp    queue pair.
     * @param wr    first work request.
     * @param badWr address of a pointer that receives the failing request.
     * @return 0 or errno (ENOMEM when the send queue is full).
     */
    public static int ibv_post_send(final long qp, final long wr, final long badWr)
    {
        return VerbsShim.bm_ibv_post_send(qp, wr, badWr);
    }

    /**
     * {@code static inline int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
     * struct ibv_recv_wr **bad_wr)}.
     *
     * @param qp    queue pair.
     * @param wr    first work request.
     * @param badWr address of a pointer that receives the failing request.
     * @return 0 or errno.
     */
    public static int ibv_post_recv(final long qp, final long wr, final long badWr)
    {
        return VerbsShim.bm_ibv_post_recv(qp, wr, badWr);
    }

    /**
     * {@code static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)}.
     *
     * @param cq         completion queue.
     * @param numEntries capacity of the array at {@code wc}.
     * @param wc         array of {@link IbvWcDescriptor#LENGTH}-byte entries.
     * @return completions written, 0 if none, negative on failure.
     */
    public static int ibv_poll_cq(final long cq, final int numEntries, final long wc)
    {
        return VerbsShim.bm_ibv_poll_cq(cq, numEntries, wc);
    }

    /**
     * {@code static inline int ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)}.
     *
     * @param cq            completion queue.
     * @param solicitedOnly 1 to be notified only of solicited completions.
     * @return 0 or errno.
     */
    public static int ibv_req_notify_cq(final long cq, final int solicitedOnly)
    {
        return VerbsShim.bm_ibv_req_notify_cq(cq, solicitedOnly);
    }
}
