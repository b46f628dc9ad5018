package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * A back end served over NBD: a range of {@link #size()} bytes. The server has already checked every request
 * against the size, the read-only flag and 4096-byte alignment (a length may end in a shorter tail only where
 * the request ends exactly at {@link #size()}), so an implementation sees only valid ranges.
 * <p>
 * Threading: called concurrently from the worker threads of every connection to the export; implementations
 * must be thread-safe and must not allocate per call on the read and write paths. A failure reaches the client
 * as the code of an {@link NbdErrorException}, or EIO for any other {@link IOException}.
 */
public interface NbdExport
{
    /**
     * @return the export's name, as clients ask for it.
     */
    String name();

    /**
     * @return size in bytes; fixed while the export is served.
     */
    long size();

    /**
     * @return true when clients may only read.
     */
    boolean isReadOnly();

    /**
     * Reads {@code length} bytes at {@code offset} into {@code dst} from its position 0.
     *
     * @param offset byte offset.
     * @param dst    direct buffer aligned to 4096 with room for length bytes; position and limit are the callee's.
     * @param length bytes to read.
     * @throws IOException on failure.
     */
    void read(long offset, ByteBuffer dst, int length) throws IOException;

    /**
     * Writes {@code length} bytes from {@code src} (from its position 0) at {@code offset}. Returns when the write
     * may be acknowledged: durable when {@code fua} is set, otherwise durable after the next {@link #flush()}.
     *
     * @param offset byte offset.
     * @param src    direct buffer aligned to 4096 holding the bytes from position 0.
     * @param length bytes to write.
     * @param fua    force unit access: durable before returning.
     * @throws IOException on failure.
     */
    void write(long offset, ByteBuffer src, int length, boolean fua) throws IOException;

    /**
     * Like {@link #write}, but the export may return before the write may be acknowledged, and acknowledge it
     * through {@code completion} later instead of holding the calling thread: a sync group's write waits for the
     * partner's ACK, and a thread parked per write costs a context switch each way. The source buffer may be
     * reused as soon as this returns either way. The default finishes every write before returning.
     *
     * @param offset     byte offset.
     * @param src        direct buffer aligned to 4096 holding the bytes from position 0.
     * @param length     bytes to write.
     * @param fua        force unit access: durable before it is acknowledged.
     * @param completion called exactly once, later, when this returns false; never when it returns true.
     * @return true when the write may be acknowledged now; false when {@code completion} will say.
     * @throws IOException on failure; {@code completion} is then never called.
     */
    default boolean writeDeferrable(long offset, ByteBuffer src, int length, boolean fua, WriteCompletion completion)
        throws IOException
    {
        write(offset, src, length, fua);
        return true;
    }

    /**
     * For a front end that submits volume I/O itself, many requests per system call (Linux AIO): an O_DIRECT
     * descriptor that requests may go straight to instead of through {@link #read} and {@link #write}. Where
     * {@link #newDirectIo()} is null, READs and WRITEs with or without FUA (a write that is durable when it
     * completes) may, and the descriptor must stay valid while any connection serves the export. Otherwise READs
     * and WRITEs without FUA may, each between that object's begin and end, which keep the descriptor valid.
     *
     * @return the descriptor, or -1 when every request must go through this interface.
     */
    default int directFd()
    {
        return -1;
    }

    /**
     * @return a new object to run around each direct READ and WRITE of one connection slot (see
     *     {@link #directFd()}), or null when they need nothing but the volume I/O.
     */
    default DirectIo newDirectIo()
    {
        return null;
    }

    /**
     * Makes every write acknowledged so far, on any connection, durable.
     *
     * @throws IOException on failure.
     */
    void flush() throws IOException;

    /**
     * Advises that a range is no longer needed; its content afterwards is unspecified.
     *
     * @param offset byte offset.
     * @param length bytes.
     * @throws IOException on failure.
     */
    void trim(long offset, long length) throws IOException;

    /**
     * Writes zeroes over a range.
     *
     * @param offset byte offset.
     * @param length bytes.
     * @param fua    durable before returning.
     * @throws IOException on failure.
     */
    void writeZeroes(long offset, long length, boolean fua) throws IOException;

    /**
     * Writes zeroes over a range, which the client may let the server deallocate (its request without NO_HOLE): an
     * export whose volume deallocates may leave a hole there, which reads as zeros. By default they are written.
     *
     * @param offset        byte offset.
     * @param length        bytes.
     * @param fua           durable before returning.
     * @param mayDeallocate whether the client allows a hole (no NBD_CMD_FLAG_NO_HOLE).
     * @throws IOException on failure.
     */
    default void writeZeroes(long offset, long length, boolean fua, boolean mayDeallocate) throws IOException
    {
        writeZeroes(offset, length, fua);
    }

    /**
     * How the export is allocated, for NBD_CMD_BLOCK_STATUS (metadata context base:allocation): where the run of
     * holes or of data that {@code offset} starts ends. Clients such as nbdcopy and qemu-img skip the holes of a
     * thin volume instead of reading them. By default all data.
     *
     * @param offset byte offset.
     * @param end    where to stop looking.
     * @return the end of the run, at most {@code end}; negated for a run of holes, which read as zeros.
     */
    default long allocationRun(long offset, long end)
    {
        return end;
    }
}
