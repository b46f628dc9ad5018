package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import org.agrona.CloseHelper;
import org.agrona.concurrent.AgentRunner;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.io.Volume;
import io.blockmover.pipeline.DestinationSession;
import io.blockmover.pipeline.Receiver;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.pipeline.Writer;
import io.blockmover.protocol.FrameType;
import io.blockmover.transport.FrameConnection;

/**
 * A connection a peer opened to us, on the destination side: the server half of the handshake (it must prove the
 * shared key before anything it sends is looked at), the checks on the volume it asks for, then a
 * {@link DestinationSession} until the peer closes or goes away. Conductor thread only.
 */
final class InboundConnection
{
    private static final int STEP_AWAIT_HELLO = 0;
    private static final int STEP_AWAIT_AUTH = 1;
    private static final int STEP_AWAIT_OPEN = 2;
    private static final int STEP_RUNNING = 3;
    private static final int STEP_CLOSED = 4;
    /** A refusal was sent: the connection stays open until the peer has read it and closes (see refuse). */
    private static final int STEP_REFUSED = 5;
    /** The longest a refused connection waits for its peer to close it. */
    private static final long REFUSED_LINGER_NS = 2_000_000_000L;

    private final Conductor conductor;
    private final ControlChannel channel;
    private final long deadlineNs;
    private long lingerDeadlineNs;
    private int step = STEP_AWAIT_HELLO;
    private PeerConfig peer;
    private String clientNonce;
    private String serverNonce;
    private DestinationSession session;
    private AgentRunner receiverRunner;
    private AgentRunner writerRunner;
    private int slotBase = -1;
    private Volume volume;
    private long jobId;
    private String target;
    private long size;

    InboundConnection(final Conductor conductor, final FrameConnection connection, final long nowNs)
    {
        this.conductor = conductor;
        this.channel = new ControlChannel(connection, conductor.cnc().counter(SystemCounter.FRAME_ERRORS));
        this.deadlineNs = nowNs + conductor.ctx().connectTimeoutNs();
    }

    /**
     * @return whether the conductor should poll this connection often: its handshake runs, or it waits for the
     * peer to close after a refusal.
     */
    boolean isHandshaking()
    {
        return step < STEP_RUNNING || step == STEP_REFUSED;
    }

    boolean isClosed()
    {
        return step == STEP_CLOSED;
    }

    String peerName()
    {
        return peer == null ? null : peer.name();
    }

    long jobId()
    {
        return jobId;
    }

    /**
     * @return whether this session holds path open as its copy's destination.
     */
    boolean isWriting(final Path path)
    {
        return volume != null && Conductor.isSameVolume(path, target);
    }

    int doWork(final long nowNs)
    {
        try
        {
            switch (step)
            {
                case STEP_AWAIT_HELLO, STEP_AWAIT_AUTH, STEP_AWAIT_OPEN ->
                {
                    if (nowNs > deadlineNs)
                    {
                        throw new IOException("handshake not finished within " +
                            conductor.ctx().connectTimeoutNs() / 1_000_000 + " ms");
                    }
                    final ControlChannel.Frame frame = channel.poll();
                    if (frame == null)
                    {
                        return 0;
                    }
                    onFrame(frame);
                    return 1;
                }
                case STEP_RUNNING ->
                {
                    return checkSession();
                }
                case STEP_REFUSED ->
                {
                    // Whatever the peer still sends is dropped; its close (an IOException here) ends the wait.
                    if (channel.poll() == null && System.nanoTime() > lingerDeadlineNs)
                    {
                        close();
                        return 1;
                    }
                    return 0;
                }
                default ->
                {
                    return 0;
                }
            }
        }
        catch (final Refused ex)
        {
            return 1; // Waits for the peer to close, in STEP_REFUSED.
        }
        catch (final IOException ex)
        {
            close();
            return 1;
        }
    }

    private void onFrame(final ControlChannel.Frame frame) throws IOException
    {
        switch (step)
        {
            case STEP_AWAIT_HELLO -> onHello(frame);
            case STEP_AWAIT_AUTH -> onAuth(frame);
            case STEP_AWAIT_OPEN -> onOpen(frame);
            default -> throw new IllegalStateException("step " + step);
        }
    }

