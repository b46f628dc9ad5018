/**
 * The counters file: Agrona counters in a memory-mapped file, the monitoring API that works without the daemon.
 */
package io.blockmover.cnc;
