/**
 * Replication state: the persistent dirty bitmap that drives initial copy, seeded copy and resume.
 */
package io.blockmover.replication;
