package io.blockmover.conductor;

import java.io.IOException;

import io.blockmover.ErrorCode;

/**
 * A peer's explicit refusal (wrong key, volume too small, unknown group): final for a new job or group, retried
 * with back-off for a persisted one because the operator may fix the other side.
 */
final class PeerRefusal extends IOException
{
    private static final long serialVersionUID = 1L;
    private final ErrorCode code;

    PeerRefusal(final ErrorCode code, final String message)
    {
        super(message);
        this.code = code;
    }

    ErrorCode code()
    {
        return code;
    }
}
