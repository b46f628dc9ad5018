package io.blockmover.conductor;

import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.daemon.ConfigReload;
import io.blockmover.daemon.Context;
import io.blockmover.log.StderrLoggerFinder;
import io.blockmover.systemd.ServiceNotifier;

/**
 * Applies a configuration reload on the conductor thread, asked for by SIGHUP or by the control request
 * {@code reload} ({@code blockmover reload}, the unit's ExecReload). Sessions, groups and jobs keep running: the
 * new settings reach them as {@link ConfigReload} says (now, or at their next connection). A new file that is
 * invalid, or that removes a peer a group or an active job still uses, is refused whole with every problem logged,
 * and the daemon keeps its running configuration. systemd sees RELOADING=1, then READY=1 either way.
 */
final class Reloader
{
    private static final System.Logger LOG = System.getLogger("blockmoverd");

    private Reloader()
    {
    }

    /**
     * @param conductor whose configuration to reload.
     * @param client    who asked over the control socket, or null for SIGHUP.
     * @param id        request id for the reply.
     */
    static void reload(final Conductor conductor, final ControlServer.Client client, final Object id)
    {
        final ServiceNotifier notifier = conductor.serviceNotifier();
        notifier.reloading();
        final Context running = conductor.ctx();
        final String file = running.configFile() == null ? "no file (defaults and -D only)" :
            running.configFile().toString();
        try
        {
            final ConfigReload.Result result = ConfigReload.reload(running, System.getProperties());
            refuseRemovingPeersInUse(conductor, result.removedPeers());
            conductor.reconfigure(result.context());
            StderrLoggerFinder.threshold(result.context().logLevel());
            LOG.log(System.Logger.Level.INFO, "configuration reloaded from " + file + ": " +
                result.applied().size() + " changes applied, " + result.restartRequired().size() +
                " wait for a restart" + (result.addedPeers().isEmpty() ? "" : ", peers added " + result.addedPeers()) +
                (result.removedPeers().isEmpty() ? "" : ", peers removed " + result.removedPeers()));
            for (final String line : result.applied())
            {
                LOG.log(System.Logger.Level.INFO, "  applied " + line);
            }
            for (final String line : result.restartRequired())
            {
                LOG.log(System.Logger.Level.WARNING, "  not applied: " + line);
            }
            if (client != null)
            {
                final Map<String, Object> reply = new LinkedHashMap<>();
                reply.put("config_file", running.configFile() == null ? null : running.configFile().toString());
                reply.put("config_loaded_ms", System.currentTimeMillis());
                reply.put("applied", result.applied());
                reply.put("restart_required", result.restartRequired());
                reply.put("peers_added", result.addedPeers());
                reply.put("peers_removed", result.removedPeers());
                client.reply(id, reply);
            }
        }
        catch (final BlockmoverException ex)
        {
            conductor.error("configuration reload from " + file + " refused; still running with the configuration " +
                "loaded at " + Instant.ofEpochMilli(conductor.configLoadedMs()) + ". Problems:");
            for (final String line : ex.getMessage().split("\n"))
            {
                if (!line.endsWith(":"))
                {
                    LOG.log(System.Logger.Level.WARNING, "  " + line.trim());
                }
            }
            if (client != null)
            {
                client.error(id, ex.code(), "reload refused, nothing changed: " + ex.getMessage());
            }
        }
        finally
        {
            notifier.ready(conductor.serviceStatus());
        }
    }

    private static void refuseRemovingPeersInUse(final Conductor conductor, final List<String> removed)
    {
        final List<String> problems = new ArrayList<>();
        final Map<String, String> inUse = conductor.groups().peersInUse();
        for (final CopyJob job : conductor.jobs())
        {
            if (job.isPersisted() && !job.state.isTerminal())
            {
                inUse.putIfAbsent(job.peer, "job " + job.id);
            }
        }
        for (final String peer : removed)
        {
            if (inUse.containsKey(peer))
            {
                problems.add("peer '" + peer + "' is removed but " + inUse.get(peer) + " replicates with it: " +
                    "delete that first, or keep peer." + peer + ".*");
            }
        }
        if (!problems.isEmpty())
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "invalid configuration:\n  " +
                String.join("\n  ", problems));
        }
    }
}
