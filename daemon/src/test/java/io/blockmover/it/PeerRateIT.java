package io.blockmover.it;

import java.nio.file.Path;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static io.blockmover.it.Volumes.MIB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The per-peer bandwidth limit, between two real daemons: a copy limited by {@code peer.site-b.max.rate} takes
 * about size / rate (a functional check of the limit within a wide band, not a benchmark); {@code peer set}
 * changes it for the next copy, and the change survives a restart of the daemon; {@code --reset} restores the
 * configured limit.
 */
@Timeout(300)
class PeerRateIT
{
    private static final long RATE = 20L * MIB;
    private static Testbed testbed;

    @BeforeAll
    static void up()
    {
        testbed = Testbed.up("peerrate", "--set-a", "peer.site-b.max.rate=20m");
    }

    @AfterAll
    static void down()
    {
        if (testbed != null)
        {
            testbed.close();
        }
    }

    @Test
    void shouldHoldCopiesToTheLimitAndKeepARuntimeChangeAcrossARestart() throws Exception
    {
        final Map<String, Object> configured = show();
        assertEquals(RATE, num(configured.get("max_rate")));
        assertEquals("config", configured.get("max_rate_source"));

        final long size = 48L * MIB;
        assertCopyTakesAbout(size, RATE, "a");

        final Run set = testbed.cli("site-a", "peer", "set", "site-b", "--max-rate", "40m", "--json").expect(0);
        final Map<String, Object> after = JSON.std.mapFrom(set.stdout());
        assertEquals(2 * RATE, num(after.get("max_rate")));
        assertEquals("runtime", after.get("max_rate_source"));
        assertCopyTakesAbout(size, 2 * RATE, "b");

        testbed.stop("site-a");
        testbed.start("site-a");
        final Map<String, Object> restarted = show();
        assertEquals(2 * RATE, num(restarted.get("max_rate")), "peer set must survive a restart");
        assertEquals("runtime", restarted.get("max_rate_source"));
        final Run status = testbed.cli("site-a", "status").expect(0);
        assertTrue(status.stdout().contains("max rate 40.0 MiB/s"), status.stdout());

        testbed.cli("site-a", "peer", "set", "site-b", "--reset").expect(0);
        assertEquals(RATE, num(show().get("max_rate")));
        assertEquals(4, testbed.cli("site-a", "peer", "set", "nope", "--max-rate", "1m").exitCode());
    }

    private static Map<String, Object> show() throws Exception
    {
        return JSON.std.mapFrom(testbed.cli("site-a", "peer", "show", "site-b", "--json").expect(0).stdout());
    }

    private static void assertCopyTakesAbout(final long size, final long rate, final String name) throws Exception
    {
        final Path source = Volumes.random(testbed.dir.resolve("rate-src-" + name + ".img"), size, name.hashCode());
        final Path target = Volumes.zeros(testbed.dir.resolve("rate-dst-" + name + ".img"), size);

        final Run run = testbed.cli("site-a", "copy", source.toString(), "site-b:" + target, "--json").expect(0);

        final Map<String, Object> job = JSON.std.mapFrom(run.stdout());
        final double seconds = (num(job.get("finished_ms")) - num(job.get("started_ms"))) / 1000.0;
        final double expected = (double)size / rate;
        assertTrue(seconds >= 0.6 * expected && seconds <= 1.6 * expected, "copy of " + size + " bytes at " + rate +
            " B/s took " + seconds + " s, expected about " + expected + " s");
        assertNull(Volumes.firstDifference(source, target, size));
    }

    private static long num(final Object value)
    {
        return ((Number)value).longValue();
    }
}
