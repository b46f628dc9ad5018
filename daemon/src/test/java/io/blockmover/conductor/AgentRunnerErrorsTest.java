package io.blockmover.conductor;

import java.util.ArrayList;
import java.util.List;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.SleepingIdleStrategy;
import org.junit.jupiter.api.Test;

import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The runners the conductor gives its agents, on a real thread: each unexpected error is reported once, by role;
 * the exception that ends a stage is not reported (its session's status says why).
 */
class AgentRunnerErrorsTest
{
    @Test
    void shouldReportEachUnexpectedErrorOnceAndNotTheEndOfAStage() throws InterruptedException
    {
        final java.util.concurrent.atomic.AtomicBoolean ended = new java.util.concurrent.atomic.AtomicBoolean();
        final List<String> reported = new ArrayList<>();
        final int[] cycles = {0};
        final Agent agent = new Agent()
        {
            @Override
            public int doWork()
            {
                cycles[0]++;
                if (cycles[0] <= 3)
                {
                    throw new IllegalStateException("bug " + cycles[0]);
                }
                throw new AgentTerminationException();
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
        final AgentRunner runner = Conductor.newRunner(agent, new SleepingIdleStrategy(1_000_000), message ->
        {
            synchronized (reported)
            {
                reported.add(message);
            }
        });
        AgentRunner.startOnThread(runner);
        awaitTrue("the agent ended", ended::get);
        runner.close();
        synchronized (reported)
        {
            assertEquals(List.of("stage: java.lang.IllegalStateException: bug 1",
                "stage: java.lang.IllegalStateException: bug 2", "stage: java.lang.IllegalStateException: bug 3"),
                reported);
        }
    }

    /**
     * A stage that ended its session on a bug (SessionStatus.failOn) is reported once, by the runner: its group's
     * or job's handle says nothing more. One that ended on I/O is not reported as an error.
     */
    @Test
    void shouldReportAStageThatEndedOnABugOnceAndNotOneThatEndedOnIo() throws InterruptedException
    {
        final List<String> reported = new java.util.concurrent.CopyOnWriteArrayList<>();
        for (final Exception cause : List.of(new IllegalStateException("a bug"), new java.io.IOException("EIO")))
        {
            final java.util.concurrent.atomic.AtomicBoolean ended = new java.util.concurrent.atomic.AtomicBoolean();
            final io.blockmover.pipeline.SessionStatus status = new io.blockmover.pipeline.SessionStatus();
            final Agent agent = new Agent()
            {
                @Override
                public int doWork()
                {
                    throw status.failOn(cause, io.blockmover.ErrorCode.PEER_UNREACHABLE);
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
            final AgentRunner runner = Conductor.newRunner(agent, new SleepingIdleStrategy(1_000_000), reported::add);
            AgentRunner.startOnThread(runner);
            awaitTrue("the agent ended", ended::get);
            runner.close();
        }
        assertEquals(List.of("stage ended on a bug: java.lang.IllegalStateException: a bug"), reported);
    }
}
