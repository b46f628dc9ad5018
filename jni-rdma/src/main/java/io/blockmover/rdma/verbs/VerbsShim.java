package io.blockmover.rdma.verbs;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

/**
 * Direct mapping of {@code libblockmover-verbs.so}, the C shim that exports the static inline data-path verbs.
 * The library is compiled by the Maven build from {@code src/main/c/blockmover_verbs.c} into
 * {@code linux-x86-64/} on the class path, where JNA finds (and if need be extracts) it.
 */
final class VerbsShim
{
    static final String LIBRARY_NAME = "blockmover-verbs";

    static
    {
        Native.register(VerbsShim.class, NativeLibrary.getInstance(LIBRARY_NAME));
    }

    private VerbsShim()
    {
    }

    static native int bm_ibv_post_send(long qp, long wr, long badWr);

    static native int bm_ibv_post_recv(long qp, long wr, long badWr);

    static native int bm_ibv_poll_cq(long cq, int numEntries, long wc);

    static native int bm_ibv_req_notify_cq(long cq, int solicitedOnly);
}
