package io.blockmover.replication.group;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import io.blockmover.io.DurableFiles;

/**
 * The destination's durable answer to "may these volumes be used without the source?", DRBD's Inconsistent and
 * UpToDate disk states kept in a small file of the group's state directory: either {@code inconsistent} (an
 * initial sync or a resync is unfinished: blocks of different moments are mixed) or {@code clean-through N}
 * (the volumes were forced after applying LSN {@code N}, which the source had confirmed as a point with nothing left
 * to resync, and no resync record after {@code N} has reached them).
 * <p>
 * The in-memory check needs the source's word since the daemon started, but a failover happens exactly when that
 * word cannot come. Written only at transitions (file and directory forced): {@code inconsistent} before the first
 * resync write after a clean point, so a crash never leaves a mixed image unmarked; {@code clean-through N} once
 * the volumes are forced past a confirmed point. After a crash the log replays records from before the release
 * point; resync records at or below {@code N} are part of the clean state and do not change it.
 * <p>
 * No file: a group created by a daemon that did not keep it, treated as inconsistent until the source confirms.
 */
public final class DurableConsistency
{
    public static final String FILE_NAME = "consistency";
    /** {@link #cleanThroughLsn()} of volumes that may be mixed. */
    public static final long INCONSISTENT = -1;
    private static final String INCONSISTENT_TEXT = "inconsistent";
    private static final String CLEAN_PREFIX = "clean-through ";
    private final Path file;
    private volatile long cleanThroughLsn;

    /**
     * @param groupDir the group's state directory.
     */
    public DurableConsistency(final Path groupDir)
    {
        this.file = groupDir.resolve(FILE_NAME);
        this.cleanThroughLsn = read(file);
    }

    private static long read(final Path file)
    {
        try
        {
            final String text = Files.readString(file, StandardCharsets.US_ASCII).trim();
            if (text.startsWith(CLEAN_PREFIX))
            {
                return Long.parseLong(text.substring(CLEAN_PREFIX.length()).trim());
            }
            return INCONSISTENT;
        }
        catch (final IOException | NumberFormatException ex)
        {
            return INCONSISTENT;
        }
    }

    /**
     * @return the LSN through which the volumes are durably a consistent prefix, or {@link #INCONSISTENT}.
     */
    public long cleanThroughLsn()
    {
        return cleanThroughLsn;
    }

    /**
     * Records durably that the volumes may be mixed; returns once that survives a power loss.
     */
    public void markInconsistent()
    {
        if (cleanThroughLsn != INCONSISTENT)
        {
            write(INCONSISTENT_TEXT);
            cleanThroughLsn = INCONSISTENT;
        }
    }

    /**
     * Records durably that the volumes, forced, are a consistent prefix through {@code lsn} (0: from the start).
     *
     * @param lsn the confirmed clean point, already applied and forced.
     */
    public void markClean(final long lsn)
    {
        write(CLEAN_PREFIX + lsn);
        cleanThroughLsn = lsn;
    }

    private void write(final String text)
    {
        try
        {
            DurableFiles.replace(file, (text + "\n").getBytes(StandardCharsets.US_ASCII));
        }
        catch (final IOException ex)
        {
            throw new UncheckedIOException("cannot write " + file + ": " + ex.getMessage(), ex);
        }
    }
}
