package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.replication.group.GroupConfig;

/**
 * Groups on disk: state.dir/groups/NAME/ holds group.json (the definition), run.json (whether the daemon stopped
 * cleanly, and in which boot), the record log and, on a source, one bitmap per volume.
 */
final class GroupStore
{
    private final Path groupsDir;

    GroupStore(final Path stateDir)
    {
        this.groupsDir = stateDir.resolve("groups");
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

    void delete(final String name)
    {
        final Path dir = dir(name);
        if (!Files.exists(dir))
        {
            return;
        }
        try (Stream<Path> files = Files.walk(dir))
        {
            for (final Path p : files.sorted(Comparator.reverseOrder()).toList())
            {
                Files.delete(p);
            }
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot delete " + dir + ": " + ex, ex);
        }
    }
}
