package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

/**
 * Jobs on disk: {@code STATE_DIR/jobs/ID/job.json} (the definition and outcome) beside
 * {@code STATE_DIR/jobs/ID/bitmap} (the progress). Records are written to a temporary file, forced and renamed,
 * so a crash leaves the old record or the new, never half of one. Conductor thread only.
 */
final class JobStore
{
    private final Path jobsDir;

    JobStore(final Path stateDir)
    {
        this.jobsDir = stateDir.resolve("jobs");
        try
        {
            Files.createDirectories(jobsDir);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot create " + jobsDir + ": " +
                ex.getMessage() + " (check state.dir)", ex);
        }
    }

    Path jobDir(final long id)
    {
        return jobsDir.resolve(Long.toString(id));
    }

    Path bitmapPath(final long id)
    {
        return jobDir(id).resolve("bitmap");
    }

    /**
     * @return the next free job id: one more than the largest on disk.
     */
    long nextId()
    {
        long max = 0;
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(jobsDir))
        {
            for (final Path dir : dirs)
            {
                try
                {
                    max = Math.max(max, Long.parseLong(dir.getFileName().toString()));
                }
                catch (final NumberFormatException ex)
                {
                    continue;
                }
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot list " + jobsDir + ": " + ex, ex);
        }
        return max + 1;
    }

    void save(final long id, final Map<String, Object> record)
    {
        final Path dir = jobDir(id);
        try
        {
            JsonFiles.writeAtomically(dir.resolve("job.json"), record);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot save job " + id + " in " + dir + ": " + ex, ex);
        }
    }

    List<Map<String, Object>> loadAll()
    {
        final List<Map<String, Object>> records = new ArrayList<>();
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(jobsDir))
        {
            for (final Path dir : dirs)
            {
                final Path file = dir.resolve("job.json");
                if (Files.isRegularFile(file))
                {
                    records.add(JsonFiles.read(file));
                }
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot load jobs from " + jobsDir + ": " + ex, ex);
        }
        records.sort((a, b) -> Long.compare(((Number)a.get("id")).longValue(), ((Number)b.get("id")).longValue()));
        return records;
    }
}
