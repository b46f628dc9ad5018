/**
 * Thin JNA binding to libibverbs and librdmacm that keeps the C names, modelled on DiSNI's verbs layer.
 * <p>
 * Every function is bound with JNA direct mapping ({@code Native.register}): static native methods taking
 * {@code long} addresses and primitive values, so a call costs about 50 ns and allocates nothing. No JNA
 * {@code Structure} or interface mapping is used. Structures live in native memory the caller owns and are read
 * and written with Agrona {@link org.agrona.concurrent.UnsafeBuffer}s at the offsets named in the
 * {@code *Descriptor} classes; a test compiles a C program against the installed headers and checks every
 * offset, size and constant in this package.
 * <p>
 * The four data-path verbs that {@code <infiniband/verbs.h>} defines {@code static inline}
 * ({@code ibv_post_send}, {@code ibv_post_recv}, {@code ibv_poll_cq}, {@code ibv_req_notify_cq}) are reached
 * through a four-function C shim, {@code libblockmover-verbs.so}, built from {@code src/main/c} by the Maven build
 * and loaded from the class path.
 * <p>
 * Failures surface as {@link io.blockmover.rdma.verbs.RdmaException} carrying errno and the C function name; a
 * host without RDMA support gives {@link io.blockmover.rdma.verbs.RdmaUnavailableException}.
 * <p>
 * Threading: the functions are as thread-safe as the C library; the callers in {@code io.blockmover.rdma} use
 * each object from one thread at a time.
 */
package io.blockmover.rdma.verbs;
