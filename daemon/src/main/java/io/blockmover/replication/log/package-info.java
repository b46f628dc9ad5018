/**
 * The replication log: a circular, memory-mapped, crash-recoverable file of replicated writes, shared by the
 * source (front end appends, shipper reads) and the destination (receiver appends, applier reads).
 */
package io.blockmover.replication.log;
