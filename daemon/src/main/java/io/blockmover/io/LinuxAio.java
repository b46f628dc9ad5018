package io.blockmover.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import com.sun.jna.LastErrorException;
import com.sun.jna.Native;

import org.agrona.BufferUtil;

/**
 * One Linux AIO context ({@code io_setup}): O_DIRECT reads and writes handed to the kernel many per system call
 * and reaped many per system call. Why: on a virtual machine each submission that reaches the disk rings its
 * doorbell, a trap to the hypervisor, and a thread blocked in its own pwrite is a wake-up per write. Submitted
 * together, one doorbell and one wake-up serve a batch (fio, 4k QD16 on one CPU of this VM: 46-49k IOPS at 17-19
 * us of CPU each submitted one by one, 78-101k at 5-6 us sixteen at a time).
 * <p>
 * Slots: the caller numbers its operations 0 to capacity-1, fills a slot with {@link #prepare}, queues it with
 * {@link #queue}, hands the queued ones to the kernel with {@link #submit()}, and learns their outcome from
 * {@link #reap}. The control blocks and events live in native memory owned here, so nothing allocates per
 * operation. Threading: one thread prepares, queues and submits; one other may reap. {@link #close()} once neither
 * will call again and nothing is in flight.
 * <p>
 * Direct system calls through JNA, as glibc has no wrappers (libaio is a separate library and not everywhere).
 */
public final class LinuxAio implements AutoCloseable
{
    /** Sizes and offsets of {@code struct iocb} and {@code struct io_event} (linux/aio_abi.h, little-endian). */
    private static final int IOCB_LENGTH = 64;
    private static final int EVENT_LENGTH = 32;
    private static final int IOCB_DATA = 0;
    private static final int IOCB_RW_FLAGS = 12;
    private static final int IOCB_OPCODE = 16;
    private static final int IOCB_FD = 20;
    private static final int IOCB_BUF = 24;
    private static final int IOCB_NBYTES = 32;
    private static final int IOCB_OFFSET = 40;
    private static final int EVENT_DATA = 0;
    private static final int EVENT_RES = 16;

    private static final short IOCB_CMD_PREAD = 0;
    private static final short IOCB_CMD_PWRITE = 1;
    /** RWF_DSYNC: the write is durable, with what it needs to be found, when it completes (FUA, for a disk). */
    private static final int RWF_DSYNC = 2;

    private static final int EINTR = 4;
    private static final int EAGAIN = 11;
    private static final int EFAULT = 14;

    /** System call numbers, or null where they are not known: AIO is then not {@link #isAvailable()}. */
    private static final long[] NUMBERS = numbers(System.getProperty("os.arch"));
    private static final int IO_SETUP = 0;
    private static final int IO_DESTROY = 1;
    private static final int IO_SUBMIT = 2;
    private static final int IO_GETEVENTS = 3;

    static
    {
        if (NUMBERS != null)
        {
            Native.register(LinuxAio.class, "c");
        }
    }

    private final int capacity;
    /** The kernel's context id, written by io_setup into the first 8 bytes of this. */
    private final ByteBuffer context;
    private final long contextId;
    private final ByteBuffer iocbs;
    private final long iocbsAddress;
    /** Pointers to the queued control blocks, in queue order: io_submit's argument. */
    private final ByteBuffer queue;
    private final long queueAddress;
    private final ByteBuffer events;
    private final long eventsAddress;
    /** {@code struct timespec} for io_getevents. */
    private final ByteBuffer timeout;
    private final long timeoutAddress;
    /** Queued and not yet submitted: the first {@code queued} pointers of {@link #queue}. */
    private int queued;
    private boolean closed;

