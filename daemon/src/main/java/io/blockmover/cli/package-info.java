/**
 * The blockmover command line: a client of the control socket and a reader of the counters file.
 */
package io.blockmover.cli;
