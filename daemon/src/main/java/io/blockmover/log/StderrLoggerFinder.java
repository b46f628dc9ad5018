package io.blockmover.log;

import java.io.PrintStream;
import java.text.MessageFormat;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ResourceBundle;

/**
 * Routes {@link System.Logger} to standard error, one line per message with an ISO time stamp, so the journal
 * gets it under systemd. Unlike java.util.logging it has no shutdown hook of its own, so the lines logged while
 * the daemon stops on SIGTERM are not lost. Level: {@code -Dblockmover.log.level=DEBUG|INFO|WARNING|ERROR}.
 */
public final class StderrLoggerFinder extends System.LoggerFinder
{
    private static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS");
    // Volatile: a configuration reload (SIGHUP) changes it on the conductor thread while every thread logs.
    private static volatile System.Logger.Level threshold =
        System.Logger.Level.valueOf(System.getProperty("blockmover.log.level", "INFO"));

    /**
     * Sets the least severe level written, at start-up and on a configuration reload. Any thread.
     *
     * @param level new threshold.
     */
    public static void threshold(final System.Logger.Level level)
    {
        threshold = level;
    }

    @Override
    public System.Logger getLogger(final String name, final Module module)
    {
        return new StderrLogger(name, System.err);
    }

    private record StderrLogger(String name, PrintStream out) implements System.Logger
    {
        @Override
        public String getName()
        {
            return name;
        }

        @Override
        public boolean isLoggable(final Level level)
        {
            return level != Level.OFF && level.getSeverity() >= threshold.getSeverity();
        }

        @Override
        public void log(final Level level, final ResourceBundle bundle, final String msg, final Throwable thrown)
        {
            if (!isLoggable(level))
            {
                return;
            }
            synchronized (out)
            {
                out.println(LocalDateTime.now().format(TIME) + " " + level.getName() + " " + name + ": " + msg);
                if (thrown != null)
                {
                    thrown.printStackTrace(out);
                }
                out.flush();
            }
        }

        @Override
        public void log(final Level level, final ResourceBundle bundle, final String format, final Object... params)
        {
            if (isLoggable(level))
            {
                log(level, bundle, params == null || params.length == 0 ? format :
                    MessageFormat.format(format, params), (Throwable)null);
            }
        }
    }
}