    private void onHello(final ControlChannel.Frame frame) throws IOException
    {
        if (frame.type() != FrameType.HELLO)
        {
            refuse(ErrorCode.PROTOCOL_ERROR, "expected HELLO first");
        }
        final Map<String, Object> hello = frame.json();
        final String name = String.valueOf(hello.get("node"));
        clientNonce = String.valueOf(hello.get("nonce"));
        peer = conductor.ctx().peers().get(name);
        if (peer == null)
        {
            conductor.countAuthFailure();
            refuse(ErrorCode.UNKNOWN_PEER, "node '" + name + "' is not a peer of " + conductor.ctx().nodeName() +
                ": add peer." + name + ".address and peer." + name + ".key.file to its configuration");
        }
        serverNonce = Authenticator.newNonce();
        final Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("node", conductor.ctx().nodeName());
        reply.put("nonce", serverNonce);
        reply.put("mac", Authenticator.proof(peer.key(), "server", clientNonce, serverNonce, name,
            conductor.ctx().nodeName()));
        channel.sendJson(FrameType.HELLO, 0, reply);
        step = STEP_AWAIT_AUTH;
    }

    private void onAuth(final ControlChannel.Frame frame) throws IOException
    {
        final String expected = Authenticator.proof(peer.key(), "client", clientNonce, serverNonce, peer.name(),
            conductor.ctx().nodeName());
        if (frame.type() != FrameType.AUTH || !Authenticator.matches(expected, frame.json().get("mac")))
        {
            conductor.countAuthFailure();
            conductor.log("rejected " + channel.connection().remoteAddress() + " claiming to be " + peer.name() +
                ": wrong key");
            refuse(ErrorCode.AUTH_FAILED, "authentication failed: " + peer.name() + " and " +
                conductor.ctx().nodeName() + " hold different keys (both must hold the same key file)");
        }
        step = STEP_AWAIT_OPEN;
    }

    private void onOpen(final ControlChannel.Frame frame) throws IOException
    {
        if (frame.type() != FrameType.OPEN)
        {
            refuse(ErrorCode.PROTOCOL_ERROR, "expected OPEN");
        }
        final int sessionId = channel.sessionIdOfLastFrame();
        final Map<String, Object> open = frame.json();
        if (open.containsKey("group"))
        {
            try
            {
                conductor.groups().acceptSession(peer.name(), sessionId, open, channel);
            }
            catch (final BlockmoverException ex)
            {
                refuse(ex.code(), conductor.ctx().nodeName() + ": " + ex.getMessage());
            }
            catch (final RuntimeException ex)
            {
                refuse(ErrorCode.BAD_REQUEST, conductor.ctx().nodeName() + ": malformed group OPEN: " + ex);
            }
            // The group's receiver owns the connection now.
            step = STEP_CLOSED;
            return;
        }
        if (Boolean.TRUE.equals(open.get("probe")))
        {
            // A topology test's probe session: its responder owns the connection now.
            conductor.topologyTests().acceptProbe(peer.name(), sessionId, channel);
            step = STEP_CLOSED;
            return;
        }
        jobId = ((Number)open.get("job")).longValue();
        target = String.valueOf(open.get("target"));
        size = ((Number)open.get("size")).longValue();
        final int chunkLength = ((Number)open.get("chunk_length")).intValue();
        if (chunkLength <= 0 || chunkLength % 4096 != 0 || chunkLength > conductor.slab().slotLength())
        {
            refuse(ErrorCode.BAD_REQUEST, "chunk length " + chunkLength + " is not possible here (slots of " +
                conductor.slab().slotLength() + " bytes): use the same chunk.length on both hosts");
        }
        conductor.supersede(this, peer.name(), jobId);
        try
        {
            conductor.checkVolumeFree(Path.of(target));
            volume = Volume.open(Path.of(target), true);
        }
        catch (final BlockmoverException ex)
        {
            refuse(ex.code(), conductor.ctx().nodeName() + ": " + ex.getMessage());
        }
        if (volume.size() < size)
        {
            refuse(ErrorCode.VOLUME_TOO_SMALL, volume.tooSmallFor("destination " + target + " on " +
                conductor.ctx().nodeName(), size));
        }
        slotBase = conductor.slab().lease(conductor.ctx().sessionSlots());
        if (slotBase < 0)
        {
            refuse(ErrorCode.BUSY, conductor.ctx().nodeName() + " has no free slots for another session: retry " +
                "later or raise slab.slots");
        }
        session = new DestinationSession(sessionId, volume, size, chunkLength, conductor.slab(), slotBase,
            conductor.ctx().sessionSlots(), channel.connection(), conductor.ctx().heartbeatIntervalNs(),
            conductor.ctx().peerTimeoutNs(), flushChunks(chunkLength), conductor.ctx().flushIntervalNs(),
            conductor.cnc());
        final Map<String, Object> opened = new LinkedHashMap<>();
        opened.put("credits", conductor.ctx().sessionSlots());
        opened.put("size", volume.size());
        opened.put("flush_chunks", flushChunks(chunkLength));
        // Features this destination offers; an older one sends none, and the source then sends every chunk's bytes.
        opened.put("zero_chunks", true);
        channel.sendJson(FrameType.OPENED, sessionId, opened);
        receiverRunner = conductor.newDataRunner(new Receiver(session, conductor.clock()), session.connection());
        writerRunner = conductor.newDataRunner(new Writer(session, conductor.clock()), null);
        AgentRunner.startOnThread(receiverRunner);
        AgentRunner.startOnThread(writerRunner);
        step = STEP_RUNNING;
        conductor.log("receiving job " + jobId + " from " + peer.name() + " into " + target + " over " +
            channel.connection().transportName());
    }

