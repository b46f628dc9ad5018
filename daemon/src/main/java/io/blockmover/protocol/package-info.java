/**
 * The wire protocol: frame header layout and types, the same on every transport.
 */
package io.blockmover.protocol;
