/**
 * blockmoverd as a systemd service: the sd_notify protocol (READY, STATUS, RELOADING, STOPPING, WATCHDOG) through
 * libsystemd, bound with JNA direct mapping. Everything here is silently off when libsystemd is missing or the
 * daemon was not started by systemd (no NOTIFY_SOCKET), so the daemon behaves the same anywhere else.
 */
package io.blockmover.systemd;
