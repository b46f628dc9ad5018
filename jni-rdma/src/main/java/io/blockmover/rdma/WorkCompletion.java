package io.blockmover.rdma;

import io.blockmover.rdma.verbs.IbvWcDescriptor;
import io.blockmover.rdma.verbs.WorkCompletionStatus;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Flyweight over one {@code struct ibv_wc} in an endpoint's pre-allocated completion array (layout in
 * {@link IbvWcDescriptor}). Reused for every completion: read it inside
 * {@link CompletionHandler#onCompletion(WorkCompletion)} and do not keep it.
 */
public final class WorkCompletion
{
    private final UnsafeBuffer buffer;
    private int offset;
    private boolean receive;

    WorkCompletion(final UnsafeBuffer buffer)
    {
        this.buffer = buffer;
    }

    WorkCompletion wrap(final int offset, final boolean receive)
    {
        this.offset = offset;
        this.receive = receive;
        return this;
    }

    /**
     * The id given when the request was posted.
     *
     * @return wr_id.
     */
    public long wrId()
    {
        return buffer.getLong(offset + IbvWcDescriptor.WR_ID_OFFSET);
    }

    /**
     * Raw {@code ibv_wc_status}.
     *
     * @return 0 on success.
     */
    public int statusCode()
    {
        return buffer.getInt(offset + IbvWcDescriptor.STATUS_OFFSET);
    }

    /**
     * Status as an enum, allocation-free.
     *
     * @return status.
     */
    public WorkCompletionStatus status()
    {
        return WorkCompletionStatus.get(statusCode());
    }

    /**
     * Whether the request succeeded.
     *
     * @return true for IBV_WC_SUCCESS.
     */
    public boolean isSuccess()
    {
        return 0 == statusCode();
    }

    /**
     * Whether this completes a posted receive (true) or a SEND/WRITE/READ (false). Valid for failed
     * completions too, because receives and sends complete on separate queues.
     *
     * @return true for receives.
     */
    public boolean isReceive()
    {
        return receive;
    }

    /**
     * {@code ibv_wc_opcode}, e.g. {@link IbvWcDescriptor#IBV_WC_RECV}; undefined unless {@link #isSuccess()}.
     *
     * @return opcode.
     */
    public int opcode()
    {
        return buffer.getInt(offset + IbvWcDescriptor.OPCODE_OFFSET);
    }

    /**
     * Bytes received, for successful receives (and RDMA READ on some providers).
     *
     * @return byte_len.
     */
    public int byteLength()
    {
        return buffer.getInt(offset + IbvWcDescriptor.BYTE_LEN_OFFSET);
    }

    /**
     * Provider-specific error detail.
     *
     * @return vendor_err.
     */
    public int vendorError()
    {
        return buffer.getInt(offset + IbvWcDescriptor.VENDOR_ERR_OFFSET);
    }

    public String toString()
    {
        return "WorkCompletion{wrId=" + wrId() + ", " + (receive ? "receive" : "send") + ", status=" +
            status().cName() + (isSuccess() ? ", opcode=" + opcode() + ", byteLength=" + byteLength() : "") +
            ", vendorError=" + vendorError() + '}';
    }
}
