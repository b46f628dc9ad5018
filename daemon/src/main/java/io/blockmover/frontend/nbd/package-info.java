/**
 * The NBD front end: an NBD server (newstyle fixed handshake, simple and structured replies, BLOCK_STATUS for
 * base:allocation) on a Unix socket and/or TCP that
 * exposes {@link io.blockmover.frontend.nbd.NbdExport}s to qemu, libnbd, nbd-client and fio. The daemon plugs
 * its volumes in through {@link io.blockmover.frontend.nbd.NbdExports}.
 */
package io.blockmover.frontend.nbd;
