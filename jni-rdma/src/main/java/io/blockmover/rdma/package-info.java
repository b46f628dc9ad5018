/**
 * Socket-like RDMA endpoints over the thin verbs binding in {@link io.blockmover.rdma.verbs}, modelled on DiSNI's
 * endpoint layer but owning no thread and never blocking.
 * <ul>
 *     <li>{@link io.blockmover.rdma.RdmaDevice}: the device behind a local IP address, its protection domain, and
 *     {@link io.blockmover.rdma.RegisteredMemory} registrations (checked against RLIMIT_MEMLOCK first).</li>
 *     <li>{@link io.blockmover.rdma.RdmaListener}: bind + listen; {@code poll()} turns connect requests into
 *     endpoints.</li>
 *     <li>{@link io.blockmover.rdma.RdmaEndpoint}: connect with a polled deadline, post SEND/RECV/RDMA WRITE/RDMA
 *     READ of registered memory, poll completions into a {@link io.blockmover.rdma.CompletionHandler}, and close
 *     without hanging or leaking even when the peer died.</li>
 * </ul>
 * Connection management runs on non-blocking rdma_cm event channels and completion queues are busy-polled, so
 * all of it fits in an Agrona agent's duty cycle. The data path allocates nothing: work requests, SGEs and
 * completion arrays are built once per endpoint in native memory and refilled in place.
 * <p>
 * Threading: every type here is for one thread at a time (the conductor for devices, listeners and
 * registrations; the owning agent for an endpoint).
 */
package io.blockmover.rdma;
