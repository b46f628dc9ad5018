package io.blockmover.conductor;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.SocketChannel;
import java.util.LinkedHashMap;
import java.util.Map;

import org.agrona.CloseHelper;

import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.protocol.FrameType;
import io.blockmover.rdma.RdmaEndpoint;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.transport.FrameConnection;
import io.blockmover.transport.rdma.RdmaDevices;
import io.blockmover.transport.rdma.RdmaFrameConnection;
import io.blockmover.transport.tcp.TcpFrameConnection;

/**
 * The outbound half of every session, shared by copy jobs and replication groups: connect over the transport the
 * peer's configuration chooses, prove the shared key both ways (HELLO, AUTH), send OPEN and wait for OPENED. It
 * never blocks: the conductor turns it once per duty cycle. Conductor thread only.
 */
final class PeerDialer
{
    private static final int STEP_IDLE = 0;
    private static final int STEP_CONNECT = 1;
    private static final int STEP_AWAIT_HELLO = 2;
    private static final int STEP_AWAIT_OPENED = 3;
    private static final int STEP_OPENED = 4;
    private final Conductor conductor;
    private final String peer;
    private SocketChannel socket;
    private RdmaFrameConnection pendingRdma;
    private ControlChannel channel;
    private int step = STEP_IDLE;
    private long deadlineNs;
    private long waitNs;
    private String clientNonce;
    private int sessionId;
    private Map<String, Object> open;
    private Map<String, Object> opened;
    private String transportReason;
    private String phase = "idle";
    private boolean tcpOnly;

    PeerDialer(final Conductor conductor, final String peer)
    {
        this.conductor = conductor;
        this.peer = peer;
    }

    /**
     * Makes the next {@link #start} use TCP whatever the peer's transport (the topology test measures each).
     *
     * @param tcp whether to use TCP only.
     * @return this.
     */
    PeerDialer tcpOnly(final boolean tcp)
    {
        tcpOnly = tcp;
        return this;
    }

    /**
     * Starts connecting.
     *
     * @param open  the OPEN request to send once both sides are authenticated.
     * @param nowNs conductor time.
     * @throws IOException   when the connection cannot even be started.
     * @throws RdmaException when an RDMA connection cannot be started.
     */
    void start(final Map<String, Object> open, final long nowNs) throws IOException, RdmaException
    {
        close();
        this.open = open;
        this.opened = null;
        waitNs = conductor.ctx().connectTimeoutNs();
        deadlineNs = nowNs + waitNs;
        final PeerConfig peerConfig = conductor.peerConfig(peer);
        final RdmaDevices.Choice choice = tcpOnly ? new RdmaDevices.Choice(null, "TCP, as asked") :
            conductor.transportFor(peerConfig);
        transportReason = choice.reason();
        if (choice.isRdma())
        {
            final InetSocketAddress remote = new InetSocketAddress(peerConfig.address().getAddress(),
                peerConfig.address().getPort() + RdmaDevices.PORT_OFFSET);
            final RdmaEndpoint endpoint = RdmaEndpoint.connect(choice.device(), remote,
                RdmaDevices.context(choice.device(), conductor.rdmaReceiveDepth()), nowNs,
                conductor.ctx().connectTimeoutNs());
            pendingRdma = conductor.newRdmaConnection(endpoint);
        }
        else
        {
            socket = SocketChannel.open();
            socket.configureBlocking(false);
            socket.connect(peerConfig.address());
        }
        phase = "connecting";
        step = STEP_CONNECT;
    }

    boolean isActive()
    {
        return step != STEP_IDLE && step != STEP_OPENED;
    }

    /**
     * @return whether the connection was made and the handshake on it had begun: a failure from here on is the
     * connection breaking, not the peer being absent.
     */
    boolean isConnected()
    {
        return step == STEP_AWAIT_HELLO || step == STEP_AWAIT_OPENED || step == STEP_OPENED;
    }

    boolean isOpened()
    {
        return step == STEP_OPENED;
    }

    String phase()
    {
        return phase;
    }

    String transportReason()
    {
        return transportReason;
    }

    int sessionId()
    {
        return sessionId;
    }

    ControlChannel channel()
    {
        return channel;
    }

    /**
     * @return the peer's OPENED reply, once {@link #isOpened()}.
     */
    Map<String, Object> opened()
    {
        return opened;
    }

