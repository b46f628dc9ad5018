package io.blockmover.conductor;

import java.util.List;
import java.util.Locale;
import java.util.Map;

import io.blockmover.systemd.ServiceNotifier;

/**
 * The one line systemd shows as the service's status ({@code systemctl status blockmoverd}): every group with its
 * role and state, every active copy job with its phase and progress. Built at most once a second on the
 * conductor thread (control-path work: it allocates, the data path never runs it).
 */
final class ServiceStatus
{
    private ServiceStatus()
    {
    }

    /**
     * Conductor housekeeping: pets the watchdog, and sends STATUS= when it is due and changed.
     *
     * @return work done.
     */
    static int onHousekeeping(final Conductor conductor, final ServiceNotifier notifier, final long nowNs)
    {
        int work = notifier.onDutyCycle(nowNs);
        if (notifier.isStatusDue(nowNs))
        {
            notifier.status(describe(conductor), nowNs);
            work++;
        }
        return work;
    }

    static String describe(final Conductor conductor)
    {
        final StringBuilder text = new StringBuilder(conductor.ctx().nodeName()).append(": ");
        final List<Map<String, Object>> groups = conductor.groups().summary();
        if (groups.isEmpty())
        {
            text.append("no groups");
        }
        for (int i = 0; i < groups.size(); i++)
        {
            final Map<String, Object> group = groups.get(i);
            text.append(i == 0 ? "group " : ", group ").append(group.get("name")).append(' ')
                .append(group.get("role")).append(' ').append(group.get("state"));
        }
        int active = 0;
        for (final CopyJob job : conductor.jobs())
        {
            if (!job.isPersisted() || job.state.isTerminal())
            {
                continue;
            }
            text.append(active++ == 0 ? "; job " : ", job ").append(job.id).append(' ').append(job.phase);
            if (job.size > 0)
            {
                text.append(String.format(Locale.ROOT, " %.1f%%", 100.0 * (job.size - job.bytesRemaining()) /
                    job.size));
            }
        }
        if (active == 0)
        {
            text.append("; no active jobs");
        }
        return text.toString();
    }
}
