package io.blockmover.daemon;

import java.io.PrintStream;

/**
 * What blockmoverd does with a throwable no thread caught. An {@link Error}, bare or wrapped (OutOfMemoryError,
 * StackOverflowError, a NoClassDefFoundError once the jar was overwritten under the running daemon by cp or a
 * rebuild), stops the process at once with {@link #EXIT_FATAL}, as a crash would: the thread it ended is gone (the
 * conductor's AgentRunner and every stage's rethrow an Error), and a daemon missing its conductor answered nothing,
 * pinged no watchdog and ignored SIGTERM until systemd's TimeoutStopSec ran out. Every write acknowledged before is
 * already durable (the design survives kill -9 at any moment), the next start recovers the groups as after a crash,
 * and systemd's Restart=on-failure starts it again. Nothing is closed on the way out: after an Error the state the
 * thread left half-updated must not be taken for a clean stop.
 * <p>
 * Any other throwable that ends a thread is logged with the thread's name: the thread's work stopped, and whoever
 * reads the log must learn which.
 * <p>
 * Installed before anything else starts, and it loads nothing when it runs (only the JDK's own classes), so that
 * it works when the jar it came from is gone.
 */
public final class FatalErrorHandler implements Thread.UncaughtExceptionHandler
{
    /** sysexits.h EX_SOFTWARE: an internal error. */
    public static final int EXIT_FATAL = 70;
    /** Causes looked through: a chain of causes may loop. */
    private static final int MAX_CAUSES = 16;

    private final PrintStream err;

    private FatalErrorHandler(final PrintStream err)
    {
        this.err = err;
    }

    /**
     * Makes this the handler of every thread that has none of its own.
     */
    public static void install()
    {
        Thread.setDefaultUncaughtExceptionHandler(new FatalErrorHandler(System.err));
    }

    @Override
    public void uncaughtException(final Thread thread, final Throwable throwable)
    {
        if (isFatal(throwable))
        {
            err.println("blockmoverd: FATAL: thread " + thread.getName() + " died of " + throwable +
                "; stopping now with exit status " + EXIT_FATAL + " as a crash would (acknowledged writes are " +
                "durable; the next start recovers every group)" + hint(throwable));
            throwable.printStackTrace(err);
            err.flush();
            Runtime.getRuntime().halt(EXIT_FATAL);
        }
        else
        {
            err.println("blockmoverd: ERROR: thread " + thread.getName() + " ended on an uncaught " + throwable +
                "; its work has stopped (a bug: please report it with this log)");
            throwable.printStackTrace(err);
        }
    }

    /**
     * @return what to do about the error, when its kind says: a class that no longer loads is a jar replaced under
     * the running daemon (not any LinkageError: a missing native library is one too), and memory is the JVM's heap.
     */
    static String hint(final Throwable throwable)
    {
        final Throwable cause = firstCause(throwable, NoClassDefFoundError.class, OutOfMemoryError.class);
        if (cause instanceof NoClassDefFoundError)
        {
            return ". A class no longer loads: the jar was replaced under the running daemon; restart it after " +
                "every upgrade (systemctl restart blockmoverd)";
        }
        if (cause instanceof OutOfMemoryError)
        {
            return ". Give the JVM more memory (-Xmx in BLOCKMOVERD_JAVA_OPTS) if this recurs";
        }
        return "";
    }

    /**
     * @return whether the throwable, or one it wraps, is an Error.
     */
    static boolean isFatal(final Throwable throwable)
    {
        return firstCause(throwable, Error.class) != null;
    }

    /**
     * @return the throwable or the first cause it wraps that is one of the kinds, up to {@link #MAX_CAUSES} deep;
     * null when none is. No lambda: nothing may need loading while the handler runs.
     */
    private static Throwable firstCause(final Throwable throwable, final Class<?>... kinds)
    {
        Throwable t = throwable;
        for (int depth = 0; t != null && depth < MAX_CAUSES; depth++, t = t.getCause())
        {
            for (final Class<?> kind : kinds)
            {
                if (kind.isInstance(t))
                {
                    return t;
                }
            }
        }
        return null;
    }
}
