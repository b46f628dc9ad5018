package io.blockmover.pipeline;

import java.util.concurrent.atomic.AtomicInteger;

import io.blockmover.ErrorCode;

/**
 * How a session ends, set once by whichever stage finishes or fails first and read by the conductor. Any thread.
 */
public final class SessionStatus
{
    public static final int RUNNING = 0;
    public static final int COMPLETED = 1;
    public static final int FAILED = 2;

    private final AtomicInteger state = new AtomicInteger(RUNNING);
    private volatile ErrorCode code;
    private volatile String message;
    private volatile boolean retryable;

    /**
     * @return RUNNING, COMPLETED or FAILED.
     */
    public int state()
    {
        return state.get();
    }

    public boolean isRunning()
    {
        return state.get() == RUNNING;
    }

    /**
     * Marks the session completed, unless it already ended.
     */
    public void complete()
    {
        state.compareAndSet(RUNNING, COMPLETED);
    }

    /**
     * Marks the session failed, unless it already ended; the first failure is the one reported.
     *
     * @param code      what kind of failure.
     * @param message   for the operator.
     * @param retryable whether reconnecting may cure it (a lost link) or not (a full disk on the peer).
     * @return true when this call ended the session.
     */
    public boolean fail(final ErrorCode code, final String message, final boolean retryable)
    {
        if (state.get() != RUNNING)
        {
            return false;
        }
        this.code = code;
        this.message = message;
        this.retryable = retryable;
        return state.compareAndSet(RUNNING, FAILED);
    }

    public ErrorCode code()
    {
        return code;
    }

    public String message()
    {
        return message;
    }

    public boolean isRetryable()
    {
        return retryable;
    }
}
