package io.blockmover.replication.group;

import java.io.IOException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import io.blockmover.frontend.nbd.NbdErrorException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The source's log force for FLUSHes, on its own thread, with a force the test holds and releases.
 */
@Timeout(30)
class FlushLogForcerTest
{
    /** A force that starts, then waits for the test to let it end. */
    private static final class HeldForce implements Runnable
    {
        final Semaphore started = new Semaphore(0);
        final Semaphore release = new Semaphore(0);
        final AtomicInteger runs = new AtomicInteger();
        volatile boolean fail;

        @Override
        public void run()
        {
            runs.incrementAndGet();
            started.release();
            release.acquireUninterruptibly();
            if (fail)
            {
                throw new java.io.UncheckedIOException(new IOException("EIO from the disk"));
            }
        }
    }

    private static Thread awaiting(final FlushLogForcer forcer, final long ticket,
        final AtomicReference<Throwable> failure, final CountDownLatch done)
    {
        final Thread t = new Thread(() ->
        {
            try
            {
                forcer.await(ticket);
            }
            catch (final Throwable ex)
            {
                failure.set(ex);
            }
            done.countDown();
        });
        t.start();
        return t;
    }

    @Test
    void shouldAnswerATicketOnlyWithAForceThatBeganAfterItAndShareForces() throws Exception
    {
        final HeldForce force = new HeldForce();
        try (FlushLogForcer forcer = new FlushLogForcer(force, "test-force"))
        {
            final long first = forcer.request();
            assertTrue(force.started.tryAcquire(10, TimeUnit.SECONDS), "the first request starts a force");
            // Asked while that force runs: it may not count for them.
            final long second = forcer.request();
            final long third = forcer.request();
            final AtomicReference<Throwable> failure = new AtomicReference<>();
            final CountDownLatch firstDone = new CountDownLatch(1);
            final CountDownLatch laterDone = new CountDownLatch(2);
            awaiting(forcer, first, failure, firstDone);
            awaiting(forcer, second, failure, laterDone);
            awaiting(forcer, third, failure, laterDone);

            force.release.release();
            assertTrue(firstDone.await(10, TimeUnit.SECONDS), "the force it asked for ended");
            assertTrue(force.started.tryAcquire(10, TimeUnit.SECONDS), "a second force for the later tickets");
            assertFalse(laterDone.await(100, TimeUnit.MILLISECONDS), "not answered by the force before them");
            force.release.release();
            assertTrue(laterDone.await(10, TimeUnit.SECONDS));
            assertNull(failure.get());
            assertEquals(2, force.runs.get(), "one force for both later tickets");
        }
    }

    @Test
    void shouldFailTheTicketsAForceFailedForOnly() throws Exception
    {
        final HeldForce force = new HeldForce();
        try (FlushLogForcer forcer = new FlushLogForcer(force, "test-force"))
        {
            force.fail = true;
            final long failed = forcer.request();
            assertTrue(force.started.tryAcquire(10, TimeUnit.SECONDS));
            force.release.release();
            final IOException ex = assertThrows(IOException.class, () -> forcer.await(failed));
            assertTrue(ex.getMessage().contains("EIO from the disk"), ex.getMessage());

            force.fail = false;
            final long next = forcer.request();
            force.release.release();
            forcer.await(next);
        }
    }

    @Test
    void shouldReleaseWaitersWhenClosed() throws Exception
    {
        final HeldForce force = new HeldForce();
        final FlushLogForcer forcer = new FlushLogForcer(force, "test-force");
        final long first = forcer.request();
        assertTrue(force.started.tryAcquire(10, TimeUnit.SECONDS));
        final long second = forcer.request();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        final CountDownLatch done = new CountDownLatch(1);
        awaiting(forcer, second, failure, done);
        final Thread closer = new Thread(forcer::close);
        closer.start();
        // The force in progress ends. One more may start if the thread looks before the closer's flag lands, so
        // that one is let through too.
        force.release.release(2);
        closer.join(10_000);
        assertFalse(closer.isAlive());
        assertTrue(done.await(10, TimeUnit.SECONDS));
        if (force.runs.get() == 1)
        {
            assertTrue(failure.get() instanceof NbdErrorException, String.valueOf(failure.get()));
        }
        else
        {
            assertNull(failure.get(), "answered by the force that began after it");
        }
        forcer.await(first);
        assertThrows(NbdErrorException.class, () -> forcer.await(forcer.request()), "closed: nothing is forced");
    }
}
