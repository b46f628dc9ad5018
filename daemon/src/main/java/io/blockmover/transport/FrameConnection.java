package io.blockmover.transport;

import java.io.IOException;
import java.nio.ByteBuffer;

import io.blockmover.protocol.FrameHeader;

/**
 * One connection to a peer that moves frames (a {@link io.blockmover.protocol.FrameDescriptor} header and a
 * payload), whatever carries them. Non-blocking: every call does what it can now and says whether it finished.
 * One frame is sent at a time, one received at a time.
 * <p>
 * Threading: at any moment one thread drives the connection (the conductor during the handshake, then the
 * session's network agent); the hand-over happens through a volatile publication of the session.
 */
public interface FrameConnection extends AutoCloseable
{
    /**
     * @return the transport's name as shown to operators ("tcp", "rdma").
     */
    String transportName();

    /**
     * @return the peer's address, for logs and status.
     */
    String remoteAddress();

    /**
     * Starts sending a frame. The header must be sealed; the payload, when there is one, is read from its
     * position up to its limit (a view into a log or slot, so no copy is needed) and must not change until the
     * send completes.
     *
     * @param header  sealed frame header.
     * @param payload payload or null.
     * @return false when a previous frame is still being sent (call {@link #flush()}).
     */
    boolean startSend(FrameHeader header, ByteBuffer payload);

    /**
     * Moves pending bytes of the frame being sent.
     *
     * @return true when nothing remains to send.
     * @throws IOException when the connection failed.
     */
    boolean flush() throws IOException;

    /**
     * @return whether a frame is partly sent.
     */
    boolean isSendPending();

    /**
     * Receives the next header into {@code header}. Call again until it returns true; then read the payload, if
     * any, with {@link #receivePayload(ByteBuffer)} before the next header.
     *
     * @param header to fill.
     * @return true when a whole header has arrived.
     * @throws IOException when the connection failed or the peer closed it.
     */
    boolean receiveHeader(FrameHeader header) throws IOException;

    /**
     * Receives payload bytes into {@code dst} from its position up to its limit.
     *
     * @param dst buffer for the payload.
     * @return true when dst is full.
     * @throws IOException when the connection failed or the peer closed it.
     */
    boolean receivePayload(ByteBuffer dst) throws IOException;

    /**
     * Blocks until the connection can make progress (bytes to read, or room for a pending send), until
     * {@link #wakeup()} is called, or until the timeout passes: how a network agent idles without spinning on
     * system calls. Owner thread only; allocates nothing. A transport must override it; the default only yields,
     * which suits test doubles driven by hand.
     *
     * @param timeoutMs longest wait in milliseconds.
     * @throws IOException when the connection failed.
     */
    default void awaitIo(long timeoutMs) throws IOException
    {
        Thread.yield();
    }

    /**
     * Ends a current or the next {@link #awaitIo(long)} at once: a stage that handed the owner work calls it.
     * Any thread. The default does nothing, for transports whose {@link #awaitIo(long)} does not block.
     */
    default void wakeup()
    {
    }

    /**
     * @return bytes sent so far.
     */
    long bytesSent();

    /**
     * @return bytes received so far.
     */
    long bytesReceived();

    /**
     * Closes the connection at once; never blocks, never throws.
     */
    @Override
    void close();
}
