package io.blockmover.conductor;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;

/**
 * Small JSON state files (job.json, group.json) written so that a crash leaves the old or the new version,
 * never a torn one: write a temporary file, force it, rename over.
 */
final class JsonFiles
{
    private JsonFiles()
    {
    }

    static void writeAtomically(final Path file, final Map<String, Object> record) throws IOException
    {
        final Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.createDirectories(file.getParent());
        Files.write(tmp, JSON.std.with(JSON.Feature.PRETTY_PRINT_OUTPUT).asBytes(record));
        try (FileChannel channel = FileChannel.open(tmp, StandardOpenOption.WRITE))
        {
            channel.force(true);
        }
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }

    static Map<String, Object> read(final Path file) throws IOException
    {
        return JSON.std.mapFrom(Files.readAllBytes(file));
    }
}
