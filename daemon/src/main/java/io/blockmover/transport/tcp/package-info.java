/**
 * TCP transport: non-blocking NIO sockets, direct buffers, gathering writes.
 */
package io.blockmover.transport.tcp;
