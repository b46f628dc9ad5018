package io.blockmover.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;

/**
 * Group helpers shared by the group ITs: create and delete through the real command, read 'group status', wait
 * until both sides hold the same writes, compare the volumes. Site-a is always the source, site-b the destination.
 */
final class GroupChecks
{
    private GroupChecks()
    {
    }

    /**
     * Runs 'group create NAME --peer site-b ... --json' on site-a; exit 0 expected.
     *
     * @return the status it printed.
     */
    static Map<String, Object> create(final Testbed testbed, final String name, final String... options)
        throws IOException
    {
        final List<String> args = new ArrayList<>(List.of("group", "create", name, "--peer", "site-b", "--json"));
        args.addAll(List.of(options));
        final Run run = testbed.cli("site-a", args.toArray(new String[0])).expect(0);
        return JSON.std.mapFrom(run.stdout());
    }

    /**
     * Deletes the group on both sites (through the control API, as 'group delete NAME' does).
     */
    static void delete(final Testbed testbed, final String name)
    {
        testbed.call("site-a", "group-delete", Map.of("name", name));
        testbed.call("site-b", "group-delete", Map.of("name", name));
    }

    static long number(final Map<String, Object> map, final String key)
    {
        final Object value = map.get(key);
        if (!(value instanceof Number))
        {
            throw new AssertionError("no number '" + key + "' in " + map);
        }
        return ((Number)value).longValue();
    }

    @SuppressWarnings("unchecked")
    static long lsn(final Map<String, Object> status, final String key)
    {
        return number((Map<String, Object>)status.get("lsn"), key);
    }

    /**
     * @return a source's "log" object: size, used, discarded.
     */
    @SuppressWarnings("unchecked")
    static Map<String, Object> log(final Map<String, Object> status)
    {
        return (Map<String, Object>)status.get("log");
    }

    static String state(final Map<String, Object> status)
    {
        return String.valueOf(status.get("state"));
    }

    /**
     * @return the group's NBD export names, in volume order.
     */
    @SuppressWarnings("unchecked")
    static String[] exports(final Map<String, Object> status)
    {
        final List<Map<String, Object>> volumes = (List<Map<String, Object>>)status.get("volumes");
        final String[] exports = new String[volumes.size()];
        for (int i = 0; i < exports.length; i++)
        {
            exports[i] = String.valueOf(volumes.get(i).get("export"));
        }
        return exports;
    }

    /**
     * @return the NBD URI of volume {@code index} as 'group status' gives it.
     */
    @SuppressWarnings("unchecked")
    static String uri(final Map<String, Object> status, final int index)
    {
        return String.valueOf(((List<Map<String, Object>>)status.get("volumes")).get(index).get("nbd_uri"));
    }

    /**
     * Waits until the source is replicating with everything durable on the destination, and the destination has
     * applied everything it holds, which is everything the source logged.
     *
     * @return the source's status at that moment.
     */
    static Map<String, Object> awaitReplicated(final Testbed testbed, final String name, final long timeoutSeconds)
    {
        final Object[] last = new Object[2];
        try
        {
            Testbed.await("group " + name + " replicated on both sides", timeoutSeconds, () ->
            {
                final Map<String, Object> source = testbed.group("site-a", name);
                final Map<String, Object> destination = testbed.group("site-b", name);
                last[0] = source;
                last[1] = destination;
                final long published = lsn(source, "last");
                return "replicating".equals(state(source)) && number(source, "dirty_regions") == 0 &&
                    lsn(source, "durable") == published && lsn(destination, "held") == published &&
                    lsn(destination, "applied") == published;
            });
        }
        catch (final AssertionError ex)
        {
            throw new AssertionError(ex.getMessage() + "\nsource: " + last[0] + "\ndestination: " + last[1], ex);
        }
        return testbed.group("site-a", name);
    }

