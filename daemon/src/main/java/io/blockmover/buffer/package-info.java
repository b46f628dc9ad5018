/**
 * Off-heap memory: the slab of aligned slots that every stage of the data path shares by index.
 */
package io.blockmover.buffer;
