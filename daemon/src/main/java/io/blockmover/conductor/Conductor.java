package io.blockmover.conductor;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.StandardSocketOptions;
import java.nio.channels.ClosedSelectorException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

import org.agrona.CloseHelper;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.SystemNanoClock;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.buffer.Slab;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.control.ControlServer;
import io.blockmover.daemon.Context;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.io.Volume;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.transport.ConnectionIdleStrategy;
import io.blockmover.transport.FrameConnection;
import io.blockmover.transport.rdma.RdmaDevices;
import io.blockmover.transport.rdma.RdmaFrameConnection;
import io.blockmover.transport.tcp.TcpFrameConnection;
import io.blockmover.rdma.RdmaEndpoint;
import io.blockmover.rdma.RdmaListener;
import io.blockmover.rdma.MemlockLimit;
import io.blockmover.rdma.MemlockLimitException;
import io.blockmover.systemd.ServiceNotifier;

/**
 * The one agent that owns every resource of the daemon: the slab, the counters file, the control socket, the
 * peer listener, the jobs (source side) and the inbound connections (destination side). It opens, leases, starts
 * and frees; the data agents only move bytes. Conductor thread only, unless a method says otherwise.
 */
public final class Conductor implements Agent, ControlServer.Handler
{
    /** Counter type of per-job counters in the counters file. */
    public static final int JOB_COUNTER_TYPE = 2;
    private static final System.Logger LOG = System.getLogger("blockmoverd");
    private static final long HOUSEKEEPING_INTERVAL_NS = 100_000_000L;

    // Not final: a configuration reload swaps it (conductor thread only); everyone reads it through ctx().
    private Context ctx;
    private final CncFile cnc;
    private final Slab slab;
    private final ControlServer control;
    private final ServerSocketChannel listener;
    private final JobStore jobStore;
    private Groups groups;
    private final PeerRates peerRates;
    private TopologyTests topologyTests;
    private final NanoClock clock = SystemNanoClock.INSTANCE;
    private final SecureRandom random = new SecureRandom();
    private final Map<Long, CopyJob> jobs = new TreeMap<>();
    private final List<CopyJob> jobsSnapshot = new ArrayList<>();
    private final Selector selector;
    private final RdmaDevices rdmaDevices;
    private RdmaListener rdmaListener;
    private String rdmaListenerNote = "no peer uses RDMA";
    private final Consumer<SelectionKey> onReady = (key) -> { };
    private final List<InboundConnection> inbound = new ArrayList<>();
    private final long startMs = System.currentTimeMillis();
    private long nextJobId;
    private long nextHousekeepingNs;
    private long nextBitmapForceNs;
    private final ConductorEvents events = new ConductorEvents(this);
    private final GroupMetricsPublisher groupMetrics = new GroupMetricsPublisher(this);
    private long nextMetricsNs;
    private final AtomicBoolean reloadRequested = new AtomicBoolean();
    private final ServiceNotifier notifier = ServiceNotifier.fromEnvironment();
    private long configLoadedMs = System.currentTimeMillis();
    /** Set once the conductor's thread runs; until then start-up holds the control socket (see answerStarting). */
    private volatile boolean running;

