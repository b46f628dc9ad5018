package io.blockmover;

/**
 * A failure with a stable {@link ErrorCode} and a message that names the fix where there is one.
 */
public class BlockmoverException extends RuntimeException
{
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;

    public BlockmoverException(final ErrorCode code, final String message)
    {
        super(message);
        this.code = code;
    }

    public BlockmoverException(final ErrorCode code, final String message, final Throwable cause)
    {
        super(message, cause);
        this.code = code;
    }

    public ErrorCode code()
    {
        return code;
    }
}
