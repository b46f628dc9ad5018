package io.blockmover.frontend.nbd;

import java.nio.ByteBuffer;

/**
 * One request slot of a connection, built when transmission starts and reused for every request: the connection's
 * reader fills it (and, for WRITE, its buffer with the payload), a worker executes it and sends the reply from it,
 * then hands it back to the reader. Whoever holds the slot owns every field; the hand-over through a
 * {@link RequestRing} orders the accesses. A write the export deferred is held by the export until it calls
 * {@link #complete(int)}, which hands the slot to the connection's replier through a queue that orders them too.
 */
final class NbdRequest implements WriteCompletion
{
    /** Where a deferred write's completion goes. */
    private final NbdConnection owner;
    /** Payload of a WRITE or data of a READ, aligned to 4096, from position 0. */
    final ByteBuffer buffer;
    /** The 16-byte simple reply. */
    final ByteBuffer replyHeader;
    /** Reply header and READ data, for one gathering write. */
    final ByteBuffer[] replyWithData;

    int type;
    int flags;
    long cookie;
    long offset;
    long length;
    /** NBD error code to reply with; 0 while the request is valid and has not failed. */
    int error;

    NbdRequest(final NbdConnection owner, final ByteBuffer buffer)
    {
        this.owner = owner;
        this.buffer = buffer;
        this.replyHeader = ByteBuffer.allocateDirect(NbdProtocol.SIMPLE_REPLY_LENGTH);
        this.replyWithData = new ByteBuffer[] {replyHeader, buffer};
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
