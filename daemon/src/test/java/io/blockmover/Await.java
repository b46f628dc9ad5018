package io.blockmover;

import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.fail;

/**
 * Waiting in unit tests for something another thread does: polls a condition until a deadline, and fails the test
 * with what it waited for when the deadline passes.
 */
public final class Await
{
    private static final long TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);

    private Await()
    {
    }

    /**
     * @param what      what the condition means, for the failure message ("timed out waiting until ...").
     * @param condition polled every 10 ms, up to 10 s.
     * @throws InterruptedException when interrupted while waiting.
     */
    public static void awaitTrue(final String what, final BooleanSupplier condition) throws InterruptedException
    {
        final long deadlineNs = System.nanoTime() + TIMEOUT_NS;
        while (!condition.getAsBoolean())
        {
            if (System.nanoTime() - deadlineNs > 0)
            {
                fail("timed out waiting until " + what);
            }
            Thread.sleep(10);
        }
    }
}
