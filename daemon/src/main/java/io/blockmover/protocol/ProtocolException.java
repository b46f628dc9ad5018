package io.blockmover.protocol;

import java.io.IOException;

/**
 * A peer sent something the protocol does not allow: a damaged header, a frame of another session, a chunk
 * outside the volume. The connection is dropped and counted; the job reconnects, since a damaged link is the
 * usual cause and a new connection cures it.
 */
public final class ProtocolException extends IOException
{
    private static final long serialVersionUID = 1L;

    public ProtocolException(final String message)
    {
        super(message);
    }
}
