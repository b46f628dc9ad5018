package io.blockmover.frontend.nbd;

import java.io.IOException;

/**
 * An I/O failure that a back end wants the client to see with a specific NBD error code (see the
 * {@code NBD_E*} constants in {@link NbdProtocol}); any other {@link IOException} reaches the client as EIO.
 */
public class NbdErrorException extends IOException
{
    private static final long serialVersionUID = 1L;

    private final int errorCode;

    /**
     * @param errorCode NBD error code, e.g. {@link NbdProtocol#NBD_ENOSPC}.
     * @param message   for the log.
     */
    public NbdErrorException(final int errorCode, final String message)
    {
        super(message);
        this.errorCode = errorCode;
    }

    /**
     * @param errorCode NBD error code.
     * @param message   for the log.
     * @param cause     underlying failure.
     */
    public NbdErrorException(final int errorCode, final String message, final Throwable cause)
    {
        super(message, cause);
        this.errorCode = errorCode;
    }

    /**
     * @return the NBD error code sent to the client.
     */
    public int errorCode()
    {
        return errorCode;
    }
}
