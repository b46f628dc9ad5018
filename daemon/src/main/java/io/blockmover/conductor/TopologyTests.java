package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.agrona.CloseHelper;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.BackoffIdleStrategy;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.protocol.FrameType;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.topology.ProbeAgent;
import io.blockmover.topology.ProbeResponder;
import io.blockmover.topology.TopologyReport;
import io.blockmover.topology.VolumeProbe;
import io.blockmover.transport.ConnectionIdleStrategy;
import io.blockmover.transport.FrameConnection;
import io.blockmover.transport.rdma.RdmaDevices;

/**
 * Topology tests (Storage Replica's Test-SRTopology), run on the would-be source host: for each transport the peer
 * can use, a short-lived probe session over the usual authenticated handshake (OPEN with {@code "probe": true})
 * measures round trips and bandwidth ({@link ProbeAgent}); then a {@link VolumeProbe} measures the volumes' write
 * rate over the test's duration and their read rate; the result carries the recommendations of
 * {@link TopologyReport}. Control ops: {@code topology-start} (answers at once with the test's id) and
 * {@code topology-status} (progress, then the result). Also the destination side: {@link ProbeResponder}s for
 * probe sessions peers open to us. Conductor thread only.
 */
final class TopologyTests
{
    private static final int KEEP_FINISHED = 8;
    private static final long MIN_DURATION_MS = 1_000;
    private static final long MAX_DURATION_MS = TimeUnit.HOURS.toMillis(24);

    private record Responder(ProbeResponder agent, AgentRunner runner, FrameConnection connection)
    {
    }

    private final Conductor conductor;
    private final Map<Long, Test> tests = new TreeMap<>();
    private final List<Responder> responders = new ArrayList<>();
    private long nextId = 1;

    TopologyTests(final Conductor conductor)
    {
        this.conductor = conductor;
    }

    /**
     * A peer opened a probe session to us: answer OPENED and echo until it closes.
     */
    void acceptProbe(final String peer, final int sessionId, final ControlChannel channel) throws IOException
    {
        final Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("credits", conductor.ctx().sessionSlots());
        opened.put("chunk_length", conductor.ctx().chunkLength());
        channel.sendJson(FrameType.OPENED, sessionId, opened);
        final FrameConnection connection = channel.connection();
        final ProbeResponder agent = new ProbeResponder(connection, sessionId, conductor.clock(),
            conductor.maxFramePayload(), conductor.ctx().peerTimeoutNs());
        final AgentRunner runner = conductor.newRunner(agent, new ConnectionIdleStrategy(connection));
        AgentRunner.startOnThread(runner);
        responders.add(new Responder(agent, runner, connection));
        conductor.log("probe session from " + peer + " over " + connection.transportName());
    }

    int doWork(final long nowNs)
    {
        int work = 0;
        for (final Iterator<Responder> it = responders.iterator(); it.hasNext();)
        {
            final Responder r = it.next();
            if (r.agent().isDone())
            {
                CloseHelper.quietClose(r.runner());
                r.connection().close();
                it.remove();
                work++;
            }
        }
        for (final Test test : tests.values())
        {
            if (test.isRunning())
            {
                try
                {
                    work += test.doWork(nowNs);
                }
                catch (final RuntimeException ex)
                {
                    test.fail("internal error: " + ex);
                }
            }
        }
        return work;
    }

    boolean isHandshaking()
    {
        for (final Test test : tests.values())
        {
            if (test.dialer.isActive())
            {
                return true;
            }
        }
        return false;
    }

    boolean onRequest(final ControlServer.Client client, final Object id, final String op,
        final Map<String, Object> args)
    {
        switch (op)
        {
            case "topology-start" -> client.reply(id, start(args));
            case "topology-status" -> client.reply(id, status(args));
            default ->
            {
                return false;
            }
        }
        return true;
    }

    void close()
    {
        for (final Test test : tests.values())
        {
            test.stop();
        }
        for (final Responder r : responders)
        {
            CloseHelper.quietClose(r.runner());
            r.connection().close();
        }
        responders.clear();
    }

