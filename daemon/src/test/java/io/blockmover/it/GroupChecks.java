package io.blockmover.it;

import java.io.IOException;
import java.nio.file.Path;
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
}
