package io.blockmover.conductor;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

import io.blockmover.metrics.GroupCounters;

/**
 * Copies every group's figures into the counters file once a second ({@link GroupCounters}): counters appear with
 * a group, are replaced when its role changes (a switch), and are freed when it goes. Histograms become counters
 * holding their p50/p99/p99.9, so readers of the file need nothing but Agrona's counters layout. Conductor thread
 * only.
 */
final class GroupMetricsPublisher implements AutoCloseable
{
    /** How often the counters are refreshed. */
    static final long INTERVAL_NS = 1_000_000_000L;

    private final Conductor conductor;
    private final Map<String, GroupCounters> byGroup = new HashMap<>();
    private final Set<String> seen = new HashSet<>();

    GroupMetricsPublisher(final Conductor conductor)
    {
        this.conductor = conductor;
    }

    void update()
    {
        final List<Map<String, Object>> statuses = conductor.groups().statuses();
        seen.clear();
        for (final Map<String, Object> status : statuses)
        {
            final String name = String.valueOf(status.get("name"));
            final String role = String.valueOf(status.get("role"));
            GroupCounters counters = byGroup.get(name);
            if (counters != null && !counters.role().equals(role))
            {
                counters.close();
                counters = null;
            }
            if (counters == null)
            {
                counters = new GroupCounters(conductor.cnc(), name, role, String.valueOf(status.get("peer")));
                byGroup.put(name, counters);
            }
            counters.update(status);
            seen.add(name);
        }
        for (final Iterator<Map.Entry<String, GroupCounters>> it = byGroup.entrySet().iterator(); it.hasNext();)
        {
            final Map.Entry<String, GroupCounters> entry = it.next();
            if (!seen.contains(entry.getKey()))
            {
                entry.getValue().close();
                it.remove();
            }
        }
    }

    @Override
    public void close()
    {
        for (final GroupCounters counters : byGroup.values())
        {
            counters.close();
        }
        byGroup.clear();
    }
}
