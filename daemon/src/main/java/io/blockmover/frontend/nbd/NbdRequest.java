package io.blockmover.frontend.nbd;

import java.nio.ByteBuffer;

/**
 * One request slot of a connection, built when transmission starts and reused for every request: the connection's
 * reader fills it (and, for WRITE, its buffer with the payload), a worker executes it and sends the reply from it,
 * then queues its reply; whoever writes the reply hands the slot back to the reader. Whoever holds the slot owns
 * every field; the hand-overs through a {@link RequestRing} and the connection's reply queue order the accesses. A
 * write the export deferred is held by the export until it calls {@link #complete(int)}, which queues its reply.
 */
final class NbdRequest implements WriteCompletion
{
    /** Where a deferred write's completion goes. */
    private final NbdConnection owner;
    /** Payload of a WRITE or data of a READ, aligned to 4096, from position 0. */
    final ByteBuffer buffer;
    /** The reply's header: a simple reply, or a structured chunk's header with its first fields. */
    final ByteBuffer replyHeader;
    /** This slot's number in its connection, 0 to slots-1: its Linux AIO slot too. */
    final int slot;

    int type;
    int flags;
    long cookie;
    long offset;
    long length;
    /** A BLOCK_STATUS reply's payload length, in {@link #buffer}. */
    int statusLength;
    /** NBD error code to reply with; 0 while the request is valid and has not failed. */
    int error;
    /** The reply carries READ data: {@link #buffer} from 0 to the length. Set when the reply is queued. */
    boolean withData;
    /** The export deferred this WRITE: its reply ends a deferral (see NbdConnection). */
    boolean deferred;
    /** What the export does around this slot's READs and WRITEs submitted through Linux AIO; null when nothing. */
    DirectIo directIo;

    NbdRequest(final NbdConnection owner, final int slot, final ByteBuffer buffer)
    {
        this.owner = owner;
        this.slot = slot;
        this.buffer = buffer;
        this.replyHeader = ByteBuffer.allocateDirect(NbdProtocol.MAX_REPLY_HEADER_LENGTH);
    }

    @Override
    public void complete(final int error)
    {
        owner.deferredDone(this, error);
    }

    @Override
    public void dispatch()
    {
        owner.wakeReplier();
    }
}
