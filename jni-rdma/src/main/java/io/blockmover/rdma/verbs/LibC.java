package io.blockmover.rdma.verbs;

import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

/**
 * The few libc functions the RDMA layer needs: making the rdma_cm event and completion channels non-blocking,
 * waiting on them with {@code poll} (an eventfd ends a wait early), and reading {@code RLIMIT_MEMLOCK}, which
 * bounds how much memory {@code ibv_reg_mr} may pin.
 * <p>
 * Direct-mapped; errors leave errno in {@code Native.getLastError()}. Thread-safe.
 */
public final class LibC
{
    /** {@code fcntl} command: get file status flags. */
    public static final int F_GETFL = 3;
    /** {@code fcntl} command: set file status flags. */
    public static final int F_SETFL = 4;
    /** File status flag: non-blocking I/O. */
    public static final int O_NONBLOCK = 2048;
    /** {@code getrlimit} resource: bytes of memory that may be locked (pinned) into RAM. */
    public static final int RLIMIT_MEMLOCK = 8;
    /** {@code rlim_t} value meaning no limit. */
    public static final long RLIM_INFINITY = -1L;
    /** Offset of {@code rlim_cur} (the soft limit) in {@code struct rlimit}. */
    public static final int RLIMIT_CUR_OFFSET = 0;
    /** Offset of {@code rlim_max} (the hard limit) in {@code struct rlimit}. */
    public static final int RLIMIT_MAX_OFFSET = 8;
    /** {@code sizeof(struct rlimit)}. */
    public static final int RLIMIT_LENGTH = 16;
    /** {@code poll} event: data to read. */
    public static final int POLLIN = 1;
    /** {@code sizeof(struct pollfd)}: int fd, short events, short revents. */
    public static final int POLLFD_LENGTH = 8;
    /** Offset of {@code events} in {@code struct pollfd}. */
    public static final int POLLFD_EVENTS_OFFSET = 4;
    /** Offset of {@code revents} in {@code struct pollfd}. */
    public static final int POLLFD_REVENTS_OFFSET = 6;
    /** {@code eventfd} flag: non-blocking. */
    public static final int EFD_NONBLOCK = 2048;
    /** {@code eventfd} flag: close on exec. */
    public static final int EFD_CLOEXEC = 524288;

    static
    {
        Native.register(LibC.class, NativeLibrary.getInstance("c"));
    }

    private LibC()
    {
    }

    /**
     * {@code int fcntl(int fd, int cmd, int arg)}: only the integer-argument commands are used.
     *
     * @param fd  file descriptor.
     * @param cmd command, e.g. {@link #F_SETFL}.
     * @param arg integer argument.
     * @return result of the command, -1 with errno on failure.
     */
    public static native int fcntl(int fd, int cmd, int arg);

    /**
     * {@code int poll(struct pollfd *fds, nfds_t nfds, int timeout)}: blocks the calling thread in native code.
     *
     * @param fds     address of {@code nfds} pollfd structures.
     * @param nfds    how many.
     * @param timeout milliseconds, -1 for none.
     * @return descriptors ready, 0 on time-out, -1 with errno.
     */
    public static native int poll(long fds, long nfds, int timeout);

    /**
     * {@code int eventfd(unsigned int initval, int flags)}.
     *
     * @param initval initial counter.
     * @param flags   {@link #EFD_NONBLOCK}, {@link #EFD_CLOEXEC}.
     * @return file descriptor or -1 with errno.
     */
    public static native int eventfd(int initval, int flags);

    /**
     * {@code ssize_t read(int fd, void *buf, size_t count)}.
     *
     * @param fd    file descriptor.
     * @param buf   address.
     * @param count bytes.
     * @return bytes read or -1 with errno.
     */
    public static native long read(int fd, long buf, long count);

    /**
     * {@code ssize_t write(int fd, const void *buf, size_t count)}.
     *
     * @param fd    file descriptor.
     * @param buf   address.
     * @param count bytes.
     * @return bytes written or -1 with errno.
     */
    public static native long write(int fd, long buf, long count);

    /**
     * {@code int close(int fd)}.
     *
     * @param fd file descriptor.
     * @return 0 or -1 with errno.
     */
    public static native int close(int fd);

    /**
     * {@code int getrlimit(int resource, struct rlimit *rlim)}.
     *
     * @param resource e.g. {@link #RLIMIT_MEMLOCK}.
     * @param rlimit   address of {@link #RLIMIT_LENGTH} bytes to fill.
     * @return 0 or -1 with errno.
     */
    public static native int getrlimit(int resource, long rlimit);

    /**
     * {@code char *strerror(int errnum)}.
     *
     * @param errnum errno value.
     * @return description.
     */
    public static native String strerror(int errnum);

    /**
     * Put a file descriptor into non-blocking mode, keeping its other flags.
     *
     * @param fd       file descriptor.
     * @param forWhat  names the descriptor in an error message.
     * @throws RdmaException if fcntl fails.
     */
    public static void setNonBlocking(final int fd, final String forWhat)
    {
        final int flags = fcntl(fd, F_GETFL, 0);
        if (flags < 0)
        {
            throw new RdmaException("fcntl", Native.getLastError(), "F_GETFL on " + forWhat + " fd " + fd);
        }
        if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        {
            throw new RdmaException("fcntl", Native.getLastError(), "F_SETFL O_NONBLOCK on " + forWhat + " fd " + fd);
        }
    }
}
