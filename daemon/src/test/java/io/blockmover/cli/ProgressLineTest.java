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
        line.update(500_000_000L, 1L << 40, false);
        assertEquals("-- MB/s", line.formatRate(line.rate() * 1));
        assertTrue(Double.isNaN(line.secondsLeft(1)), "no ETA without a rate");
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        line.update(500_000_000L, 1L << 40, false);
        assertEquals("0 MB/s", line.formatRate(line.rate()), "known, and nothing moved");
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        line.update(600_000_000L, 1L << 40, false);
        assertTrue(line.rate() > 0 && line.formatRate(line.rate()).endsWith(" MB/s") &&
            !line.formatRate(line.rate()).startsWith("0 "), line.formatRate(line.rate()));
    }

    /**
     * A job that reached its end gives its average rate, not the smoothed rate of its last moments, and no time
     * left: a 1 GiB copy at 283 MB/s ended its line at "10 MB/s", and a create whose logs were written said "0
     * MB/s, ETA --" while it waited for its partner.
     */
    @Test
    void shouldGiveTheAverageRateAndNoTimeLeftOnceAtTheEnd()
    {
        final ProgressLine line = new ProgressLine(new PrintStream(new ByteArrayOutputStream(), true,
            StandardCharsets.UTF_8), true);
        final long total = 1_000_000_000L;
        final long startNs = System.nanoTime();
        line.update(0, total, false);
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(50));
        line.update(900_000_000L, total, false);
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(50));
        line.update(total, total, false);
        final double average = total / ((System.nanoTime() - startNs) / 1e9);
        for (int i = 0; i < 5; i++)
        {
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
            line.update(total, total, false);
        }
        final double elapsed = (System.nanoTime() - startNs) / 1e9;
        assertTrue(line.rate() >= total / elapsed && line.rate() <= average * 1.01, "rate " + line.rate() +
            " after waiting at the end, against an average of " + total / elapsed + "-" + average);
        assertEquals(0, line.secondsLeft(0));
        assertEquals(0, line.secondsLeft(total - total), "ETA 0s once nothing is left, rate or not");

        final ProgressLine late = new ProgressLine(new PrintStream(new ByteArrayOutputStream(), true,
            StandardCharsets.UTF_8), true);
        late.update(total, total, false);
        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
        late.update(total, total, true);
        assertEquals("-- MB/s", late.formatRate(late.rate()), "first seen at its end: never seen moving");
        assertEquals(0, late.secondsLeft(0));
    }
}
