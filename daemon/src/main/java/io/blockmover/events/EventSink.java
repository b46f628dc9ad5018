package io.blockmover.events;

/**
 * Where the {@link EventBus} writes one subscriber's lines: in the daemon, a client of the control socket.
 * Conductor thread only.
 */
public interface EventSink
{
    /**
     * Queues a line (a complete JSON object and its newline) without blocking.
     *
     * @param line bytes to send; shared between subscribers, never modified.
     */
    void send(byte[] line);

    /**
     * @return bytes queued and not yet taken by the subscriber.
     */
    long pendingBytes();

    /**
     * Closes the connection once the queued lines are written.
     */
    void closeAfterFlush();

    /**
     * @return whether the subscriber went away.
     */
    boolean isClosed();
}
