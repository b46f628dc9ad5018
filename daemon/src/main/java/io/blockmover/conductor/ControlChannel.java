package io.blockmover.conductor;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import com.fasterxml.jackson.jr.ob.JSON;
import org.agrona.BufferUtil;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.protocol.ProtocolException;
import io.blockmover.transport.FrameConnection;

/**
 * Control frames (HELLO, AUTH, OPEN, OPENED, ERROR) over a {@link FrameConnection} during the handshake, with
 * JSON payloads. Conductor thread only; allocates freely (once per connection, not per block). Reads exactly one
 * frame at a time, never past it, so the session's agents find the stream at a frame boundary.
 */
final class ControlChannel
{
    /** Longest the conductor waits for a small frame to leave: an empty socket buffer takes it at once. */
    private static final long SEND_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(2);

    /**
     * One received control frame.
     *
     * @param type    of frame.
     * @param payload bytes.
     */
    record Frame(FrameType type, byte[] payload)
    {
        @SuppressWarnings("unchecked")
        Map<String, Object> json() throws IOException
        {
            return (Map<String, Object>)(Map<?, ?>)JSON.std.mapFrom(payload);
        }

        ErrorCode errorCode()
        {
            return ErrorPayload.code(payload);
        }

        String errorMessage()
        {
            return ErrorPayload.message(payload);
        }
    }

    private final FrameConnection connection;
    private final FrameHeader rxHeader = new FrameHeader();
    private final FrameHeader txHeader = new FrameHeader();
    private final ByteBuffer rxPayload = BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64);
    private final ByteBuffer txPayload = BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64);
    private final AtomicCounter frameErrors;
    private boolean headerDone;

    /**
     * @param connection  the peer link, before any session.
     * @param frameErrors the daemon's count of frames that arrived unreadable: a handshake damaged on the way ends
     *                    its connection as a damaged session frame does, and counts as one.
     */
    ControlChannel(final FrameConnection connection, final AtomicCounter frameErrors)
    {
        this.connection = connection;
        this.frameErrors = frameErrors;
    }

    FrameConnection connection()
    {
        return connection;
    }

    void sendJson(final FrameType type, final int sessionId, final Map<String, Object> body) throws IOException
    {
        send(type, sessionId, JSON.std.asBytes(body));
    }

    void sendError(final int sessionId, final ErrorCode code, final String message) throws IOException
    {
        send(FrameType.ERROR, sessionId, ErrorPayload.encode(code, message));
    }

    void send(final FrameType type, final int sessionId, final byte[] payload) throws IOException
    {
        if (payload.length > FrameDescriptor.MAX_CONTROL_PAYLOAD)
        {
            throw new IOException("control frame of " + payload.length + " bytes is too large");
        }
        txPayload.clear();
        txPayload.put(payload).flip();
        txHeader.reset(type).sessionId(sessionId).controlPayload(txPayload).seal();
        connection.startSend(txHeader, payload.length > 0 ? txPayload : null);
        final long deadline = System.nanoTime() + SEND_TIMEOUT_NS;
        while (!connection.flush())
        {
            if (System.nanoTime() > deadline)
            {
                throw new IOException("peer does not take a " + type + " frame (send buffer full)");
            }
            LockSupport.parkNanos(100_000);
        }
    }

    /**
     * @return the next whole frame, or null when it has not fully arrived yet.
     * @throws IOException on a failed connection or a malformed frame.
     */
    Frame poll() throws IOException
    {
        if (!headerDone)
        {
            if (!connection.receiveHeader(rxHeader))
            {
                return null;
            }
            final String problem = rxHeader.validate(FrameDescriptor.MAX_CONTROL_PAYLOAD);
            if (problem != null)
            {
                frameErrors.increment();
                throw new ProtocolException("bad frame from " + connection.remoteAddress() + ": " + problem);
            }
            headerDone = true;
            rxPayload.clear().limit(rxHeader.payloadLength());
        }
        if (!connection.receivePayload(rxPayload))
        {
            return null;
        }
        headerDone = false;
        rxPayload.flip();
        if (!rxHeader.payloadMatches(rxPayload))
        {
            frameErrors.increment();
            throw new ProtocolException("control frame payload CRC mismatch from " + connection.remoteAddress());
        }
        final byte[] bytes = new byte[rxPayload.remaining()];
        rxPayload.get(bytes);
        return new Frame(rxHeader.type(), bytes);
    }

    int sessionIdOfLastFrame()
    {
        return rxHeader.sessionId();
    }

    static String text(final byte[] bytes)
    {
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