    private Map<String, Object> start(final Map<String, Object> args)
    {
        for (final Test test : tests.values())
        {
            if (test.isRunning())
            {
                throw new BlockmoverException(ErrorCode.BUSY, "topology test " + test.id + " is still running: wait " +
                    "for it (blockmover runs one at a time, so they do not measure each other)");
            }
        }
        final Object peerArg = args.get("peer");
        if (!(peerArg instanceof String peer))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "argument 'peer' is required");
        }
        final PeerConfig peerConfig = conductor.peerConfig(peer);
        final List<Path> volumes = new ArrayList<>();
        if (args.get("volumes") instanceof List<?> list)
        {
            for (final Object v : list)
            {
                volumes.add(Path.of(String.valueOf(v)));
            }
        }
        if (volumes.isEmpty())
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "at least one volume is required (--volume PATH)");
        }
        for (final Path v : volumes)
        {
            if (!Files.exists(v))
            {
                throw new BlockmoverException(ErrorCode.NOT_FOUND, "volume " + v + " does not exist on " +
                    conductor.ctx().nodeName());
            }
        }
        final long durationMs = longArg(args, "duration_ms", 120_000);
        if (durationMs < MIN_DURATION_MS || durationMs > MAX_DURATION_MS)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "duration " + durationMs + " ms must be between 1 s " +
                "and 24 h");
        }
        final long outageSeconds = longArg(args, "outage_seconds", 3600);
        if (outageSeconds < 0)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "outage must not be negative");
        }
        final String workload = String.valueOf(args.getOrDefault("workload", "none"));
        if (!List.of("none", "builtin", "fio").contains(workload))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "workload '" + workload + "' must be none, builtin " +
                "or fio");
        }
        final long durationNs = TimeUnit.MILLISECONDS.toNanos(durationMs);
        final VolumeProbe volumeProbe;
        try
        {
            volumeProbe = new VolumeProbe(volumes, workload, conductor.ctx().stateDir().resolve("topology"),
                durationNs, clamp(durationNs / 30, 100_000_000L, 1_000_000_000L),
                clamp(durationNs / 4, 1_000_000_000L, 10_000_000_000L), conductor.clock());
        }
        catch (final IOException | RuntimeException ex)
        {
            throw new BlockmoverException(ErrorCode.NOT_A_VOLUME, "cannot examine the volumes: " + ex.getMessage());
        }
        final Test test = new Test(nextId++, peerConfig, volumes, durationNs, workload, outageSeconds, volumeProbe);
        tests.put(test.id, test);
        while (tests.size() > KEEP_FINISHED)
        {
            final Long oldest = tests.keySet().iterator().next();
            if (tests.get(oldest).isRunning())
            {
                break;
            }
            tests.remove(oldest);
        }
        conductor.log("topology test " + test.id + " started: peer " + peer + ", volumes " + volumes + ", " +
            durationMs + " ms, workload " + workload);
        return test.status();
    }

    private Map<String, Object> status(final Map<String, Object> args)
    {
        final long id = longArg(args, "id", -1);
        final Test test = tests.get(id);
        if (test == null)
        {
            throw new BlockmoverException(ErrorCode.NOT_FOUND, "no topology test " + id + " (the daemon keeps the " +
                "last " + KEEP_FINISHED + ")");
        }
        return test.status();
    }

    private static long longArg(final Map<String, Object> args, final String name, final long fallback)
    {
        final Object value = args.get(name);
        if (value == null)
        {
            return fallback;
        }
        if (!(value instanceof Number n))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "argument '" + name + "' must be a number");
        }
        return n.longValue();
    }

    private static long clamp(final long value, final long min, final long max)
    {
        return Math.max(min, Math.min(max, value));
    }

    /**
     * One topology test: the network part, one transport after the other, then the volume part.
     */
    private final class Test
    {
        final long id;
        final PeerConfig peer;
        final List<Path> volumes;
        final long durationNs;
        final String workload;
        final long outageSeconds;
        final VolumeProbe volumeProbe;
        final PeerDialer dialer;
        final long pingTimeNs;
        final long bulkTimeNs;
        final long startedMs = System.currentTimeMillis();
        final long startedNs = System.nanoTime();
        final List<String> transports = new ArrayList<>();
        final List<Map<String, Object>> network = new ArrayList<>();
        int transportIndex;
        ProbeAgent probe;
        AgentRunner probeRunner;
        FrameConnection probeConnection;
        AgentRunner volumeRunner;
        String state = "running";
        String error;
        Map<String, Object> result;
        long finishedMs;

        Test(final long id, final PeerConfig peer, final List<Path> volumes, final long durationNs,
            final String workload, final long outageSeconds, final VolumeProbe volumeProbe)
        {
            this.id = id;
            this.peer = peer;
            this.volumes = volumes;
            this.durationNs = durationNs;
            this.workload = workload;
            this.outageSeconds = outageSeconds;
            this.volumeProbe = volumeProbe;
            this.dialer = new PeerDialer(conductor, peer.name());
            this.pingTimeNs = clamp(durationNs / 10, 300_000_000L, 2_000_000_000L);
            this.bulkTimeNs = clamp(durationNs / 4, 1_000_000_000L, 5_000_000_000L);
            transports.add("tcp");
            final Map<String, Object> rdma = new LinkedHashMap<>();
            rdma.put("transport", "rdma");
            if (peer.transport() == PeerConfig.TransportKind.TCP)
            {
                rdma.put("available", false);
                rdma.put("reason", "peer." + peer.name() + ".transport = tcp is configured");
            }
            else
            {
                try
                {
                    final RdmaDevices.Choice choice = conductor.transportFor(peer);
                    if (choice.isRdma())
                    {
                        transports.add("rdma");
                    }
                    else
                    {
                        rdma.put("available", false);
                        rdma.put("reason", choice.reason().replaceFirst("^TCP: ", ""));
                    }
                }
                catch (final BlockmoverException ex)
                {
                    rdma.put("available", false);
                    rdma.put("reason", ex.getMessage());
                }
            }
            if (rdma.containsKey("available"))
            {
                network.add(rdma);
            }
        }

        boolean isRunning()
        {
            return "running".equals(state);
        }

        int doWork(final long nowNs)
        {
            if (transportIndex < transports.size())
            {
                return network(nowNs);
            }
            if (volumeRunner == null)
            {
                volumeRunner = conductor.newRunner(volumeProbe, new BackoffIdleStrategy(20, 5, 10_000, 1_000_000));
                AgentRunner.startOnThread(volumeRunner);
                return 1;
            }
            if (!volumeProbe.isDone())
            {
                return 0;
            }
            CloseHelper.quietClose(volumeRunner);
            if (volumeProbe.failure() != null)
            {
                fail("volume measurement failed: " + volumeProbe.failure());
                return 1;
            }
            finish();
            return 1;
        }

        private int network(final long nowNs)
        {
            final String transport = transports.get(transportIndex);
            try
            {
                if (probe != null)
                {
                    if (!probe.isDone())
                    {
                        return 0;
                    }
                    final Map<String, Object> r = new LinkedHashMap<>();
                    r.put("transport", transport);
                    r.put("available", true);
                    r.put("connection", probeConnection.remoteAddress());
                    if (probe.failure() != null)
                    {
                        r.put("error", probe.failure());
                    }
                    r.putAll(probe.results());
                    network.add(Math.min(transportIndex, network.size()), r);
                    closeProbe();
                    transportIndex++;
                    return 1;
                }
                if (!dialer.isActive() && !dialer.isOpened())
                {
                    final Map<String, Object> open = new LinkedHashMap<>();
                    open.put("probe", true);
                    open.put("test", id);
                    dialer.tcpOnly("tcp".equals(transport)).start(open, nowNs);
                    return 1;
                }
                if (dialer.isActive())
                {
                    return dialer.doWork(nowNs);
                }
                final Map<String, Object> opened = dialer.opened();
                final int sessionId = dialer.sessionId();
                probeConnection = dialer.takeConnection();
                final int chunkLength = Math.min(conductor.ctx().chunkLength(),
                    ((Number)opened.getOrDefault("chunk_length", conductor.ctx().chunkLength())).intValue());
                final int credits = ((Number)opened.getOrDefault("credits", 8)).intValue();
                probe = new ProbeAgent(probeConnection, sessionId, conductor.clock(), pingTimeNs, bulkTimeNs,
                    chunkLength, credits, conductor.ctx().peerTimeoutNs());
                probeRunner = conductor.newRunner(probe, new ConnectionIdleStrategy(probeConnection));
                AgentRunner.startOnThread(probeRunner);
                return 1;
            }
            catch (final IOException | RdmaException | BlockmoverException ex)
            {
                dialer.close();
                closeProbe();
                final Map<String, Object> r = new LinkedHashMap<>();
                r.put("transport", transport);
                r.put("available", true);
                r.put("error", "cannot reach " + peer.name() + " at " + peer.address() + " over " + transport + ": " +
                    ex.getMessage());
                network.add(Math.min(transportIndex, network.size()), r);
                transportIndex++;
                return 1;
            }
        }

        private void closeProbe()
        {
            if (probeRunner != null)
            {
                CloseHelper.quietClose(probeRunner);
                probeRunner = null;
            }
            if (probeConnection != null)
            {
                probeConnection.close();
                probeConnection = null;
            }
            probe = null;
        }

        private void finish()
        {
            final List<Map<String, Object>> volumeResults = volumeProbe.results();
            final Map<String, Object> r = new LinkedHashMap<>();
            r.put("id", id);
            r.put("node", conductor.ctx().nodeName());
            r.put("peer", peer.name());
            r.put("peer_address", peer.address().toString());
            r.put("started_ms", startedMs);
            finishedMs = System.currentTimeMillis();
            r.put("finished_ms", finishedMs);
            r.put("duration_ms", TimeUnit.NANOSECONDS.toMillis(durationNs));
            r.put("workload", workload);
            r.put("network", network);
            r.put("volumes", volumeResults);
            r.put("recommendations", TopologyReport.recommend(network, volumeResults, outageSeconds));
            result = r;
            state = "done";
            conductor.log("topology test " + id + " finished");
        }

        void fail(final String message)
        {
            stop();
            error = message;
            state = "failed";
            finishedMs = System.currentTimeMillis();
            conductor.log("topology test " + id + " failed: " + message);
        }

        void stop()
        {
            dialer.close();
            closeProbe();
            if (volumeRunner != null)
            {
                CloseHelper.quietClose(volumeRunner);
            }
        }

        Map<String, Object> status()
        {
            final Map<String, Object> s = new LinkedHashMap<>();
            s.put("id", id);
            s.put("state", state);
            final double netShare = (double)(pingTimeNs + bulkTimeNs) * transports.size();
            final double volShare = durationNs + 1e9;
            double done;
            String phase;
            if (transportIndex < transports.size())
            {
                final String transport = transports.get(transportIndex);
                phase = "network over " + transport + ": " + (probe != null ? probe.phase() : dialer.phase());
                done = Math.min(netShare, System.nanoTime() - startedNs);
            }
            else
            {
                phase = volumeRunner == null ? "volumes" : "volumes: " + volumeProbe.phase();
                done = netShare + (volumeRunner == null ? 0 : volumeProbe.progress() * volShare);
            }
            s.put("phase", isRunning() ? phase : state);
            s.put("progress", isRunning() ? Math.min(0.99, done / (netShare + volShare)) : 1.0);
            s.put("elapsed_ms", (finishedMs > 0 ? finishedMs : System.currentTimeMillis()) - startedMs);
            if (error != null)
            {
                s.put("error", error);
            }
            if (result != null)
            {
                s.put("result", result);
            }
            return s;
        }
    }
}
