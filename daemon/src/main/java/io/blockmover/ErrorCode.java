package io.blockmover;

/**
 * Stable error codes of the control API and the CLI. Scripts match on these names: never rename one.
 */
public enum ErrorCode
{
    BAD_REQUEST(4),
    NOT_FOUND(4),
    NOT_A_VOLUME(4),
    VOLUME_IN_USE(4),
    VOLUME_TOO_SMALL(4),
    MISALIGNED_SIZE(4),
    PERMISSION_DENIED(4),
    UNKNOWN_PEER(4),
    NO_SUCH_JOB(4),
    NO_SUCH_GROUP(4),
    GROUP_EXISTS(4),
    INVALID_STATE(4),
    CONFIG_INVALID(4),
    AUTH_FAILED(5),
    PEER_UNREACHABLE(5),
    PROTOCOL_ERROR(5),
    BUSY(5),
    /** The peer is writing a new group's log: the OPEN is sent again until it is done. */
    PREPARING(5),
    IO_ERROR(1),
    VERIFY_MISMATCH(1),
    CANCELLED(1),
    INTERNAL(1),
    DAEMON_NOT_RUNNING(3),
    /**
     * blockmoverd is starting and checks its groups' logs first (seconds to minutes for logs of many GiB): it
     * answers every request so, with how far it is, until it serves them.
     */
    STARTING(3);

    private final int exitCode;

    ErrorCode(final int exitCode)
    {
        this.exitCode = exitCode;
    }

    /**
     * @return the exit status of the blockmover command when a request fails with this code.
     */
    public int exitCode()
    {
        return exitCode;
    }

    /**
     * @param name from the wire.
     * @return the code, or INTERNAL when the name is unknown (a newer daemon).
     */
    public static ErrorCode parse(final String name)
    {
        for (final ErrorCode code : values())
        {
            if (code.name().equals(name))
            {
                return code;
            }
        }
        return INTERNAL;
    }
}
