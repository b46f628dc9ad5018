package io.blockmover.rdma.verbs;

/**
 * {@code enum ibv_wc_status}: the outcome of a work request, with libibverbs' own wording and, for the statuses a
 * replication link actually meets, what they usually mean operationally.
 * <p>
 * Constant names are the C names without the {@code IBV_WC_} prefix; codes are checked against the header.
 * {@link #get(int)} is allocation-free for use on the data path.
 */
public enum WorkCompletionStatus
{
    SUCCESS(0, "success", null),
    LOC_LEN_ERR(1, "local length error", "a received message was longer than the posted receive buffer"),
    LOC_QP_OP_ERR(2, "local QP operation error", "malformed work request or QP in a wrong state"),
    LOC_EEC_OP_ERR(3, "local EE context operation error", null),
    LOC_PROT_ERR(4, "local protection error",
        "the local buffer is not inside a registered memory region with the right lkey"),
    WR_FLUSH_ERR(5, "Work Request Flushed Error",
        "the QP went to the error state (disconnect or an earlier failure); the request was not executed"),
    MW_BIND_ERR(6, "memory management operation error", null),
    BAD_RESP_ERR(7, "bad response error", null),
    LOC_ACCESS_ERR(8, "local access error", "the local memory region lacks the needed access flags"),
    REM_INV_REQ_ERR(9, "remote invalid request error",
        "the peer rejected the request (e.g. a SEND larger than its receive buffer)"),
    REM_ACCESS_ERR(10, "remote access error",
        "remote address/rkey outside the peer's region or lacking REMOTE_WRITE/REMOTE_READ"),
    REM_OP_ERR(11, "remote operation error", "the peer could not complete the operation"),
    RETRY_EXC_ERR(12, "transport retry counter exceeded", "the peer stopped answering: dead or unreachable"),
    RNR_RETRY_EXC_ERR(13, "RNR retry counter exceeded", "the peer had no receive posted for our SEND"),
    LOC_RDD_VIOL_ERR(14, "local RDD violation error", null),
    REM_INV_RD_REQ_ERR(15, "remote invalid RD request", null),
    REM_ABORT_ERR(16, "aborted error", "the peer aborted the connection"),
    INV_EECN_ERR(17, "invalid EE context number", null),
    INV_EEC_STATE_ERR(18, "invalid EE context state", null),
    FATAL_ERR(19, "fatal error", "the adapter reported a fatal error"),
    RESP_TIMEOUT_ERR(20, "response timeout error", null),
    GENERAL_ERR(21, "general error", null),
    TM_ERR(22, "TM error", null),
    TM_RNDV_INCOMPLETE(23, "TM software rendezvous", null),
    /** A code this table does not know (a newer libibverbs); see {@link #get(int)}. */
    UNKNOWN(-1, "unknown work completion status", null);

    private static final WorkCompletionStatus[] BY_CODE;

    static
    {
        final WorkCompletionStatus[] values = values();
        BY_CODE = new WorkCompletionStatus[values.length - 1];
        for (final WorkCompletionStatus status : values)
        {
            if (status.code >= 0)
            {
                BY_CODE[status.code] = status;
            }
        }
    }

    private final int code;
    private final String message;
    private final String meaning;

    WorkCompletionStatus(final int code, final String message, final String meaning)
    {
        this.code = code;
        this.message = message;
        this.meaning = meaning;
    }

    /**
     * Status for a code read from {@code ibv_wc.status}.
     *
     * @param code the C value.
     * @return the constant, {@link #UNKNOWN} for values outside the table.
     */
    public static WorkCompletionStatus get(final int code)
    {
        return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : UNKNOWN;
    }

    /**
     * The C enum value.
     *
     * @return e.g. 5 for {@link #WR_FLUSH_ERR}.
     */
    public int code()
    {
        return code;
    }

    /**
     * The C name.
     *
     * @return e.g. {@code "IBV_WC_WR_FLUSH_ERR"}.
     */
    public String cName()
    {
        return "IBV_WC_" + name();
    }

    /**
     * libibverbs' description, identical to {@code ibv_wc_status_str(code)}.
     *
     * @return e.g. {@code "Work Request Flushed Error"}.
     */
    public String message()
    {
        return message;
    }

    /**
     * What the status usually means for a replication link, for error messages.
     *
     * @return explanation, or null where the C message says it all.
     */
    public String meaning()
    {
        return meaning;
    }

    /**
     * One line for logs and exceptions.
     *
     * @return e.g. {@code "IBV_WC_RETRY_EXC_ERR (12) transport retry counter exceeded: the peer stopped ..."}.
     */
    public String describe()
    {
        return cName() + " (" + code + ") " + message + (null != meaning ? ": " + meaning : "");
    }
}
