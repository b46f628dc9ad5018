package io.blockmover.daemon;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Which uncaught throwables stop the daemon (FatalErrorIT runs the whole of it in a real daemon): an Error, bare
 * or wrapped by whatever let it escape, and nothing else.
 */
class FatalErrorHandlerTest
{
    @Test
    void shouldTakeAnErrorBareOrWrappedAsFatal()
    {
        assertTrue(FatalErrorHandler.isFatal(new OutOfMemoryError("Java heap space")));
        assertTrue(FatalErrorHandler.isFatal(new IllegalStateException("wrapped",
            new RuntimeException(new NoClassDefFoundError("io/blockmover/Gone")))));
    }

    @Test
    void shouldNameTheFixWhenTheErrorSaysWhatItIs()
    {
        assertTrue(FatalErrorHandler.hint(new RuntimeException(new NoClassDefFoundError("io/blockmover/Gone")))
            .contains("jar was replaced"));
        assertTrue(FatalErrorHandler.hint(new OutOfMemoryError("Java heap space")).contains("-Xmx"));
        assertEquals("", FatalErrorHandler.hint(new StackOverflowError()));
    }

    @Test
    void shouldNotTakeAnExceptionAsFatal()
    {
        assertFalse(FatalErrorHandler.isFatal(new IllegalStateException("a bug")));
        assertFalse(FatalErrorHandler.isFatal(new UncheckedIOException(new IOException("EIO"))));
    }
}
