package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * What an export does around a READ or WRITE that the front end submits to its descriptor
 * ({@link NbdExport#directFd()}) itself: {@link #beginWrite} before a volume write is submitted (a replicated volume
 * logs the write), {@link #endWrite} once the kernel has completed it; {@link #beginRead} and {@link #endRead}
 * around a volume read (a replicated volume keeps its descriptor open meanwhile). One per connection slot, reused
 * for each of its requests; a begin and its end alternate, and the slot's next request begins only after the end.
 * <p>
 * Threading: begins on the connection's reader, ends on its reaper. None may wait for another request of the same
 * connection to complete (the reader submits those only when it next waits itself), which is why beginWrite can be
 * told not to wait at all. Nothing allocates on the success path.
 */
public interface DirectIo
{
    /**
     * Before the volume write is submitted.
     *
     * @param offset  byte offset.
     * @param src     the payload, from position 0.
     * @param length  bytes.
     * @param mayWait whether it may wait for other writes in flight; when not and it would have to, it returns false
     *                having done nothing, and is called again with true once the caller has submitted its queue.
     * @return true when the volume write may be submitted.
     * @throws IOException when the write must be refused: the client gets the error; endWrite is not called.
     */
    boolean beginWrite(long offset, ByteBuffer src, int length, boolean mayWait) throws IOException;

    /**
     * After the kernel has completed the volume write, whether or not it succeeded.
     *
     * @param result     bytes written, or a negated errno.
     * @param completion acknowledges the write later when this returns false (see
     *                   {@link NbdExport#writeDeferrable}).
     * @return true when the write may be acknowledged now.
     * @throws IOException when the write failed: the client gets the error.
     */
    boolean endWrite(long result, WriteCompletion completion) throws IOException;

    /**
     * Before a volume read is submitted.
     *
     * @throws IOException when the read must be refused: the client gets the error; endRead is not called.
     */
    void beginRead() throws IOException;

    /**
     * After the kernel has completed the volume read, whether or not it succeeded.
     */
    void endRead();

    /**
     * @return true while something waits for every write in flight to end (a replicated volume's log resize): the
     *     caller then submits each write as soon as it has begun, rather than with the rest of its socket read.
     */
    default boolean drainWanted()
    {
        return false;
    }

    /**
     * The reader is about to hand the writes it has begun to the kernel: whatever beginWrite put aside for them must
     * be done first (a replicated volume writes the records it staged for them, all with one pwrite). Reader thread;
     * once per submission that holds a begun write, on any slot's instance of the export.
     */
    default void beforeSubmit()
    {
    }
}
