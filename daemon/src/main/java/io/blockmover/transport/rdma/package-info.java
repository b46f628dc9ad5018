/**
 * RDMA transport (iWARP and RoCE through rdma_cm): frames as SENDs into pre-posted receive buffers.
 */
package io.blockmover.transport.rdma;