    /**
     * @param capacity most operations in flight at once; slots are 0 to capacity-1.
     * @throws IOException when the kernel refuses a context (fs.aio-max-nr reached: see /proc/sys/fs/aio-nr).
     */
    public LinuxAio(final int capacity) throws IOException
    {
        if (!isAvailable())
        {
            throw new IOException("Linux AIO system call numbers unknown on " + System.getProperty("os.arch"));
        }
        this.capacity = capacity;
        context = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder());
        try
        {
            syscall(NUMBERS[IO_SETUP], capacity, BufferUtil.address(context), 0, 0, 0);
        }
        catch (final LastErrorException ex)
        {
            throw new IOException("io_setup(" + capacity + ") failed: errno " + ex.getErrorCode() +
                (ex.getErrorCode() == EAGAIN ? " (fs.aio-max-nr reached: raise it with sysctl)" : ""));
        }
        contextId = context.getLong(0);
        iocbs = ByteBuffer.allocateDirect(capacity * IOCB_LENGTH).order(ByteOrder.nativeOrder());
        iocbsAddress = BufferUtil.address(iocbs);
        queue = ByteBuffer.allocateDirect(capacity * 8).order(ByteOrder.nativeOrder());
        queueAddress = BufferUtil.address(queue);
        events = ByteBuffer.allocateDirect(capacity * EVENT_LENGTH).order(ByteOrder.nativeOrder());
        eventsAddress = BufferUtil.address(events);
        timeout = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder());
        timeoutAddress = BufferUtil.address(timeout);
    }

    /**
     * @return whether this JVM's architecture has known AIO system call numbers (x86-64 and arm64).
     */
    public static boolean isAvailable()
    {
        return NUMBERS != null;
    }

    private static long[] numbers(final String arch)
    {
        if ("amd64".equals(arch) || "x86_64".equals(arch))
        {
            return new long[] {206, 207, 209, 208};
        }
        if ("aarch64".equals(arch))
        {
            return new long[] {0, 1, 2, 4};
        }
        return null;
    }

    private static native long syscall(long number, long a1, long a2, long a3, long a4, long a5)
        throws LastErrorException;

    /**
     * Fills a slot's control block. The buffer must stay valid, untouched, until the slot is reaped.
     *
     * @param slot   0 to capacity-1, not in flight.
     * @param write  true for a write, false for a read.
     * @param fd     an O_DIRECT descriptor.
     * @param buffer direct buffer aligned for O_DIRECT, from its position 0.
     * @param length bytes; a multiple of the device's logical block.
     * @param offset byte offset, aligned likewise.
     * @param dsync  for a write: durable once complete (RWF_DSYNC).
     */
    public void prepare(final int slot, final boolean write, final int fd, final ByteBuffer buffer, final int length,
        final long offset, final boolean dsync)
    {
        prepare(slot, write, fd, BufferUtil.address(buffer), length, offset, dsync);
    }

    /**
     * Fills a slot's control block for bytes at a native address: one of many operations packed in one buffer.
     *
     * @param slot    0 to capacity-1, not in flight.
     * @param write   true for a write, false for a read.
     * @param fd      an O_DIRECT descriptor.
     * @param address of the bytes, aligned for O_DIRECT, valid and untouched until the slot is reaped.
     * @param length  bytes; a multiple of the device's logical block.
     * @param offset  byte offset, aligned likewise.
     * @param dsync   for a write: durable once complete (RWF_DSYNC).
     */
    public void prepare(final int slot, final boolean write, final int fd, final long address, final int length,
        final long offset, final boolean dsync)
    {
        final int at = slot * IOCB_LENGTH;
        for (int i = 0; i < IOCB_LENGTH; i += 8)
        {
            iocbs.putLong(at + i, 0);
        }
        iocbs.putLong(at + IOCB_DATA, slot);
        iocbs.putInt(at + IOCB_RW_FLAGS, write && dsync ? RWF_DSYNC : 0);
        iocbs.putShort(at + IOCB_OPCODE, write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD);
        iocbs.putInt(at + IOCB_FD, fd);
        iocbs.putLong(at + IOCB_BUF, address);
        iocbs.putLong(at + IOCB_NBYTES, length);
        iocbs.putLong(at + IOCB_OFFSET, offset);
    }

    /**
     * @param slot prepared; queued for the next {@link #submit()}.
     */
    public void queue(final int slot)
    {
        queue.putLong(queued * 8, iocbsAddress + (long)slot * IOCB_LENGTH);
        queued++;
    }

    /**
     * @return operations queued and not yet submitted.
     */
    public int queued()
    {
        return queued;
    }

    /**
     * Hands every queued operation to the kernel, as few system calls as it takes.
     *
     * @param refused told of each operation the kernel refused outright (it is then not in flight and will not be
     *                reaped), with the errno; the rest are in flight.
     */
    public void submit(final Refused refused)
    {
        int from = 0;
        while (from < queued)
        {
            long submitted;
            try
            {
                submitted = syscall(NUMBERS[IO_SUBMIT], contextId, queued - from, queueAddress + from * 8L, 0, 0);
            }
            catch (final LastErrorException ex)
            {
                final int errno = ex.getErrorCode();
                if (errno == EINTR || errno == EAGAIN)
                {
                    // EAGAIN: the ring has no room, which cannot last: the caller never has more than capacity
                    // operations in flight, and the ones it has complete by themselves.
                    Thread.onSpinWait();
                    continue;
                }
                // The first operation is bad (EBADF, EINVAL: a descriptor without O_DIRECT support, say): refuse
                // it alone and go on with the others.
                refused.refused(slotAt(from), errno);
                submitted = 1;
            }
            from += (int)submitted;
        }
        queued = 0;
    }

    private int slotAt(final int index)
    {
        final long iocb = queue.getLong(index * 8);
        return (int)((iocb - iocbsAddress) / IOCB_LENGTH);
    }

    /**
     * Waits for at least {@code min} operations to complete, or the timeout, and collects what has completed.
     *
     * @param min       fewest to wait for.
     * @param timeoutNs longest wait.
     * @return how many completed: read them with {@link #completedSlot(int)} and {@link #result(int)}.
     */
    public int reap(final int min, final long timeoutNs)
    {
        timeout.putLong(0, timeoutNs / 1_000_000_000L).putLong(8, timeoutNs % 1_000_000_000L);
        try
        {
            return (int)syscall(NUMBERS[IO_GETEVENTS], contextId, min, capacity, eventsAddress, timeoutAddress);
        }
        catch (final LastErrorException ex)
        {
            if (ex.getErrorCode() == EINTR)
            {
                return 0;
            }
            throw new IllegalStateException("io_getevents failed: errno " + ex.getErrorCode() +
                (ex.getErrorCode() == EFAULT ? " (bad event buffer)" : ""), ex);
        }
    }

    /**
     * @param index 0 to the count {@link #reap} returned, less one.
     * @return the slot of that completion.
     */
    public int completedSlot(final int index)
    {
        return (int)events.getLong(index * EVENT_LENGTH + EVENT_DATA);
    }

    /**
     * @param index 0 to the count {@link #reap} returned, less one.
     * @return bytes transferred, or a negated errno.
     */
    public long result(final int index)
    {
        return events.getLong(index * EVENT_LENGTH + EVENT_RES);
    }

    /**
     * @param result   a completion's {@link #result(int)} that is not the length asked for.
     * @param expected the length asked for.
     * @return the failure as an exception whose message reads like the JDK's for the same errno, so that
     *     {@link Volume#isOutOfSpace} and the logs treat both the same. Allocates: for the error path.
     */
    public static IOException failure(final long result, final long expected)
    {
        if (result >= 0)
        {
            return new IOException("short transfer: " + result + " of " + expected + " bytes");
        }
        final int errno = (int)-result;
        final String text;
        switch (errno)
        {
            case 5:
                text = "Input/output error";
                break;
            case 9:
                text = "Bad file descriptor";
                break;
            case 22:
                text = "Invalid argument";
                break;
            case 28:
                text = "No space left on device";
                break;
            case 122:
                text = "Disk quota exceeded";
                break;
            default:
                text = "I/O failed";
                break;
        }
        return new IOException(text + " (errno " + errno + ")");
    }

    /**
     * Destroys the context; the kernel waits for anything still in flight first. Idempotent.
     */
    @Override
    public void close()
    {
        if (!closed)
        {
            closed = true;
            try
            {
                syscall(NUMBERS[IO_DESTROY], contextId, 0, 0, 0, 0);
            }
            catch (final LastErrorException ignore)
            {
                // Only EINVAL (no such context) or EFAULT: nothing is left to release either way.
            }
        }
    }

    /**
     * Told of an operation the kernel refused at submission.
     */
    @FunctionalInterface
    public interface Refused
    {
        /**
         * @param slot  the operation's slot.
         * @param errno why.
         */
        void refused(int slot, int errno);
    }
}
