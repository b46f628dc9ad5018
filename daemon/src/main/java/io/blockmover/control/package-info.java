/**
 * The control API: JSON lines over a Unix socket, served by the conductor; its client is the blockmover command.
 */
package io.blockmover.control;
