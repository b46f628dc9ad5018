/**
 * Logging: System.Logger to standard error, for the handful of lifecycle lines the daemon writes.
 */
package io.blockmover.log;
