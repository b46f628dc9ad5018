package io.blockmover.conductor;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

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
     * A log being written: what it was asked for, and when it is done.
     *
     * @param file            the log file.
     * @param capacity        bytes of records.
     * @param maxRecordLength the longest payload.
     * @param done            completes when the file exists; exceptionally (a BlockmoverException) when it cannot.
     */
    record Preparation(Path file, long capacity, int maxRecordLength, CompletableFuture<Void> done)
    {
        boolean isFor(final Path file, final long capacity, final int maxRecordLength)
        {
            return this.file.equals(file) && this.capacity == capacity && this.maxRecordLength == maxRecordLength;
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
        return new Preparation(file, capacity, maxRecordLength,
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
