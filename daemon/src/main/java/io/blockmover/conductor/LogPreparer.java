package io.blockmover.conductor;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.replication.log.RecordLog;

/**
 * Writes new groups' record logs ({@link RecordLog#prepare}) on a thread of its own, so that a group create
 * never blocks a conductor for the seconds to minutes a large log takes: a blocked conductor answers no command,
 * serves no other group's handshake and stops petting the systemd watchdog (WatchdogSec=30s), which then kills
 * the daemon. One thread: two logs written at once would only share the disk. Control work, not the data path:
 * it may allocate.
 */
final class LogPreparer implements AutoCloseable
{
    /**
     * A log being written: its geometry, and when it is done.
     *
     * @param capacity        bytes of records.
     * @param maxRecordLength the longest payload.
     * @param done            completes when the file exists; exceptionally when it cannot be written.
     */
    record Preparation(long capacity, int maxRecordLength, CompletableFuture<Void> done)
    {
        boolean isFor(final long capacity, final int maxRecordLength)
        {
            return this.capacity == capacity && this.maxRecordLength == maxRecordLength;
        }

        boolean isDone()
        {
            return done.isDone();
        }

        /**
         * Conductor thread, once {@link #isDone}.
         *
         * @throws BlockmoverException why the log could not be written.
         */
        void check()
        {
            try
            {
                done.join();
            }
            catch (final CompletionException ex)
            {
                throw ex.getCause() instanceof BlockmoverException b ? b : new BlockmoverException(ErrorCode.IO_ERROR,
                    "cannot write a record log: " + ex.getCause(), ex.getCause());
            }
        }
    }

    private final ExecutorService executor = Executors.newSingleThreadExecutor((task) ->
    {
        final Thread thread = new Thread(task, "log-preparer");
        thread.setDaemon(true);
        return thread;
    });

    /**
     * Starts writing a log file, after any already queued.
     *
     * @return the preparation.
     */
    Preparation prepare(final Path file, final long capacity, final int maxRecordLength)
    {
        return new Preparation(capacity, maxRecordLength,
            CompletableFuture.runAsync(() -> RecordLog.prepare(file, capacity, maxRecordLength), executor));
    }

    /**
     * Stops taking work; a log being written is finished by the daemon thread or cut short by the exit, and a file
     * cut short was never renamed into place.
     */
    @Override
    public void close()
    {
        executor.shutdown();
    }
}
