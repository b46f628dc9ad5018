/**
 * Point-in-time views of live volumes for test failover: copy-before-write of the grains the applier is about to
 * overwrite, and an overlay that takes the view's own writes, served as NBD exports while replication goes on.
 */
package io.blockmover.replication.snapshot;
