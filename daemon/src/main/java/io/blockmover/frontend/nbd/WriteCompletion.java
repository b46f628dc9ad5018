package io.blockmover.frontend.nbd;

/**
 * The acknowledgement of a write an export chose to finish later ({@link NbdExport#writeDeferrable}). The thread
 * that learns the outcome (for a sync group, the one that takes the partner's ACK) calls {@link #complete(int)}
 * exactly once, and then {@link #dispatch()}; neither ever blocks it. One ACK usually covers several writes: the
 * completer completes them all first and dispatches them after, so their replies leave together and the thread
 * that sends them is woken once, not once per write (on a shared core, each wake-up preempted the completer).
 */
public interface WriteCompletion
{
    /**
     * Records the outcome and queues the reply, without sending it yet.
     *
     * @param error 0 when the write may be acknowledged, else the NBD error to reply with.
     */
    void complete(int error);

    /**
     * Sends the replies queued by {@link #complete(int)} on their way. Call after completing a batch; calling it
     * again for another write of the same batch costs next to nothing. Nothing to do for an implementation that
     * answers in {@link #complete(int)} itself.
     */
    default void dispatch()
    {
    }
}
