package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.regex.Pattern;
import java.util.stream.Stream;

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
    private static final System.Logger LOG = System.getLogger("blockmoverd");

    /**
     * A log being written, or written and not yet claimed: its geometry, for whom, when it is done, and when its
     * source last asked for it (conductor thread).
     */
    static final class Preparation
    {
        final long capacity;
        final int maxRecordLength;
        final String peer;
        private final AtomicLong written;
        private final CompletableFuture<Void> done;
        private final AtomicBoolean cancelled;
        private long askedNs;

        /**
         * @param capacity        bytes of records.
         * @param maxRecordLength the longest payload.
         * @param peer            the source it is written for.
         * @param written         bytes of the log written so far, set by the preparer's thread.
         * @param done            completes when the file exists; exceptionally when it cannot be written.
         * @param cancelled       set to stop the writing (the writer asks it before each MiB).
         * @param askedNs         when the source asked (System.nanoTime).
         */
        Preparation(final long capacity, final int maxRecordLength, final String peer, final AtomicLong written,
            final CompletableFuture<Void> done, final AtomicBoolean cancelled, final long askedNs)
        {
            this.capacity = capacity;
            this.maxRecordLength = maxRecordLength;
            this.peer = peer;
            this.written = written;
            this.done = done;
            this.cancelled = cancelled;
            this.askedNs = askedNs;
        }

        boolean isFor(final long capacity, final int maxRecordLength)
        {
            return this.capacity == capacity && this.maxRecordLength == maxRecordLength;
        }

        boolean isDone()
        {
            return done.isDone();
        }

        /**
         * @return bytes of the log written so far (any thread).
         */
        long written()
        {
            return written.get();
        }

        /**
         * @param waiting what a resize waits for once this log is written, or null.
         * @param copying whether the records move to it now (the session waits).
         * @return {@code log_resize} of group status, for a resize of a running group's log to this one.
         */
        Map<String, Object> describeAsResize(final String waiting, final boolean copying)
        {
            final Map<String, Object> resize = new LinkedHashMap<>();
            resize.put("size", capacity);
            resize.put("written", written.get());
            resize.put("waiting", waiting);
            resize.put("copying", copying);
            return resize;
        }

        /**
         * @return how far the write is, for a refusal's message: "(N of M bytes written)", which the source finds
         * again with {@link #PROGRESS}.
         */
        String progress()
        {
            return progressText(written.get(), capacity);
        }

        void asked(final long nowNs)
        {
            askedNs = nowNs;
        }

        /**
         * @return whether its source has not asked for this log for {@code keepNs}, written or not: its create was
         * cancelled or failed there, and the file only takes room (and, still being written, the disk's time).
         */
        boolean isUnclaimed(final long nowNs, final long keepNs)
        {
            return nowNs - askedNs > keepNs;
        }

        /**
         * Stops the writing at its next MiB, or before it starts: it then fails (CANCELLED), leaving no file.
         * Any thread; nothing if it is written already.
         */
        void cancel()
        {
            cancelled.set(true);
        }

        /**
         * Deletes the file once it is written (or failed): for a log nobody will open. A group directory it
         * recreated meanwhile (a deleted group's) goes too, when empty. Cancel first, so that it is not written in
         * full for nothing.
         */
        void discardWhenDone(final Path file)
        {
            done.whenComplete((ignored, failure) ->
            {
                try
                {
                    Files.deleteIfExists(file);
                    final Path dir = file.toAbsolutePath().getParent();
                    if (dir != null && Files.isDirectory(dir))
                    {
                        try (Stream<Path> entries = Files.list(dir))
                        {
                            if (entries.findAny().isEmpty())
                            {
                                Files.delete(dir);
                            }
                        }
                    }
                }
                catch (final IOException ex)
                {
                    LOG.log(System.Logger.Level.WARNING, "cannot delete " + file + ": " + ex.getMessage());
                }
            });
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

    /**
     * Finds the bytes written and the size in {@link #progressText}, in a partner's PREPARING refusal: the numbers
     * travel inside its message, which older partners send without them.
     */
    static final Pattern PROGRESS = Pattern.compile("\\((\\d+) of (\\d+) bytes written\\)");

    /**
     * @return "(N of M bytes written)", what {@link #PROGRESS} finds again.
     */
    static String progressText(final long written, final long capacity)
    {
        return "(" + written + " of " + capacity + " bytes written)";
    }

    /**
     * What writes a log file: {@link RecordLog#prepare(Path, long, int, AtomicLong, BooleanSupplier)}, or a test's
     * stand-in.
     */
    @FunctionalInterface
    interface LogWriter
    {
        void write(Path file, long capacity, int maxRecordLength, AtomicLong written, BooleanSupplier cancelled);
    }

    private final LogWriter writer;
    private final ExecutorService executor = Executors.newSingleThreadExecutor((task) ->
    {
        final Thread thread = new Thread(task, "log-preparer");
        thread.setDaemon(true);
        return thread;
    });

    LogPreparer()
    {
        this(RecordLog::prepare);
    }

    LogPreparer(final LogWriter writer)
    {
        this.writer = writer;
    }

    /**
     * Starts writing a log file, after any already queued. Says in the daemon's log when it is written and how long
     * that took, from this thread: the conductor learns of it only at its next look (the source's next OPEN, or
     * the group's next duty cycle).
     *
     * @param group the group it is for.
     * @param peer  the group's partner.
     * @return the preparation.
     */
    Preparation prepare(final Path file, final long capacity, final int maxRecordLength, final String group,
        final String peer)
    {
        final AtomicLong written = new AtomicLong();
        final CompletableFuture<Void> done = new CompletableFuture<>();
        final AtomicBoolean cancelled = new AtomicBoolean();
        executor.execute(() ->
        {
            try
            {
                if (cancelled.get())
                {
                    // Cancelled while queued behind another log: not begun at all.
                    throw new BlockmoverException(ErrorCode.CANCELLED, "record log " + file + " not written: " +
                        "cancelled before it began");
                }
                final long startNs = System.nanoTime();
                writer.write(file, capacity, maxRecordLength, written, cancelled::get);
                if (cancelled.get())
                {
                    // Cancelled after its last MiB was checked: written in full, and as unwanted as one cut short.
                    // A cancelled log is never used, so it goes the same way (GroupIT met it: the cancel of a log
                    // nobody claimed came 0.1 s before the end of its write, and the test waited for words that
                    // never came).
                    deleteQuietly(file);
                    throw new BlockmoverException(ErrorCode.CANCELLED, "record log " + file + " was written in " +
                        "full before the cancel was seen, and is deleted");
                }
                LOG.log(System.Logger.Level.INFO, String.format(Locale.ROOT, "group %s: its %d-byte log is " +
                    "written (%.1f s)", group, capacity, (System.nanoTime() - startNs) / 1e9));
                done.complete(null);
            }
            catch (final RuntimeException ex)
            {
                if (ex instanceof BlockmoverException b && b.code() == ErrorCode.CANCELLED)
                {
                    LOG.log(System.Logger.Level.INFO, "group " + group + ": its " + capacity + "-byte log " +
                        "was cancelled, nothing of it is kept (" + b.getMessage() + ")");
                }
                done.completeExceptionally(ex);
            }
            catch (final Error ex)
            {
                // Thrown on as well, to the thread's uncaught-exception handler: in the daemon FatalErrorHandler,
                // which stops it (runAsync kept an Error in the future, and the daemon ran on as if nothing were
                // wrong but this one create).
                done.completeExceptionally(ex);
                throw ex;
            }
        });
        return new Preparation(capacity, maxRecordLength, peer, written, done, cancelled, System.nanoTime());
    }

    private static void deleteQuietly(final Path file)
    {
        try
        {
            Files.deleteIfExists(file);
        }
        catch (final IOException ex)
        {
            LOG.log(System.Logger.Level.WARNING, "cannot delete " + file + ": " + ex.getMessage());
        }
    }

    /**
     * Closes a log that a resize replaced, on this thread: its file is gone (renamed over), and the last close of a
     * deleted file frees its pages and blocks, 0.1-0.2 s for 256 MiB here (more with a file system mounted with
     * discard), which neither the conductor nor a group's agent should wait for.
     */
    void closeReplaced(final RecordLog log)
    {
        executor.execute(() ->
        {
            try
            {
                log.closeReplaced();
            }
            catch (final RuntimeException ex)
            {
                // Its file is gone: the descriptor leaks until the daemon stops, nothing else is lost.
                LOG.log(System.Logger.Level.WARNING, "cannot close the replaced log " + log.path() + ": " + ex);
            }
        });
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
