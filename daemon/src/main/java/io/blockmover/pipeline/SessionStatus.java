package io.blockmover.pipeline;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.concurrent.atomic.AtomicInteger;

import org.agrona.concurrent.AgentTerminationException;

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

    /**
     * @param ex an exception from a duty cycle.
     * @return whether it is a bug: anything but I/O (the link, a disk), checked or unchecked.
     */
    public static boolean isBug(final Throwable ex)
    {
        return !(ex instanceof IOException || ex instanceof UncheckedIOException);
    }

    /**
     * Ends the session on what a stage's duty cycle threw. I/O fails it with {@code ioCode}; a bug fails it as
     * {@link ErrorCode#INTERNAL}, named by its class (the agent runner reports it: Conductor.newRunner). Thrown on,
     * a bug did not end the stage: its runner logged it and ran the next duty cycle into it again, each time. A
     * stage's own end (AgentTerminationException) passes as it is.
     *
     * @param ex     what the duty cycle threw.
     * @param ioCode the code of an I/O failure.
     * @return the exception that ends the stage: throw it.
     */
    public AgentTerminationException failOn(final Exception ex, final ErrorCode ioCode)
    {
        if (ex instanceof AgentTerminationException end)
        {
            return end;
        }
        if (isBug(ex))
        {
            fail(ErrorCode.INTERNAL, ex.toString(), true);
        }
        else
        {
            fail(ioCode, ex.getMessage(), true);
        }
        return new AgentTerminationException(ex);
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
