package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

/**
 * What a destination last heard from its source, kept across a restart of its daemon: a failover may follow one.
 */
class SourceReportTest
{
    @TempDir
    Path dir;

    @Test
    void shouldKeepTheLastReportAcrossARestartWithItsAge() throws IOException
    {
        final Path file = dir.resolve(SourceReport.FILE_NAME);
        final SourceReport before = new SourceReport();
        before.save(file, true);
        assertFalse(Files.exists(file), "nothing heard, nothing saved");

        before.update(84, 12L << 20, 11_700, 3, 1_000_000);
        before.save(file, true);
        final SourceReport after = new SourceReport();
        after.load(file);
        final Map<String, Object> report = after.describe(73, 1_006_000);
        assertEquals(84L, report.get("lsn"));
        assertEquals(11L, report.get("records_behind"));
        assertEquals(12L << 20, report.get("rpo_bytes"));
        assertEquals(11.7, report.get("rpo_seconds"));
        assertEquals(3L, report.get("dirty_regions"));
        assertEquals(6.0, report.get("seconds_ago"), "aged from when it arrived, not from the restart");
    }

    /**
     * While linked, the report is saved every few seconds without a force: replaced whole, like the durable save.
     */
    @Test
    void shouldReplaceTheSavedReportWithANewerOneWhileLinked() throws IOException
    {
        final Path file = dir.resolve(SourceReport.FILE_NAME);
        final SourceReport linked = new SourceReport();
        linked.update(84, 100, 5, 0, 1_000_000);
        linked.save(file, false);
        linked.update(97, 200, 7, 1, 1_010_000);
        linked.save(file, false);
        assertEquals("97 200 7 1 1010000\n", Files.readString(file));
        assertFalse(Files.exists(dir.resolve(SourceReport.FILE_NAME + ".tmp")), "no temporary file left behind");
        final SourceReport restarted = new SourceReport();
        restarted.load(file);
        assertEquals(97L, restarted.describe(90, 1_012_000).get("lsn"));
    }

    /**
     * The save when a session ends must be durable even when the periodic save already wrote the same report
     * without a force: it skipped it as "already saved", so a power cut after the end could lose the report that
     * says what a failover loses.
     */
    @Test
    void shouldForceTheReportAtTheSessionsEndThatThePeriodicSaveWroteUnforced() throws IOException
    {
        final Path file = dir.resolve(SourceReport.FILE_NAME);
        final SourceReport report = new SourceReport();
        report.update(84, 100, 5, 0, 1_000_000);
        report.save(file, false);
        Files.delete(file); // What a power cut may do to a file replaced without a force.
        report.save(file, false);
        assertFalse(Files.exists(file), "the periodic save writes each report once");
        report.save(file, true);
        assertEquals("84 100 5 0 1000000\n", Files.readString(file), "the durable save wrote it again");
        Files.delete(file);
        report.save(file, true);
        assertFalse(Files.exists(file), "and once forced, not again");
    }

    @Test
    void shouldNeitherLetAnOldFileHideANewReportNorTrustAGarbledOne() throws IOException
    {
        final Path file = dir.resolve(SourceReport.FILE_NAME);
        Files.writeString(file, "84 100 5 0 1000000\n");
        final SourceReport report = new SourceReport();
        report.update(90, 0, 0, 0, 2_000_000);
        report.load(file);
        assertEquals(90L, report.describe(90, 2_000_000).get("lsn"), "heard since: the file is older");

        Files.writeString(file, "84 100 garbage\n");
        final SourceReport garbled = new SourceReport();
        garbled.load(file);
        assertNull(garbled.describe(1, 2_000_000), "a report that cannot be read says nothing");
    }
}
