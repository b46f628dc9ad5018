package io.blockmover.conductor;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.IntSupplier;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.SleepingIdleStrategy;
import org.junit.jupiter.api.Test;

import io.blockmover.ErrorCode;
import io.blockmover.pipeline.SessionStatus;

import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The runners the conductor gives its agents, on a real thread: each unexpected error is reported once, by role;
 * the exception that ends a stage is not reported (its session's status says why), unless a bug ended it.
 */
class AgentRunnerErrorsTest
{
    @Test
    void shouldReportEachUnexpectedErrorOnceAndNotTheEndOfAStage() throws InterruptedException
    {
        final List<String> reported = new CopyOnWriteArrayList<>();
        final int[] cycles = {0};
        runUntilEnded(() ->
        {
            cycles[0]++;
            if (cycles[0] <= 3)
            {
                throw new IllegalStateException("bug " + cycles[0]);
            }
            throw new AgentTerminationException();
        }, reported::add);
        assertEquals(List.of("stage: java.lang.IllegalStateException: bug 1",
            "stage: java.lang.IllegalStateException: bug 2", "stage: java.lang.IllegalStateException: bug 3"),
            reported);
    }

    /**
     * A stage that ended its session on a bug (SessionStatus.failOn) is reported once, by the runner: its group's
     * or job's handle says nothing more. One that ended on I/O is not reported as an error.
     */
    @Test
    void shouldReportAStageThatEndedOnABugOnceAndNotOneThatEndedOnIo() throws InterruptedException
    {
        final List<String> reported = new CopyOnWriteArrayList<>();
        for (final Exception cause : List.of(new IllegalStateException("a bug"), new IOException("EIO")))
        {
            final SessionStatus status = new SessionStatus();
            runUntilEnded(() ->
            {
                throw status.failOn(cause, ErrorCode.PEER_UNREACHABLE);
            }, reported::add);
        }
        assertEquals(List.of("stage ended on a bug: java.lang.IllegalStateException: a bug"), reported);
    }

    /**
     * Runs an agent named "stage" with this duty cycle on a runner of the conductor's until it ends.
     */
    private static void runUntilEnded(final IntSupplier dutyCycle, final Consumer<String> reported)
        throws InterruptedException
    {
        final AtomicBoolean ended = new AtomicBoolean();
        final Agent agent = new Agent()
        {
            @Override
            public int doWork()
            {
                return dutyCycle.getAsInt();
            }

            @Override
            public void onClose()
            {
                ended.set(true);
            }

            @Override
            public String roleName()
            {
                return "stage";
            }
        };
        final AgentRunner runner = Conductor.newRunner(agent, new SleepingIdleStrategy(1_000_000), reported);
        AgentRunner.startOnThread(runner);
        awaitTrue("the agent ended", ended::get);
        runner.close();
    }
}