    private int flushChunks(final int chunkLength)
    {
        return (int)Math.max(1, Math.min(1 << 20, conductor.ctx().flushBytes() / chunkLength));
    }

    /**
     * Sends the peer an ERROR, then waits (on later duty cycles) for the peer to close the connection, at most
     * {@link #REFUSED_LINGER_NS}: closing at once lost the ERROR over RDMA, where a SEND is only posted when
     * flush returns and destroying the queue pair flushes it unsent. The source then saw WR_FLUSH_ERR instead of
     * PREPARING, and failed a group create it should have retried (scripts/test-rdma, siw, every run).
     */
    private void refuse(final ErrorCode code, final String message) throws IOException
    {
        try
        {
            channel.sendError(0, code, message);
        }
        catch (final IOException ex)
        {
            close();
            throw ex;
        }
        step = STEP_REFUSED;
        lingerDeadlineNs = System.nanoTime() + REFUSED_LINGER_NS;
        throw new Refused(message);
    }

    /**
     * Unwinds the handshake after a refusal was sent; the connection stays open for the peer to read it.
     */
    private static final class Refused extends IOException
    {
        private static final long serialVersionUID = 1L;

        Refused(final String message)
        {
            super(message);
        }
    }

    private int checkSession()
    {
        // Once the receiver stops, the writer still finishes and forces what was received: wait for both.
        if (session.status().isRunning() || !session.isWriterDone())
        {
            return 0;
        }
        final boolean failedHere = session.status().state() == SessionStatus.FAILED &&
            session.status().code() == ErrorCode.IO_ERROR;
        if (session.status().state() == SessionStatus.FAILED)
        {
            conductor.log("session of job " + jobId + " from " + peer.name() + " ended: " + session.status().message());
        }
        final String reason = session.status().message();
        CloseHelper.closeAll(receiverRunner, writerRunner);
        if (failedHere)
        {
            // The source sees only a closed connection otherwise: tell it why (a full disk here, say), so that
            // its job shows the cause while it waits to try again.
            try
            {
                channel.sendError(0, ErrorCode.IO_ERROR, conductor.ctx().nodeName() + ": " + reason);
            }
            catch (final IOException ex)
            {
                conductor.log("job " + jobId + ": could not tell " + peer.name() + " why the session ended: " +
                    ex.getMessage());
            }
        }
        close();
        return 1;
    }

    /**
     * Ends the session at once (peer reconnected, or shutdown), leaving what was written durable.
     */
    void close()
    {
        if (session != null)
        {
            session.status().fail(ErrorCode.CANCELLED, "session closed", true);
            CloseHelper.closeAll(receiverRunner, writerRunner);
            session = null;
        }
        channel.connection().close();
        if (slotBase >= 0)
        {
            conductor.slab().release(slotBase, conductor.ctx().sessionSlots());
            slotBase = -1;
        }
        if (volume != null)
        {
            try
            {
                volume.close();
            }
            catch (final BlockmoverException ex)
            {
                conductor.log("closing " + target + ": " + ex.getMessage());
            }
            volume = null;
        }
        step = STEP_CLOSED;
    }

    Map<String, Object> describe()
    {
        final Map<String, Object> d = new LinkedHashMap<>();
        d.put("peer", peerName());
        d.put("job", jobId);
        d.put("target", target);
        d.put("size", size);
        d.put("transport", channel.connection().transportName());
        d.put("remote", channel.connection().remoteAddress());
        d.put("state", step == STEP_RUNNING ? "receiving" : "handshake");
        return d;
    }
}
