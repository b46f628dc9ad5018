/**
 * blockmover: block-volume replication between Linux hosts.
 */
package io.blockmover;
