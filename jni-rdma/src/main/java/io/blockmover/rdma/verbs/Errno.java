package io.blockmover.rdma.verbs;

/**
 * The Linux errno values that libibverbs and librdmacm report, with their symbolic names.
 * <p>
 * Values are checked against {@code <errno.h>} by the layout test. Thread-safe: stateless.
 */
public final class Errno
{
    public static final int EPERM = 1;
    public static final int ENOENT = 2;
    public static final int EINTR = 4;
    public static final int EIO = 5;
    public static final int ENXIO = 6;
    public static final int EBADF = 9;
    public static final int EAGAIN = 11;
    public static final int ENOMEM = 12;
    public static final int EACCES = 13;
    public static final int EFAULT = 14;
    public static final int EBUSY = 16;
    public static final int EEXIST = 17;
    public static final int ENODEV = 19;
    public static final int EINVAL = 22;
    public static final int EMFILE = 24;
    public static final int ENOSPC = 28;
    public static final int ERANGE = 34;
    public static final int ENOSYS = 38;
    public static final int ENODATA = 61;
    public static final int ETIME = 62;
    public static final int EPROTO = 71;
    public static final int EOPNOTSUPP = 95;
    public static final int EADDRINUSE = 98;
    public static final int EADDRNOTAVAIL = 99;
    public static final int ENETDOWN = 100;
    public static final int ENETUNREACH = 101;
    public static final int ECONNABORTED = 103;
    public static final int ECONNRESET = 104;
    public static final int ENOBUFS = 105;
    public static final int ENOTCONN = 107;
    public static final int ETIMEDOUT = 110;
    public static final int ECONNREFUSED = 111;
    public static final int EHOSTUNREACH = 113;
    public static final int EALREADY = 114;
    public static final int EINPROGRESS = 115;

    private static final String[] NAMES = new String[134];

    static
    {
        name(EPERM, "EPERM");
        name(ENOENT, "ENOENT");
        name(EINTR, "EINTR");
        name(EIO, "EIO");
        name(ENXIO, "ENXIO");
        name(EBADF, "EBADF");
        name(EAGAIN, "EAGAIN");
        name(ENOMEM, "ENOMEM");
        name(EACCES, "EACCES");
        name(EFAULT, "EFAULT");
        name(EBUSY, "EBUSY");
        name(EEXIST, "EEXIST");
        name(ENODEV, "ENODEV");
        name(EINVAL, "EINVAL");
        name(EMFILE, "EMFILE");
        name(ENOSPC, "ENOSPC");
        name(ERANGE, "ERANGE");
        name(ENOSYS, "ENOSYS");
        name(ENODATA, "ENODATA");
        name(ETIME, "ETIME");
        name(EPROTO, "EPROTO");
        name(EOPNOTSUPP, "EOPNOTSUPP");
        name(EADDRINUSE, "EADDRINUSE");
        name(EADDRNOTAVAIL, "EADDRNOTAVAIL");
        name(ENETDOWN, "ENETDOWN");
        name(ENETUNREACH, "ENETUNREACH");
        name(ECONNABORTED, "ECONNABORTED");
        name(ECONNRESET, "ECONNRESET");
        name(ENOBUFS, "ENOBUFS");
        name(ENOTCONN, "ENOTCONN");
        name(ETIMEDOUT, "ETIMEDOUT");
        name(ECONNREFUSED, "ECONNREFUSED");
        name(EHOSTUNREACH, "EHOSTUNREACH");
        name(EALREADY, "EALREADY");
        name(EINPROGRESS, "EINPROGRESS");
    }

    private Errno()
    {
    }

    private static void name(final int errno, final String name)
    {
        NAMES[errno] = name;
    }

    /**
     * Symbolic name of an errno value.
     *
     * @param errno the value, as returned by {@code com.sun.jna.Native.getLastError()} or a verb.
     * @return the name, e.g. {@code "ENODEV"}, or {@code "errno 42"} for values without a name here.
     */
    public static String name(final int errno)
    {
        final String name = errno > 0 && errno < NAMES.length ? NAMES[errno] : null;
        return null != name ? name : "errno " + errno;
    }

    /**
     * The C library's description of an errno value.
     *
     * @param errno the value.
     * @return the text of {@code strerror(errno)}, or the symbolic name if libc cannot be reached.
     */
    public static String message(final int errno)
    {
        try
        {
            return LibC.strerror(errno);
        }
        catch (final LinkageError ex)
        {
            return name(errno);
        }
    }
}
