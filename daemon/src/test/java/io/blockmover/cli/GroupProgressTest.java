package io.blockmover.cli;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Map;
import java.util.function.Function;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What 'group switch --force' draws while the destination applies its log before it takes over: records, from
 * the group status's lsn.applied and lsn.held, not bytes; and 'group test-failover mount', up to the LSN its views
 * must hold.
 */
class GroupProgressTest
{
    /**
     * Hands the statuses to the progress as its poller would (quiet: no poller thread, no daemon here), the first
     * of them one that is not the wait's own and draws nothing, then ends it as a request that succeeded.
     *
     * @return the lines drawn.
     */
    private static String[] draw(final Function<PrintStream, GroupProgress> start, final Map<?, ?> notItsOwn,
        final Map<?, ?>... statuses)
    {
        final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        final PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
        try (GroupProgress progress = start.apply(out))
        {
            progress.show(notItsOwn);
            assertEquals("", bytes.toString(StandardCharsets.UTF_8), "not this wait's figures: " + notItsOwn);
            for (final Map<?, ?> status : statuses)
            {
                progress.show(status);
            }
            progress.succeeded();
        }
        return bytes.toString(StandardCharsets.UTF_8).split("\n");
    }

    @Test
    void shouldCountTheRecordsAFailoverWaitsForFromTheFirstStatusSeen()
    {
        final String[] lines = draw((out) -> GroupProgress.failover(Path.of("/nonexistent.sock"), "g", out, true),
            Map.of("role", "source", "lsn", Map.of("held", 9, "applied", 9)),
            Map.of("role", "destination", "lsn", Map.of("held", 1100L, "applied", 100L)),
            Map.of("role", "destination", "lsn", Map.of("held", 1100L, "applied", 600L)));
        assertTrue(lines[0].contains("  0.0% 0 / 1000 records  ETA --  applying the log here before taking over"),
            lines[0]);
        assertTrue(lines[lines.length - 1].contains("100.0% 1000 / 1000 records  ETA 0s  applying the log"),
            lines[lines.length - 1]);
    }

    @Test
    void shouldCountTheRecordsATestMountWaitsForUpToWhatWasHeldWhenAsked()
    {
        // No mount waiting in the first status; then the source goes on writing: held moves on, the mount waits
        // only for what was held when asked.
        final String[] lines = draw((out) -> GroupProgress.testMount(Path.of("/nonexistent.sock"), "g", out, true),
            Map.of("role", "destination", "lsn", Map.of("held", 9, "applied", 1)),
            Map.of("role", "destination", "lsn", Map.of("held", 2000L, "applied", 100L),
                "test_mount_pending", Map.of("applied_lsn", 100L, "from_lsn", 300L)),
            Map.of("role", "destination", "lsn", Map.of("held", 2500L, "applied", 200L),
                "test_mount_pending", Map.of("applied_lsn", 200L, "from_lsn", 300L)));
        assertTrue(lines[0].contains("  0.0% 0 / 200 records  ETA --  applying the log here before the test views"),
            lines[0]);
        assertTrue(lines[lines.length - 1].contains("100.0% 200 / 200 records"), lines[lines.length - 1]);
    }
}
