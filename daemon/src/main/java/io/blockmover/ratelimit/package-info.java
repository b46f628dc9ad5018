/**
 * Bandwidth limits: the lock-free token bucket that the agents sending payload frames to a peer consult before
 * each frame (copy jobs, async shipping, resync), shared by every agent that sends to the same peer.
 */
package io.blockmover.ratelimit;
