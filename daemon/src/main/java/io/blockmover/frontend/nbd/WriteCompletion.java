package io.blockmover.frontend.nbd;

/**
 * The acknowledgement of a write an export chose to finish later ({@link NbdExport#writeDeferrable}): the export
 * calls {@link #complete(int)} exactly once, from whichever thread learns the outcome (for a sync group, the one
 * that takes the partner's ACK), and that call must never block its caller.
 */
public interface WriteCompletion
{
    /**
     * @param error 0 when the write may be acknowledged, else the NBD error to reply with.
     */
    void complete(int error);
}
