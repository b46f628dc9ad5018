package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import io.blockmover.io.Volume;
import io.blockmover.replication.log.RecordLog;

/**
 * Source groups for tests that need a real one behind something else (a verifier, the NBD server): one zeroed
 * volume, a new log, async with no partner, and no dirty region (as after the initial sync).
 */
public final class TestSourceGroups
{
    private TestSourceGroups()
    {
    }

    /**
     * @param dir        the group's directory; its log is {@code dir/log}.
     * @param volumeFile created, zeroed, {@code volumeSize} bytes.
     * @param volumeSize bytes.
     * @param logSize    bytes.
     * @param region     region length in bytes.
     * @return the open group, named "g"; its export is "g/" and the volume file's name.
     * @throws IOException when a file cannot be made.
     */
    public static SourceGroup openAsync(final Path dir, final Path volumeFile, final long volumeSize,
        final long logSize, final int region) throws IOException
    {
        Files.write(volumeFile, new byte[(int)volumeSize]);
        final GroupConfig config = new GroupConfig("g", GroupConfig.ROLE_SOURCE, "peer", GroupMode.ASYNC, false,
            List.of(new GroupConfig.VolumePair(volumeFile.toString(), "/dst", volumeSize)), logSize, region, 0);
        final RecordLog log = RecordLog.open(dir.resolve("log"), logSize, region);
        log.reset(1);
        final SourceGroup group = new SourceGroup(config, dir, new Volume[] {Volume.open(volumeFile, true)}, log,
            false);
        group.dirty(0).clearAll();
        return group;
    }
}
