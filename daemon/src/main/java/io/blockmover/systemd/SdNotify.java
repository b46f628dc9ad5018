package io.blockmover.systemd;

import java.util.Locale;
import java.util.Map;

import com.sun.jna.FunctionMapper;
import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

/**
 * Direct mapping of the two libsystemd calls the daemon needs. {@code sd_notify} returns 0 and does nothing when
 * NOTIFY_SOCKET is unset, so calling it outside systemd is harmless; when libsystemd itself cannot be loaded
 * (a minimal container) {@link #isAvailable()} is false and the callers skip every call. Any thread.
 */
final class SdNotify
{
    private static final boolean AVAILABLE;
    private static final String UNAVAILABLE_REASON;

    static
    {
        boolean available = false;
        String reason = null;
        try
        {
            // The versioned name: the unversioned libsystemd.so only exists where libsystemd-dev is installed.
            // Java names in camel case (the house style); the mapper gives libsystemd's: sdNotify -> sd_notify.
            final FunctionMapper snakeCase = (library, method) ->
                method.getName().replaceAll("([A-Z])", "_$1").toLowerCase(Locale.ROOT);
            Native.register(SdNotify.class, NativeLibrary.getInstance("libsystemd.so.0",
                Map.of(Library.OPTION_FUNCTION_MAPPER, snakeCase)));
            available = true;
        }
        catch (final UnsatisfiedLinkError | NoClassDefFoundError ex)
        {
            reason = ex.getMessage();
        }
        AVAILABLE = available;
        UNAVAILABLE_REASON = reason;
    }

    private SdNotify()
    {
    }

    static boolean isAvailable()
    {
        return AVAILABLE;
    }

    static String unavailableReason()
    {
        return UNAVAILABLE_REASON;
    }

    /**
     * sd_notify(3).
     *
     * @param unsetEnvironment non-zero to unset NOTIFY_SOCKET (never: the daemon notifies for its whole life).
     * @param state            newline-separated VARIABLE=value assignments.
     * @return positive when sent, 0 when there is no NOTIFY_SOCKET, negative errno on failure.
     */
    static native int sdNotify(int unsetEnvironment, String state);

    /**
     * sd_watchdog_enabled(3): whether the service manager expects keep-alive pings from this process.
     *
     * @param unsetEnvironment non-zero to unset WATCHDOG_USEC and WATCHDOG_PID.
     * @param usec             receives the watchdog timeout in microseconds.
     * @return positive when enabled, 0 when not, negative errno on a malformed environment.
     */
    static native int sdWatchdogEnabled(int unsetEnvironment, long[] usec);
}