    /**
     * Turns the handshake once.
     *
     * @param nowNs conductor time.
     * @return work done.
     * @throws PeerRefusal when the peer refused explicitly.
     * @throws IOException on a broken connection or time-out.
     */
    int doWork(final long nowNs) throws IOException
    {
        if (nowNs > deadlineNs && step != STEP_OPENED)
        {
            throw new IOException("no answer within " + waitNs / 1_000_000 + " ms");
        }
        switch (step)
        {
            case STEP_CONNECT ->
            {
                final FrameConnection connection = finishConnect(nowNs);
                if (connection == null)
                {
                    return 0;
                }
                channel = new ControlChannel(connection, conductor.cnc().counter(SystemCounter.FRAME_ERRORS));
                clientNonce = Authenticator.newNonce();
                final Map<String, Object> hello = new LinkedHashMap<>();
                hello.put("node", conductor.ctx().nodeName());
                hello.put("nonce", clientNonce);
                channel.sendJson(FrameType.HELLO, 0, hello);
                phase = "authenticating";
                step = STEP_AWAIT_HELLO;
                return 1;
            }
            case STEP_AWAIT_HELLO ->
            {
                final ControlChannel.Frame frame = channel.poll();
                if (frame == null)
                {
                    return 0;
                }
                onServerHello(frame, nowNs);
                return 1;
            }
            case STEP_AWAIT_OPENED ->
            {
                final ControlChannel.Frame frame = channel.poll();
                if (frame == null)
                {
                    return 0;
                }
                onOpened(frame);
                return 1;
            }
            default ->
            {
                return 0;
            }
        }
    }

    private FrameConnection finishConnect(final long nowNs) throws IOException
    {
        if (pendingRdma != null)
        {
            final RdmaEndpoint endpoint = pendingRdma.endpoint();
            endpoint.pollEvents(nowNs);
            if (endpoint.state() == RdmaEndpoint.State.FAILED)
            {
                throw new IOException("RDMA connection failed: " +
                    (endpoint.failure() != null ? endpoint.failure().getMessage() : "rejected"));
            }
            if (!endpoint.isEstablished())
            {
                return null;
            }
            final FrameConnection connection = pendingRdma;
            pendingRdma = null;
            return connection;
        }
        if (!socket.finishConnect())
        {
            return null;
        }
        final FrameConnection connection = new TcpFrameConnection(socket);
        socket = null;
        return connection;
    }

    private void onServerHello(final ControlChannel.Frame frame, final long nowNs) throws IOException
    {
        if (frame.type() == FrameType.ERROR)
        {
            conductor.countAuthFailure();
            throw new PeerRefusal(frame.errorCode(), peer + " refused us: " + frame.errorMessage());
        }
        if (frame.type() != FrameType.HELLO)
        {
            throw new IOException("expected HELLO, got " + frame.type());
        }
        final Map<String, Object> hello = frame.json();
        final String serverName = String.valueOf(hello.get("node"));
        if (!peer.equals(serverName))
        {
            throw new PeerRefusal(ErrorCode.AUTH_FAILED, "the node at " + conductor.peerConfig(peer).address() +
                " calls itself '" + serverName + "', not '" + peer + "': check peer." + peer + ".address");
        }
        final String serverNonce = String.valueOf(hello.get("nonce"));
        final byte[] key = conductor.peerConfig(peer).key();
        final String nodeName = conductor.ctx().nodeName();
        if (!Authenticator.matches(
            Authenticator.proof(key, "server", clientNonce, serverNonce, nodeName, serverName), hello.get("mac")))
        {
            conductor.countAuthFailure();
            throw new PeerRefusal(ErrorCode.AUTH_FAILED, peer + " failed authentication: its key differs from " +
                conductor.peerConfig(peer).keyFile() + " (both hosts must hold the same key)");
        }
        final Map<String, Object> auth = new LinkedHashMap<>();
        auth.put("mac", Authenticator.proof(key, "client", clientNonce, serverNonce, nodeName, serverName));
        channel.sendJson(FrameType.AUTH, 0, auth);
        sessionId = conductor.newSessionId();
        channel.sendJson(FrameType.OPEN, sessionId, open);
        phase = "opening";
        step = STEP_AWAIT_OPENED;
        // connect.timeout bounds the OPEN too: a peer writing a new group's record log (seconds to minutes) does it
        // on a thread of its own and answers PREPARING at once; the source asks again (SourceGroupHandle).
        waitNs = conductor.ctx().connectTimeoutNs();
        deadlineNs = nowNs + waitNs;
    }

    private void onOpened(final ControlChannel.Frame frame) throws IOException
    {
        if (frame.type() == FrameType.ERROR)
        {
            // The peer names itself in its refusals (InboundConnection): "site-b: site-b: ..." said it twice.
            final String message = frame.errorMessage();
            throw new PeerRefusal(frame.errorCode(), message.startsWith(peer + ": ") ? message : peer + ": " + message);
        }
        if (frame.type() != FrameType.OPENED)
        {
            throw new IOException("expected OPENED, got " + frame.type());
        }
        opened = frame.json();
        phase = "opened";
        step = STEP_OPENED;
    }

    /**
     * Hands the open connection over: the dialer forgets it, the caller owns and closes it.
     *
     * @return the connection.
     */
    FrameConnection takeConnection()
    {
        final FrameConnection connection = channel.connection();
        channel = null;
        step = STEP_IDLE;
        return connection;
    }

    /**
     * Closes whatever is half open; safe to call at any time.
     */
    void close()
    {
        step = STEP_IDLE;
        phase = "idle";
        if (pendingRdma != null)
        {
            pendingRdma.close();
            pendingRdma = null;
        }
        if (channel != null)
        {
            channel.connection().close();
            channel = null;
        }
        CloseHelper.quietClose(socket);
        socket = null;
    }
}
