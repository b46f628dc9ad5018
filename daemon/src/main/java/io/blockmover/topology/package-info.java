/**
 * The topology test (Storage Replica's Test-SRTopology): agents that measure the round trip and bandwidth to a
 * peer over a short-lived probe session ({@link io.blockmover.topology.ProbeAgent} and its
 * {@link io.blockmover.topology.ProbeResponder}), the write and read rates of volumes
 * ({@link io.blockmover.topology.VolumeProbe}), the recommendations drawn from them
 * ({@link io.blockmover.topology.TopologyReport}) and the self-contained HTML report
 * ({@link io.blockmover.topology.HtmlReport}).
 */
package io.blockmover.topology;