    /**
     * Opens every resource, in an order that fails before anything is half-started.
     *
     * @param ctx validated configuration.
     * @param cnc counters file, already created.
     */
    public Conductor(final Context ctx, final CncFile cnc)
    {
        this.ctx = ctx;
        this.cnc = cnc;
        this.jobStore = new JobStore(ctx.stateDir());
        this.slab = new Slab(ctx.slabSlots(), ctx.chunkLength());
        this.rdmaDevices = new RdmaDevices(slab.memory());
        this.peerRates = new PeerRates(ctx, clock.nanoTime());
        try
        {
            listener = ServerSocketChannel.open();
            listener.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            listener.bind(ctx.listen());
            listener.configureBlocking(false);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot listen on " + ctx.listen() + ": " +
                ex.getMessage() + " (another blockmoverd on this address? set listen=)", ex);
        }
        try
        {
            control = new ControlServer(ctx.controlSocket(), ctx.controlGroup());
        }
        catch (final RuntimeException ex)
        {
            CloseHelper.quietClose(listener);
            throw ex;
        }
        try
        {
            selector = Selector.open();
            listener.register(selector, SelectionKey.OP_ACCEPT);
            control.register(selector);
        }
        catch (final IOException ex)
        {
            CloseHelper.quietCloseAll(listener, control);
            throw new BlockmoverException(ErrorCode.INTERNAL, "cannot create the conductor's selector: " + ex, ex);
        }
        openRdmaListener();
        try
        {
            groups = new Groups(this);
            topologyTests = new TopologyTests(this);
        }
        catch (final RuntimeException ex)
        {
            CloseHelper.quietCloseAll(listener, control, selector, rdmaListener);
            rdmaDevices.close();
            throw ex;
        }
        nextJobId = jobStore.nextId();
        for (final Map<String, Object> record : jobStore.loadAll())
        {
            final CopyJob job = CopyJob.fromRecord(this, record);
            jobs.put(job.id, job);
            if (!job.state.isTerminal())
            {
                log("job " + job.id + " resumes: " + job.source + " -> " + job.peer + ":" + job.target);
                try
                {
                    job.openBitmap();
                }
                catch (final BlockmoverException ex)
                {
                    job.fail(ex.code(), ex.getMessage());
                }
            }
        }
    }

    @Override
    public String roleName()
    {
        return "conductor";
    }

    @Override
    public int doWork()
    {
        int work = control.poll(this);
        // Read after the control requests, and again below after each stage that may block: a group create writes
        // its record log (seconds per GiB), and a stage that starts a deadline from a time taken before that finds
        // it already passed (a new group's dialer gave up before it had even connected).
        long nowNs = clock.nanoTime();
        work += acceptPeers(nowNs);
        work += acceptRdmaPeers(nowNs);
        for (final Iterator<InboundConnection> it = inbound.iterator(); it.hasNext();)
        {
            final InboundConnection connection = it.next();
            work += connection.doWork(nowNs);
            if (connection.isClosed())
            {
                it.remove();
            }
        }
        nowNs = clock.nanoTime(); // A peer's OPEN of a new group wrote its record log.
        jobsSnapshot.clear();
        jobsSnapshot.addAll(jobs.values()); // A job may discard itself while we iterate.
        for (final CopyJob job : jobsSnapshot)
        {
            try
            {
                work += job.doWork(nowNs);
            }
            catch (final BlockmoverException ex)
            {
                job.fail(ex.code(), ex.getMessage());
            }
            catch (final RuntimeException ex)
            {
                LOG.log(System.Logger.Level.ERROR, "job " + job.id + " failed unexpectedly", ex);
                job.fail(ErrorCode.INTERNAL, "internal error: " + ex);
            }
        }
        nowNs = clock.nanoTime();
        work += groups.doWork(nowNs);
        work += topologyTests.doWork(nowNs);
        if (reloadRequested.get() && reloadRequested.compareAndSet(true, false))
        {
            Reloader.reload(this, null, null);
            work++;
        }
        if (nowNs >= nextHousekeepingNs)
        {
            nextHousekeepingNs = nowNs + HOUSEKEEPING_INTERVAL_NS;
            cnc.heartbeat(System.currentTimeMillis());
            work += ServiceStatus.onHousekeeping(this, notifier, nowNs);
            groups.housekeeping();
            events.tick();
            if (nowNs >= nextMetricsNs)
            {
                nextMetricsNs = nowNs + GroupMetricsPublisher.INTERVAL_NS;
                groupMetrics.update();
            }
            if (nowNs >= nextBitmapForceNs)
            {
                nextBitmapForceNs = nowNs + ctx.bitmapForceIntervalNs();
                for (final CopyJob job : jobs.values())
                {
                    job.forceBitmap();
                }
                groups.forceBitmaps();
            }
        }
        return work;
    }

    private int acceptPeers(final long nowNs)
    {
        int work = 0;
        try
        {
            SocketChannel socket;
            while ((socket = listener.accept()) != null)
            {
                cnc.counter(SystemCounter.CONNECTIONS_ACCEPTED).increment();
                try
                {
                    inbound.add(new InboundConnection(this, new TcpFrameConnection(socket), nowNs));
                }
                catch (final IOException ex)
                {
                    CloseHelper.quietClose(socket);
                }
                work++;
            }
        }
        catch (final IOException ex)
        {
            error("accept on " + ctx.listen() + " failed: " + ex);
        }
        return work;
    }

    /**
     * How the conductor idles: asleep in its selector until a peer connects or a control request arrives, at most
     * until the next housekeeping tick; only while a handshake is under way (whose sockets it polls) for at most
     * a millisecond. An idle daemon wakes ten times a second.
     *
     * @return the idle strategy for the conductor's runner.
     */
    public IdleStrategy idleStrategy()
    {
        return new IdleStrategy()
        {
            @Override
            public void idle(final int workCount)
            {
                if (workCount == 0)
                {
                    idle();
                }
            }

            @Override
            public void idle()
            {
                try
                {
                    selector.select(onReady, isHandshaking() ? 1 : HOUSEKEEPING_INTERVAL_NS / 1_000_000);
                }
                catch (final IOException | ClosedSelectorException ex)
                {
                    Thread.yield();
                }
            }

            @Override
            public void reset()
            {
            }
        };
    }

    private boolean isHandshaking()
    {
        for (final InboundConnection connection : inbound)
        {
            if (connection.isHandshaking())
            {
                return true;
            }
        }
        for (final CopyJob job : jobs.values())
        {
            if (job.isHandshaking())
            {
                return true;
            }
        }
        return groups.isHandshaking() || topologyTests.isHandshaking();
    }

    /**
     * Listens for RDMA peers when some peer may use RDMA and an RDMA device owns the address peers reach us on
     * (the listen address, or when that is a wildcard, the local address that routes to a peer).
     */
    private void openRdmaListener()
    {
        boolean wanted = false;
        for (final PeerConfig peer : ctx.peers().values())
        {
            wanted |= peer.transport() != PeerConfig.TransportKind.TCP;
        }
        if (!wanted)
        {
            return;
        }
        final List<RdmaDevices.Choice> candidates = new ArrayList<>();
        try
        {
            if (!ctx.listen().getAddress().isAnyLocalAddress())
            {
                candidates.add(rdmaDevices.on(ctx.listen().getAddress()));
            }
            else
            {
                for (final PeerConfig peer : ctx.peers().values())
                {
                    candidates.add(rdmaDevices.towards(peer.address()));
                }
            }
        }
        catch (final MemlockLimitException ex)
        {
            throw memlockTooLow(ex); // the device opens, but the slab cannot be registered with it
        }
        rdmaListenerNote = "no RDMA listener";
        for (final RdmaDevices.Choice choice : candidates)
        {
            if (!choice.isRdma())
            {
                rdmaListenerNote = "no RDMA listener: " + choice.reason();
                continue;
            }
            checkMemlockForRdma();
            try
            {
                final int port = ctx.listen().getPort() + RdmaDevices.PORT_OFFSET;
                rdmaListener = RdmaListener.listen(choice.device(), port, 16,
                    RdmaDevices.context(choice.device(), rdmaReceiveDepth()));
                rdmaListenerNote = "RDMA listener on " + choice.device().name() + " " +
                    choice.device().localAddress().getHostAddress() + ":" + port;
                log(rdmaListenerNote);
                return;
            }
            catch (final RuntimeException ex)
            {
                rdmaListenerNote = "no RDMA listener: " + ex.getMessage();
            }
        }
        log(rdmaListenerNote);
    }

    /**
     * RDMA will be used: fail start-up now, naming the fix, if pinned memory for two connections (one each way)
     * would exceed RLIMIT_MEMLOCK, rather than at the first connection.
     */
    private void checkMemlockForRdma()
    {
        final long perConnection = RdmaFrameConnection.registeredBytes(maxFramePayload(), rdmaReceiveDepth());
        final long needed = slab.memory().capacity() + 2 * perConnection;
        try
        {
            MemlockLimit.check(MemlockLimit.registeredBytes(), needed, MemlockLimit.softLimitBytes(),
                MemlockLimit.hasIpcLock());
        }
        catch (final MemlockLimitException ex)
        {
            throw memlockTooLow(ex);
        }
    }

    private BlockmoverException memlockTooLow(final MemlockLimitException ex)
    {
        CloseHelper.quietCloseAll(listener, control, selector);
        rdmaDevices.close();
        return new BlockmoverException(ErrorCode.CONFIG_INVALID, ex.getMessage() + " (RDMA pins the slab, " +
            slab.memory().capacity() + " bytes, once per device, and " +
            RdmaFrameConnection.registeredBytes(maxFramePayload(), rdmaReceiveDepth()) + " bytes per connection; " +
            "or set transport = tcp for the peers)", ex);
    }

    private int acceptRdmaPeers(final long nowNs)
    {
        if (rdmaListener == null)
        {
            return 0;
        }
        int work = 0;
        RdmaEndpoint endpoint;
        while ((endpoint = rdmaListener.poll()) != null)
        {
            cnc.counter(SystemCounter.CONNECTIONS_ACCEPTED).increment();
            try
            {
                // Receives are posted before accept: iWARP has no retry for a SEND that finds none.
                final RdmaFrameConnection connection = newRdmaConnection(endpoint);
                endpoint.accept(nowNs, ctx.connectTimeoutNs());
                inbound.add(new InboundConnection(this, connection, nowNs));
            }
            catch (final IOException | RuntimeException ex)
            {
                error("RDMA connection from " + endpoint.remoteAddress() + " failed: " + ex.getMessage());
                endpoint.close();
            }
            work++;
        }
        return work;
    }

    /**
     * Which transport reaches a peer, and why: {@code tcp} as configured; {@code rdma} only when a device owns
     * the local address that routes to the peer (else an error for the job, never a silent fallback);
     * {@code auto} RDMA when it can, TCP otherwise.
     */
    RdmaDevices.Choice transportFor(final PeerConfig peer)
    {
        if (peer.transport() == PeerConfig.TransportKind.TCP)
        {
            return new RdmaDevices.Choice(null, "transport = tcp is configured");
        }
        final RdmaDevices.Choice choice = rdmaDevices.towards(peer.address());
        if (peer.transport() == PeerConfig.TransportKind.RDMA && !choice.isRdma())
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "peer." + peer.name() + ".transport = rdma, " +
                "but " + choice.reason() + ": load an RDMA driver (rdma link add ... type siw|rxe) or set transport " +
                "= auto or tcp");
        }
        return choice.isRdma() ? choice :
            new RdmaDevices.Choice(null, "TCP: " + choice.reason());
    }

    /**
     * A frame connection on a new endpoint, sending payloads straight from the slab (registered once per device).
     */
    RdmaFrameConnection newRdmaConnection(final RdmaEndpoint endpoint) throws IOException
    {
        return rdmaDevices.newConnection(endpoint, maxFramePayload(), rdmaReceiveDepth(),
            cnc.counter(SystemCounter.RDMA_ZERO_COPY_SENDS));
    }

    int rdmaReceiveDepth()
    {
        return 2 * ctx.sessionSlots() + 16;
    }

    int maxFramePayload()
    {
        return Math.max(ctx.chunkLength(), io.blockmover.protocol.FrameDescriptor.MAX_CONTROL_PAYLOAD);
    }

    @Override
    public void onStart()
    {
        running = true;
    }

    /**
     * Answers every control request that arrived so far with STARTING and what start-up is doing, while it checks
     * a group's log (minutes for tens of GiB on a slow disk). Left unanswered, a query would wait 30 s and give
     * up saying only that the daemon may be starting, and a cluster manager's monitor would time out. Main thread,
     * does nothing once the conductor runs, the control socket is its alone (a failover's log
     * check runs inside its duty cycle, which answers when it ends).
     *
     * @param doing what start-up is doing, for the reply.
     */
    void answerStarting(final String doing)
    {
        if (running)
        {
            return;
        }
        control.poll((client, id, op, args) -> client.error(id, ErrorCode.STARTING, "blockmoverd is starting " +
            "and answers requests once it has checked every group's log: " + doing + ". Try again then; " +
            "'systemctl status blockmoverd' shows how far it is"));
    }

    @Override
    public void onClose()
    {
        for (final CopyJob job : jobs.values())
        {
            job.suspendForShutdown();
        }
        for (final InboundConnection connection : inbound)
        {
            connection.close();
        }
        events.close("blockmoverd is stopping");
        // The group counters stay allocated: 'blockmover stat' shows the last figures of a stopped daemon. Its
        // last, not those of the latest tick up to a second before: published once no client can write any more.
        groups.stopClients();
        try
        {
            groupMetrics.update();
        }
        catch (final RuntimeException ex)
        {
            LOG.log(System.Logger.Level.WARNING, "the last group figures could not be published", ex);
        }
        CloseHelper.quietClose(groups);
        topologyTests.close();
        CloseHelper.quietClose(listener);
        CloseHelper.quietClose(rdmaListener);
        rdmaDevices.close();
        control.close();
        CloseHelper.quietClose(selector);
    }

    @Override
    public void onRequest(final ControlServer.Client client, final Object id, final String op,
        final Map<String, Object> args)
    {
        cnc.counter(SystemCounter.CONTROL_REQUESTS).increment();
        try
        {
            switch (op)
            {
                case "ping" -> client.reply(id, Map.of("node", ctx.nodeName()));
                case "status" -> client.reply(id, status());
                case "jobs" -> client.reply(id, listJobs());
                case "job" -> client.reply(id, describe(job(args)));
                case "copy" -> copy(client, id, args);
                case "cancel" -> cancel(client, id, args);
                case "config" -> client.reply(id, ctx.effective());
                case "events" -> events.subscribe(client, id, args);
                case "reload" -> Reloader.reload(this, client, id);
                default ->
                {
                    if (!groups.onRequest(client, id, op, args) &&
                        !peerRates.onRequest(client, id, op, args, clock.nanoTime()) &&
                        !topologyTests.onRequest(client, id, op, args))
                    {
                        throw new BlockmoverException(ErrorCode.BAD_REQUEST, "unknown operation '" + op + "' (known: " +
                            "ping, status, jobs, job, copy, cancel, config, reload, groups, group-status, " +
                            "group-create, group-suspend, group-resume, group-delete, group-switch, group-set, " +
                            "group-verify, group-test-mount, group-test-dismount, events, peer-show, peer-set, " +
                            "topology-start, topology-status)");
                    }
                }
            }
        }
        catch (final BlockmoverException ex)
        {
            cnc.counter(SystemCounter.CONTROL_REJECTED).increment();
            client.error(id, ex.code(), ex.getMessage());
        }
        catch (final RuntimeException ex)
        {
            cnc.counter(SystemCounter.ERRORS).increment();
            LOG.log(System.Logger.Level.ERROR, "control request " + op + " failed", ex);
            client.error(id, ErrorCode.INTERNAL, "internal error: " + ex);
        }
    }

    private void copy(final ControlServer.Client client, final Object id, final Map<String, Object> args)
    {
        final String source = stringArg(args, "source");
        final String peer = stringArg(args, "peer");
        final String target = stringArg(args, "target");
        peerConfig(peer);
        checkVolumeFree(Path.of(source));
        final Volume volume = Volume.open(Path.of(source), false);
        final CopyJob job = new CopyJob(this, nextJobId++, Path.of(source), peer, target,
            Boolean.TRUE.equals(args.get("verify")), Boolean.TRUE.equals(args.get("seeded")),
            System.currentTimeMillis());
        job.size = volume.size();
        job.chunkLength = ctx.chunkLength();
        job.volume = volume;
        job.pendingClient = client;
        job.pendingRequestId = id;
        jobs.put(job.id, job);
        log("job " + job.id + " requested: " + source + " (" + volume.size() + " bytes) -> " + peer + ":" + target);
    }

    private void cancel(final ControlServer.Client client, final Object id, final Map<String, Object> args)
    {
        final CopyJob job = job(args);
        if (job.state.isTerminal())
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "job " + job.id + " is already " +
                job.state.name().toLowerCase(java.util.Locale.ROOT));
        }
        job.cancel();
        log("job " + job.id + " cancelled");
        client.reply(id, describe(job));
    }

    private CopyJob job(final Map<String, Object> args)
    {
        final Object raw = args.get("id");
        final long jobId;
        try
        {
            jobId = raw instanceof Number ? ((Number)raw).longValue() : Long.parseLong(String.valueOf(raw));
        }
        catch (final NumberFormatException ex)
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "job id '" + raw + "' is not a number");
        }
        final CopyJob job = jobs.get(jobId);
        if (job == null || !job.isPersisted())
        {
            throw new BlockmoverException(ErrorCode.NO_SUCH_JOB, "no job " + jobId + " (see blockmover jobs)");
        }
        return job;
    }

    private static String stringArg(final Map<String, Object> args, final String name)
    {
        final Object value = args.get(name);
        if (!(value instanceof String s) || s.isBlank())
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "argument '" + name + "' is required");
        }
        return s;
    }

    private List<Map<String, Object>> listJobs()
    {
        final List<Map<String, Object>> list = new ArrayList<>();
        for (final CopyJob job : jobs.values())
        {
            if (job.isPersisted())
            {
                list.add(describe(job));
            }
        }
        return list;
    }

    /**
     * @return every persisted job as 'blockmover jobs --json' shows it.
     */
    List<Map<String, Object>> jobDescriptions()
    {
        return listJobs();
    }

    Map<String, Object> describe(final CopyJob job)
    {
        final Map<String, Object> d = new LinkedHashMap<>();
        d.put("id", job.id);
        d.put("state", job.state.name().toLowerCase(java.util.Locale.ROOT));
        d.put("phase", job.phase);
        d.put("source", job.source.toString());
        d.put("peer", job.peer);
        d.put("target", job.target);
        d.put("size", job.size);
        final long remaining = job.bytesRemaining();
        d.put("bytes_remaining", remaining);
        d.put("bytes_done", job.size - remaining);
        if ("seeding".equals(job.phase) || "verifying".equals(job.phase))
        {
            d.put("phase_done", job.regionsChecked());
            d.put("phase_total", job.chunkCount());
        }
        d.put("verify", job.verify);
        d.put("seeded", job.seeded);
        d.put("transport", job.transport);
        if (job.transportReason != null)
        {
            d.put("transport_reason", job.transportReason);
        }
        d.put("attempts", job.attempts);
        d.put("created_ms", job.createdMs);
        d.put("started_ms", job.startedMs);
        d.put("finished_ms", job.finishedMs);
        d.put("verified", job.verified);
        d.put("regions_different", job.regionsDifferent);
        d.put("verify_mismatches", job.verifyMismatches);
        d.put("zero_bytes", job.zeroBytes());
        if (job.errorCode != null)
        {
            d.put("error", Map.of("code", job.errorCode.name(), "message", job.errorMessage));
        }
        if (job.lastError != null)
        {
            d.put("last_error", job.lastError);
        }
        return d;
    }

    private Map<String, Object> status()
    {
        final Map<String, Object> s = new LinkedHashMap<>();
        s.put("node", ctx.nodeName());
        s.put("pid", ProcessHandle.current().pid());
        s.put("version", Conductor.class.getPackage().getImplementationVersion());
        s.put("uptime_ms", System.currentTimeMillis() - startMs);
        s.put("listen", ctx.listen().toString());
        s.put("rdma_listener", rdmaListenerNote);
        s.put("control_socket", ctx.controlSocket().toString());
        s.put("counters_file", ctx.countersFile().toString());
        s.put("config_file", ctx.configFile() == null ? null : ctx.configFile().toString());
        s.put("config_loaded_ms", configLoadedMs);
        s.put("slab_slots_free", slab.freeSlots());
        final List<Map<String, Object>> peers = new ArrayList<>();
        for (final PeerConfig peer : ctx.peers().values())
        {
            final Map<String, Object> p = new LinkedHashMap<>();
            p.put("name", peer.name());
            p.put("address", peer.address().toString());
            p.put("transport_requested", peer.transport().name().toLowerCase(java.util.Locale.ROOT));
            p.put("max_rate", peerRates.bucket(peer.name()).bytesPerSecond());
            try
            {
                final RdmaDevices.Choice choice = transportFor(peer);
                p.put("transport", choice.isRdma() ? "rdma" : "tcp");
                p.put("transport_reason", choice.reason());
                if (choice.isRdma())
                {
                    p.put("rdma_device", choice.device().name());
                }
            }
            catch (final BlockmoverException ex)
            {
                p.put("transport", "none");
                p.put("transport_reason", ex.getMessage());
            }
            peers.add(p);
        }
        s.put("peers", peers);
        long active = 0;
        for (final CopyJob job : jobs.values())
        {
            active += job.isPersisted() && !job.state.isTerminal() ? 1 : 0;
        }
        s.put("jobs_active", active);
        final List<Map<String, Object>> sessions = new ArrayList<>();
        for (final InboundConnection connection : inbound)
        {
            sessions.add(connection.describe());
        }
        s.put("inbound", sessions);
        s.put("nbd_socket", groups.nbdSocket());
        s.put("groups", groups.summary());
        s.put("local_exports", groups.localExports());
        s.put("jvm", ManagementFactory.getRuntimeMXBean().getVmName() + " " + Runtime.version());
        return s;
    }

    /**
     * Closes an older inbound session of the same job, so a source that reconnected after losing its link does
     * not find its own destination volume still held by the dead session.
     */
    void supersede(final InboundConnection current, final String peer, final long jobId)
    {
        for (final InboundConnection other : inbound)
        {
            if (other != current && !other.isClosed() && peer.equals(other.peerName()) && other.jobId() == jobId)
            {
                log("job " + jobId + " from " + peer + " reconnected: closing its previous session");
                other.close();
            }
        }
    }

    PeerConfig peerConfig(final String name)
    {
        final PeerConfig peer = ctx.peers().get(name);
        if (peer == null)
        {
            throw new BlockmoverException(ErrorCode.UNKNOWN_PEER, "unknown peer '" + name + "': configured peers are " +
                ctx.peers().keySet() + " (add peer." + name + ".address and peer." + name + ".key.file)");
        }
        return peer;
    }

    /**
     * A runner for a stage of the data path. Network stages wait on their connection; disk stages back off to
     * parks of at most a millisecond (about a chunk's time on a fast link; every park costs a timer, which is
     * dear where timers are emulated, so a waiting stage should not wake much more often than chunks arrive).
     */
    AgentRunner newDataRunner(final Agent agent, final FrameConnection connection)
    {
        return newRunner(agent, connection != null ? new ConnectionIdleStrategy(connection) :
            new BackoffIdleStrategy(20, 5, 10_000, 1_000_000));
    }

    /**
     * @param agent a data-path or replication agent.
     * @param idle  how it waits.
     * @return a runner that counts the agent's unexpected errors; not started.
     */
    AgentRunner newRunner(final Agent agent, final IdleStrategy idle)
    {
        return newRunner(agent, idle, this::error);
    }

    /**
     * @param agent   the agent.
     * @param idle    how it waits.
     * @param onError told of each unexpected error, named by the agent's role: it counts and logs it.
     * @return a runner; not started.
     */
    static AgentRunner newRunner(final Agent agent, final IdleStrategy idle, final Consumer<String> onError)
    {
        // No error counter for the runner: onError counts (Conductor.error), and with both every error of an
        // agent counted twice in 'blockmover stat'.
        return new AgentRunner(idle,
            (throwable) ->
            {
                // A stage ends by throwing AgentTerminationException and its session's status says why; one that
                // ended on a bug (SessionStatus.failOn) is reported here too, once.
                if (!(throwable instanceof AgentTerminationException))
                {
                    onError.accept(agent.roleName() + ": " + throwable);
                }
                else if (throwable.getCause() != null && SessionStatus.isBug(throwable.getCause()))
                {
                    onError.accept(agent.roleName() + " ended on a bug: " + throwable.getCause());
                }
            },
            null, agent);
    }

    /**
     * Refuses a volume that a group, a local export or a copy job of this daemon already holds, naming which and
     * what frees it. Volume.open refuses it too (an exclusive claim, a lock), but can only say that something does.
     *
     * @param path the volume about to be taken.
     * @throws BlockmoverException VOLUME_IN_USE.
     */
    void checkVolumeFree(final Path path)
    {
        final VolumeHolder holder = holderOf(path);
        if (holder != null)
        {
            throw new BlockmoverException(ErrorCode.VOLUME_IN_USE, "volume " + path + " is already " + holder.what() +
                ", and a volume serves one group or copy job at a time: " + holder.remedy());
        }
    }

    private VolumeHolder holderOf(final Path path)
    {
        final VolumeHolder group = groups.holderOf(path);
        if (group != null)
        {
            return group;
        }
        for (final CopyJob job : jobs.values())
        {
            if (!job.state.isTerminal() && isSameVolume(path, job.source.toString()))
            {
                return new VolumeHolder("the source of copy job " + job.id, "wait for it, or 'blockmover cancel " +
                    job.id + "'");
            }
        }
        for (final InboundConnection connection : inbound)
        {
            if (connection.isWriting(path))
            {
                return new VolumeHolder("the destination of copy job " + connection.jobId() + " from " +
                    connection.peerName(), "wait for it, or cancel it there");
            }
        }
        return null;
    }

    /**
     * What holds a volume in this daemon, and what frees it.
     *
     * @param what   "the source of group g1".
     * @param remedy "'blockmover group delete g1' (on both hosts) frees it".
     */
    record VolumeHolder(String what, String remedy)
    {
    }

    /**
     * @return whether both paths name the same file or device (a symlink, a relative path, /dev/disk/by-id).
     */
    static boolean isSameVolume(final Path path, final String other)
    {
        try
        {
            return Files.isSameFile(path, Path.of(other));
        }
        catch (final IOException | RuntimeException ex)
        {
            return path.equals(Path.of(other));
        }
    }

    int newSessionId()
    {
        int id;
        do
        {
            id = random.nextInt();
        }
        while (id == 0);
        return id;
    }

    void jobEnded(final CopyJob job, final boolean ok)
    {
        cnc.counter(ok ? SystemCounter.JOBS_COMPLETED : SystemCounter.JOBS_FAILED).increment();
    }

    void discard(final CopyJob job)
    {
        jobs.remove(job.id);
    }

    void countAuthFailure()
    {
        cnc.counter(SystemCounter.AUTH_FAILURES).increment();
    }

    Context ctx()
    {
        return ctx;
    }

    /**
     * Wakes the conductor from its idle wait (up to the housekeeping interval) for work another thread finished.
     * Any thread.
     */
    public void wakeUp()
    {
        selector.wakeup();
    }

    /**
     * Asks the conductor to re-read its configuration file at its next duty cycle (SIGHUP). Any thread.
     */
    public void requestReload()
    {
        reloadRequested.set(true);
        selector.wakeup();
    }

    /**
     * @return what tells systemd about the daemon (off outside systemd).
     */
    public ServiceNotifier serviceNotifier()
    {
        return notifier;
    }

    /**
     * Runs with a reloaded configuration from now on. Conductor thread only.
     */
    void reconfigure(final Context reloaded)
    {
        ctx = reloaded;
        configLoadedMs = System.currentTimeMillis();
    }

    long configLoadedMs()
    {
        return configLoadedMs;
    }

    Collection<CopyJob> jobs()
    {
        return jobs.values();
    }

    /**
     * @return one line for systemd's STATUS=: every group and active job. Conductor thread only.
     */
    public String serviceStatus()
    {
        return ServiceStatus.describe(this);
    }

    CncFile cnc()
    {
        return cnc;
    }

    Slab slab()
    {
        return slab;
    }

    Groups groups()
    {
        return groups;
    }

    PeerRates peerRates()
    {
        return peerRates;
    }

    TopologyTests topologyTests()
    {
        return topologyTests;
    }

    JobStore jobStore()
    {
        return jobStore;
    }

    NanoClock clock()
    {
        return clock;
    }

    void log(final String message)
    {
        LOG.log(System.Logger.Level.INFO, message);
    }

    void error(final String message)
    {
        cnc.counter(SystemCounter.ERRORS).increment();
        events.error(message);
        LOG.log(System.Logger.Level.WARNING, message);
    }
}