    /**
     * Waits until the destination has applied everything it holds and nothing more arrives (its source is gone).
     *
     * @return the destination's status.
     */
    static Map<String, Object> awaitDestinationSettled(final Testbed testbed, final String name,
        final long timeoutSeconds)
    {
        final long[] seen = {-1, 0};
        Testbed.await("the destination of " + name + " to apply all it holds", timeoutSeconds, () ->
        {
            final Map<String, Object> destination = testbed.group("site-b", name);
            final long held = lsn(destination, "held");
            final boolean settled = "waiting".equals(state(destination)) && lsn(destination, "applied") == held;
            if (settled && held == seen[0])
            {
                seen[1]++;
            }
            else
            {
                seen[1] = 0;
            }
            seen[0] = held;
            return seen[1] >= 3;
        });
        return testbed.group("site-b", name);
    }

    /**
     * Asserts each source volume equals its destination volume over {@code size} bytes.
     */
    static void assertSameVolumes(final Path[] sources, final Path[] destinations, final long size)
        throws IOException
    {
        for (int i = 0; i < sources.length; i++)
        {
            final String difference = Volumes.firstDifference(sources[i], destinations[i], size);
            if (difference != null)
            {
                throw new AssertionError(sources[i] + " and " + destinations[i] + " differ at " + difference);
            }
        }
    }

    /**
     * @param marker text the block repeats.
     * @return a 64 KiB block of the marker repeated, to write through an export and find again in a log.
     */
    static byte[] markedBlock(final String marker)
    {
        final byte[] text = marker.getBytes(StandardCharsets.US_ASCII);
        final byte[] block = new byte[64 * 1024];
        for (int i = 0; i < block.length; i++)
        {
            block[i] = text[i % text.length];
        }
        return block;
    }

    /**
     * Changes one byte of the first record in a site's log of the group that holds the marked block, through the
     * page cache the daemon maps: what a bad disk or memory under the log would leave.
     */
    static void damageMarkedRecord(final Testbed testbed, final String site, final String name, final byte[] block)
        throws IOException
    {
        final Path log = groupLog(testbed, site, name);
        final byte[] all = Files.readAllBytes(log);
        final int length = 1024;
        for (int i = 0; i + length <= all.length; i++)
        {
            if (Arrays.equals(all, i, i + length, block, 0, length))
            {
                flipByte(log, i + 1000, all[i + 1000]);
                return;
            }
        }
        throw new AssertionError("the marked record is not in " + log);
    }

    /**
     * Flips a bit of the first digest of a VERIFY record of the given job in a group's log file at a site, as its
     * disk or memory might: found by its payload's first bytes, the job id (little endian).
     */
    static void damageVerifyRecord(final Testbed testbed, final String site, final String name, final long jobId)
        throws IOException
    {
        final Path log = groupLog(testbed, site, name);
        final byte[] id = ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(0, jobId).array();
        // The verify appends its records from the resyncer's thread, after 'group-verify' has answered: on a busy
        // host the first one came after the test looked once (a suite run failed so).
        Testbed.await("a VERIFY record of job " + jobId + " in " + log, 30, () ->
        {
            try
            {
                final byte[] all = Files.readAllBytes(log);
                for (int i = 0; i + 28 <= all.length; i++)
                {
                    if (Arrays.equals(all, i, i + 8, id, 0, 8))
                    {
                        flipByte(log, i + 24, all[i + 24]);
                        return true;
                    }
                }
                return false;
            }
            catch (final IOException ex)
            {
                throw new UncheckedIOException(ex);
            }
        });
    }

    private static Path groupLog(final Testbed testbed, final String site, final String name) throws IOException
    {
        try (java.util.stream.Stream<Path> files = Files.walk(testbed.dir.resolve(site)))
        {
            return files.filter(f -> f.endsWith(Path.of(name, "log"))).findFirst().orElseThrow();
        }
    }

    private static void flipByte(final Path file, final long at, final byte was) throws IOException
    {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE))
        {
            channel.write(ByteBuffer.wrap(new byte[] {(byte)~was}), at);
        }
    }
}
