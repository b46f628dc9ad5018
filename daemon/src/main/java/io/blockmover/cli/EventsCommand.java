package io.blockmover.cli;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.Callable;

import com.fasterxml.jackson.jr.ob.JSON;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.events.Event;
import io.blockmover.events.EventFormat;

/**
 * blockmover events: the daemon's event stream, like drbdsetup events2.
 */
@Command(name = "events", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Print the state of every object of blockmoverd, then every change.",
        "",
        "One line each, like 'drbdsetup events2'. First an 'exists' line per object:",
        "  exists daemon node=a errors=0",
        "  exists group name=sql role=source state=replicating mode=async",
        "    peer=b transport=tcp rpo=ok rpo_target=30s",
        "  exists volume group=sql volume=0 path=/dev/vdb size=... dirty_bytes=0",
        "    nbd_uri=...",
        "  exists peer name=b address=10.0.0.2:7788 connection=connected",
        "    transport=tcp",
        "  exists job id=3 state=running phase=copying ... bytes_done=...",
        "then the marker 'exists -', then 'create', 'change' (with only the",
        "changed attributes) and 'destroy' lines as things happen: group states",
        "(connecting, initial-sync, resync, catching-up, replicating, degraded,",
        "suspended; waiting or receiving on a destination), role switches, peers",
        "connecting and disconnecting, jobs, errors, rpo=exceeded / rpo=ok",
        "for a group with an RPO target, and switching=yes or",
        "log_resize=writing|waiting|copying while they last. Progress",
        "(dirty_bytes, bytes_done) is reported at most once a second per",
        "object. A value with spaces is a JSON string; a value that went away",
        "is '-'.",
        "",
        "Runs until interrupted (exit 0) or until the daemon ends the stream",
        "with a last line 'end - reason=\"...\"' (exit 0): when it stops, or when",
        "this client reads too slowly (then run it again for a fresh snapshot)."})
final class EventsCommand extends BlockmoverCli.Common implements Callable<Integer>
{
    @Option(names = "--now", description = "print the snapshot and the marker, then exit")
    boolean now;

    @Option(names = "--timestamps", description = "prefix each line with its ISO-8601 time (a \"time\" field " +
        "with --json)")
    boolean timestamps;

    @Override
    @SuppressWarnings("unchecked")
    public Integer call()
    {
        try (ControlClient client = connect())
        {
            installInterruptHandler();
            client.call("events", Map.of("now", now));
            String line;
            while ((line = client.readLine()) != null)
            {
                final Map<String, Object> wire;
                try
                {
                    wire = (Map<String, Object>)JSON.std.mapFrom(line).get("event");
                }
                catch (final IOException ex)
                {
                    throw new BlockmoverException(ErrorCode.INTERNAL, "blockmoverd sent a malformed event: " + line);
                }
                if (wire == null)
                {
                    continue;
                }
                print(wire);
                if (Event.END.equals(wire.get("action")) ||
                    (now && Event.EXISTS.equals(wire.get("action")) && Event.NO_TYPE.equals(wire.get("type"))))
                {
                    return 0;
                }
            }
            print(Event.end(System.currentTimeMillis(), "blockmoverd closed the connection (did it stop?)")
                .toWire());
            return 0;
        }
    }

    private void print(final Map<String, Object> wire)
    {
        if (json)
        {
            try
            {
                System.out.println(JSON.std.asString(EventFormat.json(wire, timestamps)));
            }
            catch (final IOException ex)
            {
                throw new BlockmoverException(ErrorCode.INTERNAL, "cannot print JSON: " + ex, ex);
            }
        }
        else
        {
            System.out.println(EventFormat.text(wire, timestamps));
        }
        System.out.flush();
    }

    /**
     * Ctrl-C is the normal way to stop watching: print a last line and exit 0, not the JVM's 130.
     */
    private void installInterruptHandler()
    {
        final sun.misc.SignalHandler handler = (signal) ->
        {
            print(Event.end(System.currentTimeMillis(), "interrupted").toWire());
            Runtime.getRuntime().halt(0);
        };
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), handler);
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), handler);
    }
}
