package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.Await.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LogPreparerTest
{
    @TempDir
    Path dir;

    /**
     * An Error while a log is written (out of memory, a class that no longer loads) must reach the thread's
     * uncaught-exception handler, which in the daemon is FatalErrorHandler and stops it: kept in the future, as it
     * was, it only failed the one create and the daemon ran on in an unknown state. The create still hears why.
     */
    @Test
    void shouldHandAnErrorToTheUncaughtExceptionHandlerAndFailTheCreate() throws Exception
    {
        final OutOfMemoryError error = new OutOfMemoryError("Cannot reserve 1048576 bytes of direct buffer memory");
        final AtomicReference<Throwable> uncaught = new AtomicReference<>();
        final Thread.UncaughtExceptionHandler saved = Thread.getDefaultUncaughtExceptionHandler();
        Thread.setDefaultUncaughtExceptionHandler((thread, throwable) -> uncaught.set(throwable));
        try (LogPreparer preparer = new LogPreparer((file, capacity, maxRecordLength, written, cancelled) ->
        {
            throw error;
        }))
        {
            final LogPreparer.Preparation preparation = preparer.prepare(dir.resolve("log"), 1 << 20, 65536, "g",
                "peer");
            awaitTrue("the preparation to end", preparation::isDone);
            final BlockmoverException failed = assertThrows(BlockmoverException.class, preparation::check);
            assertEquals(ErrorCode.IO_ERROR, failed.code());
            assertTrue(failed.getMessage().contains("direct buffer memory"), failed.getMessage());
            awaitTrue("the uncaught-exception handler to hear of it", () -> uncaught.get() != null);
            assertSame(error, uncaught.get());
        }
        finally
        {
            Thread.setDefaultUncaughtExceptionHandler(saved);
        }
    }

    /**
     * A failure the daemon can live with (a full disk, a bad path) fails the create only.
     */
    @Test
    void shouldFailOnlyTheCreateOnAnException() throws Exception
    {
        final AtomicReference<Throwable> uncaught = new AtomicReference<>();
        final Thread.UncaughtExceptionHandler saved = Thread.getDefaultUncaughtExceptionHandler();
        Thread.setDefaultUncaughtExceptionHandler((thread, throwable) -> uncaught.set(throwable));
        try (LogPreparer preparer = new LogPreparer((file, capacity, maxRecordLength, written, cancelled) ->
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot create record log: No space left on device");
        }))
        {
            final LogPreparer.Preparation preparation = preparer.prepare(dir.resolve("log"), 1 << 20, 65536, "g",
                "peer");
            awaitTrue("the preparation to end", preparation::isDone);
            assertTrue(assertThrows(BlockmoverException.class, preparation::check).getMessage()
                .contains("No space left on device"));
            // A second preparation runs on the same thread: it did not die.
            final LogPreparer.Preparation next = preparer.prepare(dir.resolve("log2"), 1 << 20, 65536, "g2", "peer");
            awaitTrue("the next preparation to end", next::isDone);
            assertNull(uncaught.get());
        }
        finally
        {
            Thread.setDefaultUncaughtExceptionHandler(saved);
        }
    }

    /**
     * A log nobody will open (its create refused or deleted, a source that stopped asking) is stopped where it is,
     * not written in full for nothing: cancel reaches the writer, which stops, and the preparation fails CANCELLED.
     * One cancelled while queued behind another never begins.
     */
    @Test
    void shouldStopALogBeingWrittenAndNeverBeginOneQueuedWhenCancelled() throws Exception
    {
        final AtomicInteger begun = new AtomicInteger();
        try (LogPreparer preparer = new LogPreparer((file, capacity, maxRecordLength, written, cancelled) ->
        {
            begun.incrementAndGet();
            while (!cancelled.getAsBoolean())
            {
                written.incrementAndGet();
                Thread.onSpinWait();
            }
            throw new BlockmoverException(ErrorCode.CANCELLED, "cancelled after " + written.get());
        }))
        {
            final LogPreparer.Preparation writing = preparer.prepare(dir.resolve("log"), 1 << 20, 65536, "g", "peer");
            final LogPreparer.Preparation queued = preparer.prepare(dir.resolve("log2"), 1 << 20, 65536, "g2",
                "peer");
            awaitTrue("the first to be written", () -> writing.written() > 0);
            queued.cancel();
            writing.cancel();
            awaitTrue("both to end", () -> writing.isDone() && queued.isDone());
            assertEquals(ErrorCode.CANCELLED, assertThrows(BlockmoverException.class, writing::check).code());
            final BlockmoverException notBegun = assertThrows(BlockmoverException.class, queued::check);
            assertEquals(ErrorCode.CANCELLED, notBegun.code());
            assertTrue(notBegun.getMessage().contains("before it began"), notBegun.getMessage());
            assertEquals(1, begun.get(), "the queued one was begun");
        }
    }

    /**
     * A cancel that comes after the writer's last look (its last MiB) finds the log written in full: it is deleted
     * and the preparation fails CANCELLED all the same, so that a cancelled log is never kept or used. It used to
     * end as written, and the daemon said so after saying it had stopped it.
     */
    @Test
    void shouldDeleteALogCancelledAfterItsLastMibAndFailCancelled() throws Exception
    {
        final CountDownLatch lastLookDone = new CountDownLatch(1);
        final CountDownLatch cancelledLate = new CountDownLatch(1);
        final Path file = dir.resolve("log");
        try (LogPreparer preparer = new LogPreparer((to, capacity, maxRecordLength, written, cancelled) ->
        {
            assertFalse(cancelled.getAsBoolean());
            written.set(capacity);
            try
            {
                Files.write(to, new byte[4096]);
                lastLookDone.countDown();
                cancelledLate.await();
            }
            catch (final IOException | InterruptedException ex)
            {
                throw new IllegalStateException(ex);
            }
        }))
        {
            final LogPreparer.Preparation preparation = preparer.prepare(file, 1 << 20, 65536, "g", "peer");
            lastLookDone.await();
            preparation.cancel();
            cancelledLate.countDown();
            awaitTrue("the preparation to end", preparation::isDone);
            final BlockmoverException failed = assertThrows(BlockmoverException.class, preparation::check);
            assertEquals(ErrorCode.CANCELLED, failed.code());
            assertFalse(Files.exists(file), "the log written in full is kept");
        }
    }

    /**
     * Unclaimed means not asked for within the time kept, whether written yet or not: a log still being written
     * for a source that went away is stopped too.
     */
    @Test
    void shouldCallALogUnclaimedOnlyOnceItsSourceStoppedAskingWrittenOrNot() throws Exception
    {
        try (LogPreparer preparer = new LogPreparer((file, capacity, maxRecordLength, written, cancelled) ->
        {
            while (!cancelled.getAsBoolean())
            {
                Thread.onSpinWait();
            }
            throw new BlockmoverException(ErrorCode.CANCELLED, "cancelled");
        }))
        {
            final LogPreparer.Preparation writing = preparer.prepare(dir.resolve("log"), 1 << 20, 65536, "g", "peer");
            final long nowNs = System.nanoTime();
            writing.asked(nowNs);
            assertFalse(writing.isUnclaimed(nowNs + 1_000, 1_000_000));
            assertTrue(writing.isUnclaimed(nowNs + 2_000_000, 1_000_000));
            writing.cancel();
            awaitTrue("the write to stop", writing::isDone);
        }
    }
}
