package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.replication.group.GroupConfig;
import io.blockmover.replication.log.RecordLog;

/**
 * Groups on disk: state.dir/groups/NAME/ holds group.json (the definition), run.json (whether the daemon stopped
 * cleanly, and in which boot), the record log and, on a source, one bitmap per volume.
 */
final class GroupStore
{
    /** Deleted destination groups remembered at most; the oldest are forgotten first. */
    static final int MAX_DELETED = 1000;

    private final Path groupsDir;
    /**
     * Destination groups deleted here, by name: from which source, and that source group's creation time, which
     * tells the same group (refused: it was deleted) from one created again since (accepted).
     */
    private final Path deletedFile;

    GroupStore(final Path stateDir)
    {
        this.groupsDir = stateDir.resolve("groups");
        this.deletedFile = stateDir.resolve("deleted-groups.json");
        try
        {
            Files.createDirectories(groupsDir);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot create " + groupsDir + ": " +
                ex.getMessage() + " (check state.dir)", ex);
        }
    }

    Path dir(final String name)
    {
        return groupsDir.resolve(name);
    }

    void save(final GroupConfig config)
    {
        try
        {
            JsonFiles.writeAtomically(dir(config.name).resolve("group.json"), config.toRecord());
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot save group " + config.name + ": " + ex, ex);
        }
    }

    /**
     * Before a group's log opens: a resize the daemon stopped in has left the new log beside the group's (written,
     * not yet in its place: dropped, the group's log is whole), or has put it in place without saving its size in
     * group.json (the file's own header says it: kept, and saved).
     *
     * @throws BlockmoverException IO_ERROR when a leftover cannot be deleted.
     */
    void adoptLogOnDisk(final GroupConfig config, final Conductor conductor)
    {
        final Path dir = dir(config.name);
        try
        {
            Files.deleteIfExists(dir.resolve(SourceGroupHandle.RESIZED_LOG_FILE));
            Files.deleteIfExists(dir.resolve(SourceGroupHandle.RESIZED_LOG_FILE + ".tmp"));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot delete the log a resize of group " +
                config.name + " left in " + dir + ": " + ex, ex);
        }
        final Path log = dir.resolve(SourceGroupHandle.LOG_FILE);
        final long onDisk = Files.exists(log) ? RecordLog.capacityOf(log) : -1;
        if (onDisk > 0 && onDisk != config.logSize)
        {
            conductor.log("group " + config.name + ": its log is " + onDisk + " bytes, group.json said " +
                config.logSize + " (the daemon stopped as a resize put the new log in place): the log's size is kept");
            config.logSize = onDisk;
            save(config);
        }
    }

    /**
     * Records whether the daemon is running with the group open (clean = false) or closed it properly, and the
     * boot it happened in: an unclean stop in an earlier boot means the host crashed and unforced data is gone.
     */
    void saveRun(final String name, final boolean clean)
    {
        try
        {
            JsonFiles.writeAtomically(dir(name).resolve("run.json"), Map.of("clean", clean, "boot_id", bootId()));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot save run state of group " + name + ": " + ex, ex);
        }
    }

    /**
     * @return "clean", "crashed" (same boot: the daemon died, the page cache survived) or "host-crashed".
     */
    String lastRun(final String name)
    {
        final Path file = dir(name).resolve("run.json");
        if (!Files.exists(file))
        {
            return "clean";
        }
        try
        {
            final Map<String, Object> run = JsonFiles.read(file);
            if (Boolean.TRUE.equals(run.get("clean")))
            {
                return "clean";
            }
            return bootId().equals(run.get("boot_id")) ? "crashed" : "host-crashed";
        }
        catch (final IOException ex)
        {
            return "host-crashed";
        }
    }

    static String bootId()
    {
        try
        {
            return Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
        }
        catch (final IOException ex)
        {
            return "unknown";
        }
    }

    /**
     * Removes the directories of groups whose create never completed (no group.json: the daemon stopped while
     * their log was being written or their partner asked, or the partner never came back for a log written for
     * it). Only at start-up, when no create is under way.
     *
     * @return the names removed.
     */
    List<String> removeUnfinished()
    {
        final List<String> removed = new ArrayList<>();
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(groupsDir))
        {
            for (final Path dir : dirs)
            {
                if (Files.isDirectory(dir) && !Files.exists(dir.resolve("group.json")))
                {
                    removed.add(dir.getFileName().toString());
                }
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot list groups in " + groupsDir + ": " + ex, ex);
        }
        for (final String name : removed)
        {
            delete(name);
        }
        return removed;
    }

    List<GroupConfig> loadAll()
    {
        final List<GroupConfig> configs = new ArrayList<>();
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(groupsDir))
        {
            for (final Path dir : dirs)
            {
                final Path file = dir.resolve("group.json");
                if (Files.isRegularFile(file))
                {
                    configs.add(GroupConfig.fromRecord(JsonFiles.read(file)));
                }
            }
        }
        catch (final IOException | RuntimeException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot load groups from " + groupsDir + ": " + ex, ex);
        }
        configs.sort(Comparator.comparing((GroupConfig c) -> c.name));
        return configs;
    }

    /**
     * Remembers that a destination group was deleted here, so that its source, still running it, cannot bring it
     * back by connecting again.
     *
     * @param config the deleted destination group.
     */
    void rememberDeleted(final GroupConfig config)
    {
        final Map<String, Object> deleted = readDeleted();
        final Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("peer", config.peer);
        entry.put("created_ms", config.createdMs);
        entry.put("deleted_ms", System.currentTimeMillis());
        deleted.remove(config.name);
        deleted.put(config.name, entry);
        // Oldest first: a host that creates and deletes groups for ever keeps only the latest deletions.
        final Iterator<String> oldest = deleted.keySet().iterator();
        while (deleted.size() > MAX_DELETED && oldest.hasNext())
        {
            oldest.next();
            oldest.remove();
        }
        writeDeleted(deleted);
    }

    /**
     * @return when the destination group of that name, from that source and of that creation, was deleted here, in
     * ms since the epoch; or -1 when it was not (none was, or the source has created the group again since).
     */
    long deletedMs(final String name, final String peer, final long createdMs)
    {
        if (!(readDeleted().get(name) instanceof Map<?, ?> entry))
        {
            return -1;
        }
        return peer.equals(entry.get("peer")) && entry.get("created_ms") instanceof Number created &&
            created.longValue() == createdMs && entry.get("deleted_ms") instanceof Number when ? when.longValue() : -1;
    }

    /**
     * Forgets a deleted group: a group of that name exists here again.
     */
    void forgetDeleted(final String name)
    {
        final Map<String, Object> deleted = readDeleted();
        if (deleted.remove(name) != null)
        {
            writeDeleted(deleted);
        }
    }

    private Map<String, Object> readDeleted()
    {
        try
        {
            return Files.exists(deletedFile) ? new LinkedHashMap<>(JsonFiles.read(deletedFile)) :
                new LinkedHashMap<>();
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot read " + deletedFile + ": " + ex + " (remove " +
                "it: it only stops sources from bringing deleted destination groups back)", ex);
        }
    }

    private void writeDeleted(final Map<String, Object> deleted)
    {
        try
        {
            if (deleted.isEmpty())
            {
                Files.deleteIfExists(deletedFile);
            }
            else
            {
                JsonFiles.writeAtomically(deletedFile, deleted);
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot write " + deletedFile + ": " + ex, ex);
        }
    }

    /**
     * Deletes a group's directory and everything in it. A log still being written there (a create cancelled
     * meanwhile) deletes its own temporary file as it stops, and may do so during the walk: a file gone already is
     * not a failure, and the walk is tried again while files come and go.
     */
    void delete(final String name)
    {
        final Path dir = dir(name);
        for (int attempt = 1; ; attempt++)
        {
            if (!Files.exists(dir))
            {
                return;
            }
            try (Stream<Path> files = Files.walk(dir))
            {
                for (final Path p : files.sorted(Comparator.reverseOrder()).toList())
                {
                    Files.deleteIfExists(p);
                }
                return;
            }
            catch (final IOException | java.io.UncheckedIOException ex)
            {
                final Throwable cause = ex instanceof java.io.UncheckedIOException u ? u.getCause() : ex;
                final boolean racing = cause instanceof java.nio.file.NoSuchFileException ||
                    cause instanceof java.nio.file.DirectoryNotEmptyException;
                if (!racing || attempt == 5)
                {
                    throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot delete " + dir + ": " + cause, cause);
                }
            }
        }
    }
}
