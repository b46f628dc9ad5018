package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;

import io.blockmover.io.DurableFiles;

/**
 * Small JSON state files (job.json, group.json) written so that a crash leaves the old or the new version,
 * never a torn one ({@link DurableFiles}).
 */
final class JsonFiles
{
    private JsonFiles()
    {
    }

    static void writeAtomically(final Path file, final Map<String, Object> record) throws IOException
    {
        DurableFiles.replace(file, JSON.std.with(JSON.Feature.PRETTY_PRINT_OUTPUT).asBytes(record));
    }

    static Map<String, Object> read(final Path file) throws IOException
    {
        return JSON.std.mapFrom(Files.readAllBytes(file));
    }
}
