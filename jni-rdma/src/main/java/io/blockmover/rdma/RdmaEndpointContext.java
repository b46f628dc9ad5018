package io.blockmover.rdma;

/**
 * Sizes and retry settings for {@link RdmaEndpoint}s, with defaults, validated by {@link #conclude(RdmaDevice)}
 * against the device before any queue is created. The daemon fills it from its own Configuration.
 * <p>
 * Threading: build and conclude on one thread, then treat as immutable.
 */
public final class RdmaEndpointContext
{
    /** Default outstanding SEND/WRITE/READ work requests per endpoint. */
    public static final int SEND_QUEUE_DEPTH_DEFAULT = 64;
    /** Default posted receives per endpoint. */
    public static final int RECEIVE_QUEUE_DEPTH_DEFAULT = 64;
    /** Default completions taken per {@code ibv_poll_cq} call. */
    public static final int COMPLETION_BATCH_LENGTH_DEFAULT = 16;
    /** Default RDMA READs outstanding in each direction. */
    public static final int READ_DEPTH_DEFAULT = 4;
    /** Default transport retries before IBV_WC_RETRY_EXC_ERR (3 bits, IB/RoCE only). */
    public static final int RETRY_COUNT_DEFAULT = 7;
    /**
     * Default receiver-not-ready retries (3 bits, IB/RoCE only). Finite on purpose: 7 would retry forever and a
     * peer that stops posting receives would stall the send queue instead of failing it.
     */
    public static final int RNR_RETRY_COUNT_DEFAULT = 6;
    /** Default timeout of each of rdma_resolve_addr and rdma_resolve_route. */
    public static final int RESOLVE_TIMEOUT_MS_DEFAULT = 2000;

    private int sendQueueDepth = SEND_QUEUE_DEPTH_DEFAULT;
    private int receiveQueueDepth = RECEIVE_QUEUE_DEPTH_DEFAULT;
    private int completionBatchLength = COMPLETION_BATCH_LENGTH_DEFAULT;
    private int readDepth = READ_DEPTH_DEFAULT;
    private int retryCount = RETRY_COUNT_DEFAULT;
    private int rnrRetryCount = RNR_RETRY_COUNT_DEFAULT;
    private int resolveTimeoutMs = RESOLVE_TIMEOUT_MS_DEFAULT;

    /**
     * Check every setting against its range and the device's limits, clamping the read depth to what the device
     * supports.
     *
     * @param device the device endpoints will use.
     * @return this.
     * @throws IllegalArgumentException naming the setting that is out of range.
     */
    public RdmaEndpointContext conclude(final RdmaDevice device)
    {
        final int maxWr = Math.min(device.maxQueuePairWorkRequests(), device.maxCompletionQueueEntries());
        requireRange("sendQueueDepth", sendQueueDepth, 1, maxWr);
        requireRange("receiveQueueDepth", receiveQueueDepth, 1, maxWr);
        requireRange("completionBatchLength", completionBatchLength, 1, 1024);
        requireRange("readDepth", readDepth, 0, 255);
        requireRange("retryCount", retryCount, 0, 7);
        requireRange("rnrRetryCount", rnrRetryCount, 0, 7);
        requireRange("resolveTimeoutMs", resolveTimeoutMs, 1, 600_000);
        readDepth = Math.min(readDepth, Math.min(device.maxReadInitiatorDepth(), device.maxReadResponderResources()));

        return this;
    }

    private static void requireRange(final String name, final int value, final int min, final int max)
    {
        if (value < min || value > max)
        {
            throw new IllegalArgumentException(name + "=" + value + " outside [" + min + ", " + max + "]");
        }
    }

    public int sendQueueDepth()
    {
        return sendQueueDepth;
    }

    /**
     * Outstanding SEND/WRITE/READ work requests per endpoint; posts beyond this return false (back-pressure).
     *
     * @param sendQueueDepth work requests.
     * @return this.
     */
    public RdmaEndpointContext sendQueueDepth(final int sendQueueDepth)
    {
        this.sendQueueDepth = sendQueueDepth;
        return this;
    }

    public int receiveQueueDepth()
    {
        return receiveQueueDepth;
    }

    /**
     * Receives that may be posted per endpoint at once.
     *
     * @param receiveQueueDepth work requests.
     * @return this.
     */
    public RdmaEndpointContext receiveQueueDepth(final int receiveQueueDepth)
    {
        this.receiveQueueDepth = receiveQueueDepth;
        return this;
    }

    public int completionBatchLength()
    {
        return completionBatchLength;
    }

    /**
     * Completions taken from each completion queue per {@link RdmaEndpoint#pollCompletions} call: bounds the work
     * per duty cycle.
     *
     * @param completionBatchLength entries.
     * @return this.
     */
    public RdmaEndpointContext completionBatchLength(final int completionBatchLength)
    {
        this.completionBatchLength = completionBatchLength;
        return this;
    }

    public int readDepth()
    {
        return readDepth;
    }

    /**
     * RDMA READs outstanding in each direction (initiator depth and responder resources); 0 disables READ.
     *
     * @param readDepth reads.
     * @return this.
     */
    public RdmaEndpointContext readDepth(final int readDepth)
    {
        this.readDepth = readDepth;
        return this;
    }

    public int retryCount()
    {
        return retryCount;
    }

    /**
     * Transport retries on timeout before a work request fails with IBV_WC_RETRY_EXC_ERR (IB/RoCE).
     *
     * @param retryCount 0..7.
     * @return this.
     */
    public RdmaEndpointContext retryCount(final int retryCount)
    {
        this.retryCount = retryCount;
        return this;
    }

    public int rnrRetryCount()
    {
        return rnrRetryCount;
    }

    /**
     * Retries when the peer has no receive posted (IB/RoCE); 7 means forever.
     *
     * @param rnrRetryCount 0..7.
     * @return this.
     */
    public RdmaEndpointContext rnrRetryCount(final int rnrRetryCount)
    {
        this.rnrRetryCount = rnrRetryCount;
        return this;
    }

    public int resolveTimeoutMs()
    {
        return resolveTimeoutMs;
    }

    /**
     * Timeout handed to rdma_resolve_addr and rdma_resolve_route; the overall connect deadline is separate.
     *
     * @param resolveTimeoutMs milliseconds.
     * @return this.
     */
    public RdmaEndpointContext resolveTimeoutMs(final int resolveTimeoutMs)
    {
        this.resolveTimeoutMs = resolveTimeoutMs;
        return this;
    }

    public String toString()
    {
        return "RdmaEndpointContext{sendQueueDepth=" + sendQueueDepth + ", receiveQueueDepth=" + receiveQueueDepth +
            ", completionBatchLength=" + completionBatchLength + ", readDepth=" + readDepth +
            ", retryCount=" + retryCount + ", rnrRetryCount=" + rnrRetryCount +
            ", resolveTimeoutMs=" + resolveTimeoutMs + '}';
    }
}
