package io.blockmover.topology;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.NanoClock;

import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.transport.FrameConnection;

/**
 * The destination half of a probe session (see {@link ProbeAgent}): echoes each HEARTBEAT at once, takes each
 * CHUNK into one scratch buffer (nothing is written anywhere) and ACKs it with its length in aux, ends on CLOSE,
 * on a broken connection or after the peer timeout. It reads the next frame only once its reply has left, so a
 * slow link pushes back on the sender as real traffic would.
 */
public final class ProbeResponder implements Agent
{
    private final FrameConnection connection;
    private final int sessionId;
    private final NanoClock clock;
    private final long peerTimeoutNs;
    private final int maxPayload;
    private final FrameHeader receiveHeader = new FrameHeader();
    private final FrameHeader sendHeader = new FrameHeader();
    private final ByteBuffer payload;
    private boolean receivingPayload;
    private long lastReceiveNs;
    private volatile boolean done;
    private volatile String failure;

    /**
     * @param connection    authenticated; OPENED sent.
     * @param sessionId     of the probe session.
     * @param clock         clock.
     * @param maxPayload    largest frame payload accepted (one chunk).
     * @param peerTimeoutNs silence that ends the session.
     */
    public ProbeResponder(final FrameConnection connection, final int sessionId, final NanoClock clock,
        final int maxPayload, final long peerTimeoutNs)
    {
        this.connection = connection;
        this.sessionId = sessionId;
        this.clock = clock;
        this.maxPayload = maxPayload;
        this.peerTimeoutNs = peerTimeoutNs;
        this.payload = BufferUtil.allocateDirectAligned(maxPayload, 4096);
    }

    @Override
    public String roleName()
    {
        return "probe-responder-" + Integer.toHexString(sessionId);
    }

    @Override
    public void onStart()
    {
        lastReceiveNs = clock.nanoTime();
    }

    @Override
    public int doWork()
    {
        if (done)
        {
            return 0;
        }
        final long nowNs = clock.nanoTime();
        try
        {
            int work = 0;
            while (connection.flush())
            {
                if (!receivingPayload)
                {
                    if (!connection.receiveHeader(receiveHeader))
                    {
                        break;
                    }
                    final String problem = receiveHeader.validate(maxPayload);
                    if (problem != null)
                    {
                        throw new IOException("bad frame from the prober: " + problem);
                    }
                    payload.clear().limit(receiveHeader.payloadLength());
                    receivingPayload = true;
                }
                if (!connection.receivePayload(payload))
                {
                    break;
                }
                receivingPayload = false;
                lastReceiveNs = nowNs;
                work++;
                switch (receiveHeader.type())
                {
                    case HEARTBEAT -> reply(FrameType.HEARTBEAT, receiveHeader.sequence(), 0);
                    case CHUNK -> reply(FrameType.ACK, receiveHeader.sequence(), receiveHeader.payloadLength());
                    case CLOSE ->
                    {
                        done = true;
                        return work;
                    }
                    default -> throw new IOException("unexpected " + receiveHeader.type() + " in a probe session");
                }
            }
            if (nowNs - lastReceiveNs > peerTimeoutNs)
            {
                throw new IOException("prober silent for " + peerTimeoutNs / 1_000_000 + " ms");
            }
            return work;
        }
        catch (final IOException ex)
        {
            failure = ex.getMessage();
            done = true;
            return 1;
        }
    }

    private void reply(final FrameType type, final long sequence, final long aux) throws IOException
    {
        sendHeader.reset(type).sessionId(sessionId).sequence(sequence).aux(aux).seal();
        connection.startSend(sendHeader, null);
        connection.flush();
    }

    /**
     * @return whether the session ended; the conductor then closes the runner and the connection.
     */
    public boolean isDone()
    {
        return done;
    }

    /**
     * @return why it ended early, or null after a CLOSE.
     */
    public String failure()
    {
        return failure;
    }
}
