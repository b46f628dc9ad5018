package io.blockmover.cli;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ProgressLineTest
{
    /**
     * A job followed from the middle (the second host's log, a create asked about late) has no rate at its first
     * line: it said "0 MB/s", as if stalled. It says "--" until a second look, then the rate, 0 included.
     */
    @Test
    void shouldSayTheRateIsNotKnownUntilTheSecondLookThenGiveItEvenWhenZero()
    {
        final ProgressLine line = new ProgressLine(new PrintStream(new ByteArrayOutputStream(), true,
            StandardCharsets.UTF_8), true);
        line.update(500_000_000L, false);
        assertEquals("-- MB/s", line.formatRate(line.rate() * 1));
        assertTrue(Double.isNaN(line.secondsLeft(1)), "no ETA without a rate");
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        line.update(500_000_000L, false);
        assertEquals("0 MB/s", line.formatRate(line.rate()), "known, and nothing moved");
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        line.update(600_000_000L, false);
        assertTrue(line.rate() > 0 && line.formatRate(line.rate()).endsWith(" MB/s") &&
            !line.formatRate(line.rate()).startsWith("0 "), line.formatRate(line.rate()));
    }
}
