/**
 * The daemon's entry point and its configuration: named properties with defaults, validated before start.
 */
package io.blockmover.daemon;
