/**
 * Block I/O: volumes opened O_DIRECT (and O_EXCL for block devices), and the libc calls the JDK lacks.
 */
package io.blockmover.io;
