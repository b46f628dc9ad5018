/**
 * Continuous replication of a group of volumes. On the source, every write through the NBD front end is written to
 * its volume and appended to the group's record log under one LSN sequence; a shipper sends the log to the
 * destination in LSN order, and a resyncer turns dirty regions of the bitmaps into records too, so one ordered
 * stream carries everything. On the destination, a receiver appends records to its own log and acknowledges them,
 * and an applier writes them to the volumes in LSN order. Between them the source's log and bitmaps always cover
 * every byte the destination may not hold durably yet.
 */
package io.blockmover.replication.group;
