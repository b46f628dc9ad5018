package io.blockmover.rdma.verbs;

/**
 * This host cannot do RDMA at all: the kernel has no RDMA support (libibverbs reports ENOSYS), no RDMA device
 * exists (librdmacm reports ENODEV), or the user-space libraries are not installed.
 * <p>
 * The message says so plainly, so that the operator picks the TCP transport or fixes the host instead of
 * debugging errno values.
 */
public class RdmaUnavailableException extends RdmaException
{
    private static final long serialVersionUID = 1L;

    /**
     * The kernel or the device set rejected a probe call.
     *
     * @param functionName the C function that failed.
     * @param errno        ENOSYS or ENODEV, usually.
     * @param detail       what was being attempted.
     */
    public RdmaUnavailableException(final String functionName, final int errno, final String detail)
    {
        super(functionName, errno, "no RDMA device/kernel support on this host: " +
            format(functionName, errno, detail) +
            " (needs a kernel with CONFIG_INFINIBAND, an RDMA device such as rxe/siw/mlx5, and rdma-core)", null);
    }

    /**
     * The user-space libraries cannot be loaded.
     *
     * @param library the shared library that is missing, e.g. {@code libibverbs.so.1}.
     * @param packages the Debian packages that provide it.
     * @param cause   the linkage failure.
     */
    public RdmaUnavailableException(final String library, final String packages, final Throwable cause)
    {
        super("dlopen", 0, "no RDMA user-space support on this host: cannot load " + library + " (install " +
            packages + "): " + cause.getMessage(), cause);
    }
}
