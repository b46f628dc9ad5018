package io.blockmover.cli;

import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

import picocli.CommandLine.Command;

/**
 * blockmover reload: the synchronous form of SIGHUP, used by the unit's ExecReload so that
 * {@code systemctl reload blockmoverd} waits for the reload and fails when the new file is refused.
 */
@Command(name = "reload", mixinStandardHelpOptions = true,
    description = {
        "Re-read blockmoverd's configuration file now, without dropping replication.",
        "",
        "The same as 'systemctl reload blockmoverd' or SIGHUP, but waits and reports. Peers (address, key,",
        "transport), log.level and the timing settings (peer.timeout, heartbeat.interval, connect.timeout,",
        "reconnect.max.interval, bitmap.force.interval, flush.bytes, flush.interval, digest.batch,",
        "verify.rounds, group.log.size) are applied: now, or at the next connection. Settings that need a",
        "restart (listen, control.socket, state.dir, chunk.length, slab.slots, nbd.*, ...) keep their running",
        "value and are listed. An invalid file is refused whole, every problem is listed, nothing changes",
        "(exit 4)."})
final class ReloadCommand extends BlockmoverCli.Common implements Callable<Integer>
{
    @Override
    @SuppressWarnings("unchecked")
    public Integer call()
    {
        final Map<String, Object> result = (Map<String, Object>)call("reload", Map.of());
        if (json)
        {
            printJson(result);
            return 0;
        }
        final List<String> applied = (List<String>)result.get("applied");
        final List<String> restart = (List<String>)result.get("restart_required");
        System.out.println("configuration reloaded from " + (result.get("config_file") == null ?
            "no file (defaults and -D only)" : result.get("config_file")) + ": " + applied.size() +
            " changes applied, " + restart.size() + " wait for a restart");
        for (final String line : applied)
        {
            System.out.println("  applied      " + line);
        }
        for (final String line : restart)
        {
            System.out.println("  not applied  " + line);
        }
        return 0;
    }
}
