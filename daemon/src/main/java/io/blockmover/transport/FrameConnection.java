package io.blockmover.transport;

import java.io.IOException;
import java.nio.ByteBuffer;

import io.blockmover.protocol.FrameHeader;

/**
 * One connection to a peer that moves frames (a {@link io.blockmover.protocol.FrameDescriptor} header and a
 * payload), whatever carries them. Non-blocking: every call does what it can now and says whether it finished.
 * One frame is handed over at a time, one received at a time; a transport may have several on the wire.
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
     * connection has released it: until {@link #framesReleased()} counts this frame.
     *
     * @param header  sealed frame header.
     * @param payload payload or null.
     * @return false when a previous frame still waits to be handed to the transport (call {@link #flush()}).
     */
    boolean startSend(FrameHeader header, ByteBuffer payload);

    /**
     * Moves pending bytes of the frame being sent.
     *
     * @return true when nothing waits to be handed to the transport, so the next {@link #startSend} is accepted.
     *         A payload the transport reads later without a copy (RDMA from registered memory) may still be in use:
     *         {@link #framesReleased()} says when it is not.
     * @throws IOException when the connection failed.
     */
    boolean flush() throws IOException;

    /**
     * @return frames {@link #startSend} accepted so far on this connection, whoever sent them (the conductor's
     *         handshake included): the number the next accepted frame gets.
     */
    long framesStarted();

    /**
     * Frames are numbered from 0 in the order {@link #startSend} accepted them. Sends complete in that order, so
     * their release is a count: every frame below it no longer has its payload read, and the caller may reuse
     * that memory. Over TCP a frame is released once the socket took all of it; over RDMA a payload sent from
     * registered memory without a copy is released at its send completion, so several can be on the wire at once.
     * As of the last call to {@link #flush()} or a receive; allocates nothing.
     *
     * @return how many of the frames started so far are released.
     */
    long framesReleased();

    /**
     * Holds small frames started from now on, to go out together at {@link #uncork()}, or when the room to hold
     * them is full: a sender that starts many frames in one duty cycle pays one system call for all of them.
     * While corked, {@link #flush()} returns true without sending what is held. Owner thread. The default holds
     * nothing back.
     */
    default void cork()
    {
    }

    /**
     * Ends {@link #cork()}: what is held starts to go out now.
     *
     * @return as {@link #flush()}: whether everything started has been handed to the transport.
     * @throws IOException when the connection failed.
     */
    default boolean uncork() throws IOException
    {
        return flush();
    }

    /**
     * @return whether the send side ({@link #startSend}, {@link #flush()}, {@link #cork()}, {@link #uncork()},
     * {@link #isSendPending()}) may be driven by any thread, one at a time under the caller's lock, while the owner
     * thread receives and waits in {@link #awaitIo(long)}. False by default: a transport whose sends complete
     * through the same queue its receives are polled from (RDMA) keeps both on its owner thread.
     */
    default boolean sendsFromAnyThread()
    {
        return false;
    }

    /**
     * @return whether a frame waits to be handed to the transport (partly sent over TCP; no free send buffer over
     *         RDMA).
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
