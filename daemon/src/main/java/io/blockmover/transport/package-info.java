/**
 * Transports: a frame connection interface with TCP and (later) RDMA implementations.
 */
package io.blockmover.transport;
