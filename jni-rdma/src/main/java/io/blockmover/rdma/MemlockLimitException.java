package io.blockmover.rdma;

import io.blockmover.rdma.verbs.Errno;
import io.blockmover.rdma.verbs.RdmaException;

/**
 * Registering memory would exceed {@code RLIMIT_MEMLOCK}: the message names the limit, the bytes needed and the
 * fix ({@code LimitMEMLOCK=} in the systemd unit, or {@code ulimit -l}).
 */
public final class MemlockLimitException extends RdmaException
{
    private static final long serialVersionUID = 1L;

    private final long limitBytes;
    private final long requiredBytes;

    MemlockLimitException(final long limitBytes, final long requiredBytes, final long alreadyRegisteredBytes)
    {
        super("ibv_reg_mr", Errno.ENOMEM, "RLIMIT_MEMLOCK " + limitBytes + " < " + requiredBytes +
            " bytes to register (" + alreadyRegisteredBytes + " already registered by this process): " +
            "set LimitMEMLOCK= in the unit or ulimit -l", null);
        this.limitBytes = limitBytes;
        this.requiredBytes = requiredBytes;
    }

    /**
     * The soft limit in force.
     *
     * @return bytes.
     */
    public long limitBytes()
    {
        return limitBytes;
    }

    /**
     * Pinned bytes the process would need, including what it already registered.
     *
     * @return bytes.
     */
    public long requiredBytes()
    {
        return requiredBytes;
    }
}
