package io.blockmover.cnc;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import org.agrona.concurrent.status.AtomicCounter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class CncFileTest
{
    @TempDir
    Path dir;

    private static Map<String, Long> countersOf(final CncFile file)
    {
        final Map<String, Long> counters = new LinkedHashMap<>();
        file.reader().forEach((value, id, label) -> counters.put(label, value));
        return counters;
    }

    @Test
    void shouldShowSystemCountersNodePidAndHeartbeatToReader()
    {
        final Path path = dir.resolve("run/blockmover/counters.dat");
        final long before = System.currentTimeMillis();
        try (CncFile daemon = CncFile.create(path, "site-a", 4242, 64))
        {
            daemon.counter(SystemCounter.CHUNKS_SENT).set(17);
            daemon.counter(SystemCounter.ERRORS).increment();
            daemon.heartbeat(before + 5_000);
            final AtomicCounter job = daemon.newCounter("job 1 bytes remaining", 2);
            job.set(123_456);

            try (CncFile reader = CncFile.openReadOnly(path))
            {
                assertEquals("site-a", reader.nodeName());
                assertEquals(4242, reader.pid());
                assertEquals(before + 5_000, reader.heartbeatMs());
                assertTrue(reader.startTimeMs() >= before, "start time " + reader.startTimeMs());

                final Map<String, Long> counters = countersOf(reader);
                for (final SystemCounter counter : SystemCounter.values())
                {
                    assertTrue(counters.containsKey(counter.label()), "label '" + counter.label() + "'");
                }
                assertEquals(17L, counters.get("chunks sent"));
                assertEquals(1L, counters.get("errors"));
                assertEquals(0L, counters.get("bytes received"));
                assertEquals(123_456L, counters.get("job 1 bytes remaining"));
                assertEquals(SystemCounter.values().length + 1, counters.size());

                daemon.counter(SystemCounter.CHUNKS_SENT).increment();
                assertEquals(18L, countersOf(reader).get("chunks sent"), "the reader sees live values");
            }
        }
    }

    @Test
    void shouldTruncateLongNodeName()
    {
        final Path path = dir.resolve("long.dat");
        final String name = "n".repeat(100);
        try (CncFile daemon = CncFile.create(path, name, 1, 32);
            CncFile reader = CncFile.openReadOnly(path))
        {
            assertEquals(CncFileDescriptor.MAX_NODE_NAME_LENGTH, reader.nodeName().length());
            assertNotNull(daemon.counter(SystemCounter.JOBS_FAILED));
        }
    }

    @Test
    void shouldReplaceOldFileOnCreate()
    {
        final Path path = dir.resolve("counters.dat");
        try (CncFile old = CncFile.create(path, "old", 1, 32))
        {
            old.counter(SystemCounter.ERRORS).set(99);
        }
        try (CncFile fresh = CncFile.create(path, "new", 2, 32);
            CncFile reader = CncFile.openReadOnly(path))
        {
            assertEquals("new", reader.nodeName());
            assertEquals(0L, countersOf(reader).get("errors"));
            assertEquals(2, fresh.pid());
        }
    }

    @Test
    void shouldReportMissingFileAsNotFound()
    {
        final Path missing = dir.resolve("absent/counters.dat");

        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> CncFile.openReadOnly(missing));

        assertEquals(ErrorCode.NOT_FOUND, ex.code());
        assertTrue(ex.getMessage().contains(missing.toString()), ex.getMessage());
        assertTrue(ex.getMessage().contains("--counters-file"), "names the fix: " + ex.getMessage());
    }

    @Test
    void shouldReportFileOfOtherFormatAsNotFound() throws IOException
    {
        final Path other = dir.resolve("other.dat");
        Files.write(other, new byte[4096]);

        final BlockmoverException ex = assertThrows(BlockmoverException.class, () -> CncFile.openReadOnly(other));

        assertEquals(ErrorCode.NOT_FOUND, ex.code());
        assertTrue(ex.getMessage().contains("not a blockmover counters file"), ex.getMessage());
    }

    /**
     * The daemon creates the file empty and then maps it: a reader can meet a file shorter than the header, and
     * must say what the magic check says ("still creating it"), not fail with a bounds error.
     */
    @Test
    void shouldReportEmptyOrShortFileAsNotFound() throws IOException
    {
        final Path empty = dir.resolve("empty.dat");
        Files.write(empty, new byte[0]);
        final Path shortFile = dir.resolve("short.dat");
        Files.write(shortFile, new byte[16]);

        final BlockmoverException emptyEx = assertThrows(BlockmoverException.class,
            () -> CncFile.openReadOnly(empty));
        final BlockmoverException shortEx = assertThrows(BlockmoverException.class,
            () -> CncFile.openReadOnly(shortFile));

        assertEquals(ErrorCode.NOT_FOUND, emptyEx.code());
        assertEquals(ErrorCode.NOT_FOUND, shortEx.code());
    }

    @Test
    void shouldFailCreateInUnwritablePlaceNamingTheSetting() throws IOException
    {
        final Path blocker = dir.resolve("not-a-dir");
        Files.write(blocker, new byte[1]);

        final BlockmoverException ex = assertThrows(BlockmoverException.class,
            () -> CncFile.create(blocker.resolve("counters.dat"), "a", 1, 8));

        assertEquals(ErrorCode.CONFIG_INVALID, ex.code());
        assertTrue(ex.getMessage().contains("counters.file"), ex.getMessage());
    }
}
