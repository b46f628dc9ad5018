package io.blockmover.rdma;

/**
 * Receives work completions from {@link RdmaEndpoint#pollCompletions(CompletionHandler)}.
 * <p>
 * Called on the polling thread with a flyweight that is only valid during the call. Implementations should be a
 * long-lived object (not a capturing lambda created per poll) and must not throw: completions of the same batch
 * after a throwing call are lost, and the endpoint should then be closed.
 */
@FunctionalInterface
public interface CompletionHandler
{
    /**
     * One completion. Check {@link WorkCompletion#isSuccess()} first: on failure only the wrId, status and
     * queue are meaningful, and every later request on the endpoint completes with IBV_WC_WR_FLUSH_ERR.
     *
     * @param completion flyweight over the native completion entry.
     */
    void onCompletion(WorkCompletion completion);
}
