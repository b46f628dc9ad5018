/**
 * The conductor: the agent that owns every resource, runs the handshakes and the job state machines, and serves
 * the control socket.
 */
package io.blockmover.conductor;
