package io.blockmover.rdma;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;

import com.sun.jna.Native;
import io.blockmover.rdma.verbs.LibC;
import io.blockmover.rdma.verbs.RdmaException;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Checks registrations against {@code RLIMIT_MEMLOCK} before {@code ibv_reg_mr} pins pages, so that a too-low
 * limit is reported as a start-up error naming the fix instead of a bare ENOMEM.
 * <p>
 * The kernel charges pinned pages to the process and waives the limit for CAP_IPC_LOCK, so the check counts
 * page-rounded bytes registered by this process through {@link RdmaDevice} and skips the limit when the
 * capability is effective. Thread-safe.
 */
public final class MemlockLimit
{
    /** Bit of CAP_IPC_LOCK in the capability sets of /proc/self/status. */
    private static final int CAP_IPC_LOCK = 14;
    private static final long PAGE_SIZE = 4096;
    private static final AtomicLong REGISTERED_BYTES = new AtomicLong();

    private MemlockLimit()
    {
    }

    /**
     * The soft {@code RLIMIT_MEMLOCK} of this process.
     *
     * @return bytes, or {@link Long#MAX_VALUE} when unlimited.
     */
    public static long softLimitBytes()
    {
        final UnsafeBuffer rlimit = new UnsafeBuffer(BufferUtil.allocateDirectAligned(LibC.RLIMIT_LENGTH, 8));
        if (0 != LibC.getrlimit(LibC.RLIMIT_MEMLOCK, rlimit.addressOffset()))
        {
            throw new RdmaException("getrlimit", Native.getLastError(), "RLIMIT_MEMLOCK");
        }

        final long soft = rlimit.getLong(LibC.RLIMIT_CUR_OFFSET);
        return LibC.RLIM_INFINITY == soft ? Long.MAX_VALUE : soft;
    }

    /**
     * Whether the process may pin memory regardless of the limit.
     *
     * @return true if CAP_IPC_LOCK is in the effective capability set.
     */
    public static boolean hasIpcLock()
    {
        try
        {
            for (final String line : Files.readAllLines(Path.of("/proc/self/status")))
            {
                if (line.startsWith("CapEff:"))
                {
                    final long caps = Long.parseUnsignedLong(line.substring("CapEff:".length()).trim(), 16);
                    return 0 != (caps & (1L << CAP_IPC_LOCK));
                }
            }
        }
        catch (final IOException | NumberFormatException ex)
        {
            return false;
        }

        return false;
    }

    /**
     * Bytes the kernel charges for pinning a range: whole pages.
     *
     * @param address start.
     * @param length  bytes.
     * @return page-rounded bytes.
     */
    public static long pinnedBytes(final long address, final long length)
    {
        final long first = address & -PAGE_SIZE;
        final long end = (address + length + PAGE_SIZE - 1) & -PAGE_SIZE;
        return end - first;
    }

    /**
     * Fail with a message naming the fix if pinning {@code bytesToRegister} more would exceed the limit.
     *
     * @param alreadyRegisteredBytes pinned by this process so far.
     * @param bytesToRegister        about to be pinned.
     * @param softLimitBytes         the limit, {@link Long#MAX_VALUE} for unlimited.
     * @param ipcLock                whether the process has CAP_IPC_LOCK.
     * @throws MemlockLimitException if the registration would fail.
     */
    public static void check(
        final long alreadyRegisteredBytes, final long bytesToRegister, final long softLimitBytes, final boolean ipcLock)
    {
        final long required = alreadyRegisteredBytes + bytesToRegister;
        if (!ipcLock && required > softLimitBytes)
        {
            throw new MemlockLimitException(softLimitBytes, required, alreadyRegisteredBytes);
        }
    }

    static void checkAndReserve(final long bytesToRegister)
    {
        check(REGISTERED_BYTES.get(), bytesToRegister, softLimitBytes(), hasIpcLock());
        REGISTERED_BYTES.addAndGet(bytesToRegister);
    }

    static void release(final long bytes)
    {
        REGISTERED_BYTES.addAndGet(-bytes);
    }

    /**
     * Page-rounded bytes currently registered by this process through {@link RdmaDevice}.
     *
     * @return bytes.
     */
    public static long registeredBytes()
    {
        return REGISTERED_BYTES.get();
    }
}
