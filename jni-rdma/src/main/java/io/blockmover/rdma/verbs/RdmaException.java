package io.blockmover.rdma.verbs;

/**
 * A libibverbs or librdmacm call failed: carries the C function name and the errno it reported.
 * <p>
 * Unchecked, like Aeron's exceptions: RDMA failures are either start-up errors that name their fix or
 * connection failures the owner handles by closing the endpoint.
 */
public class RdmaException extends RuntimeException
{
    private static final long serialVersionUID = 1L;

    private final String functionName;
    private final int errno;

    /**
     * Exception for a failed C call.
     *
     * @param functionName the C function that failed, e.g. {@code "rdma_resolve_addr"}.
     * @param errno        the errno it reported, 0 if none.
     * @param detail       what was being attempted, in the caller's terms.
     */
    public RdmaException(final String functionName, final int errno, final String detail)
    {
        super(format(functionName, errno, detail));
        this.functionName = functionName;
        this.errno = errno;
    }

    /**
     * Exception with a message of its own, for failures the verbs report without errno (e.g. a CM event
     * status), while still naming the C function.
     *
     * @param functionName the C function or event involved.
     * @param errno        the errno-like status, 0 if none.
     * @param message      complete message.
     * @param cause        underlying failure, or null.
     */
    protected RdmaException(final String functionName, final int errno, final String message, final Throwable cause)
    {
        super(message, cause);
        this.functionName = functionName;
        this.errno = errno;
    }

    /**
     * Map a failed call to the most precise exception: {@link RdmaUnavailableException} when errno says the kernel
     * has no RDMA support or no RDMA device (ENOSYS from libibverbs, ENODEV from librdmacm's event channel).
     *
     * @param functionName the C function that failed.
     * @param errno        the errno it reported.
     * @param detail       what was being attempted.
     * @return the exception to throw.
     */
    public static RdmaException of(final String functionName, final int errno, final String detail)
    {
        if (Errno.ENOSYS == errno ||
            (Errno.ENODEV == errno && ("rdma_create_event_channel".equals(functionName) ||
            "rdma_get_devices".equals(functionName) || "ibv_get_device_list".equals(functionName))))
        {
            return new RdmaUnavailableException(functionName, errno, detail);
        }

        return new RdmaException(functionName, errno, detail);
    }

    /**
     * The C function that failed.
     *
     * @return e.g. {@code "ibv_reg_mr"}.
     */
    public String functionName()
    {
        return functionName;
    }

    /**
     * The errno the function reported.
     *
     * @return errno, or 0 if none was reported.
     */
    public int errno()
    {
        return errno;
    }

    static String format(final String functionName, final int errno, final String detail)
    {
        final StringBuilder sb = new StringBuilder(128).append(functionName).append(" failed");
        if (0 != errno)
        {
            sb.append(": ").append(Errno.name(errno)).append(" (").append(Errno.message(errno)).append(')');
        }
        if (null != detail && !detail.isEmpty())
        {
            sb.append(": ").append(detail);
        }

        return sb.toString();
    }
}
