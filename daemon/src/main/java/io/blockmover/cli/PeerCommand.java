package io.blockmover.cli;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.daemon.Context;

/**
 * blockmover peer: the configured peers and their bandwidth limits.
 */
@Command(name = "peer", mixinStandardHelpOptions = true,
    subcommands = {
        PeerCommand.Show.class,
        PeerCommand.Set.class,
        CommandLine.HelpCommand.class},
    description = {
        "Show the configured peers and change their bandwidth limit at run time.",
        "",
        "A peer's limit (peer.NAME.max.rate in the configuration, 'peer set' at run time) caps the bytes per",
        "second that copy jobs, initial syncs and resyncs, and the shipping of async groups send to it, all",
        "together. It does not slow the foreground writes of sync groups: like DRBD's c-max-rate and Storage",
        "Replica's limits, it applies to catch-up traffic, because a limit on synchronous writes would add its",
        "wait to every write an application makes. A sync group's resync is limited; its writes are not."})
final class PeerCommand implements Callable<Integer>
{
    @Override
    public Integer call()
    {
        new CommandLine(this).usage(System.out);
        return 2;
    }

    static String maxRateSuffix(final Object maxRate)
    {
        if (!(maxRate instanceof Number n))
        {
            return "";
        }
        return n.longValue() == 0 ? ", no rate limit" : ", max rate " + rate(n.longValue());
    }

    static String rate(final long bytesPerSecond)
    {
        return bytesPerSecond == 0 ? "unlimited" :
            Format.bytes(bytesPerSecond) + "/s (" + String.format(Locale.ROOT, "%.1f MB/s", bytesPerSecond / 1e6) + ")";
    }

    static void print(final Map<String, Object> p)
    {
        System.out.printf(Locale.ROOT, "peer %s at %s, transport %s: max rate %s (%s)%n", p.get("name"),
            p.get("address"), p.get("transport_requested"), rate(((Number)p.get("max_rate")).longValue()),
            "runtime".equals(p.get("max_rate_source")) ? "set with 'blockmover peer set', config says " +
                rate(((Number)p.get("max_rate_config")).longValue()) : "from the configuration");
    }

    /**
     * blockmover peer show.
     */
    @Command(name = "show", mixinStandardHelpOptions = true,
        description = {"Show one peer, or every configured peer.", "",
            "Its address, requested transport and bandwidth limit (max_rate in bytes per second, 0 = unlimited;",
            "max_rate_source says whether it comes from the configuration or from 'peer set')."})
    static final class Show extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", arity = "0..1", paramLabel = "NAME", description = "a configured peer")
        String name;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final Map<String, Object> args = new LinkedHashMap<>();
            if (name != null)
            {
                args.put("name", name);
            }
            final Object result = call("peer-show", args);
            if (json)
            {
                printJson(result);
            }
            else if (result instanceof List<?> list)
            {
                for (final Object p : list)
                {
                    print((Map<String, Object>)p);
                }
            }
            else
            {
                print((Map<String, Object>)result);
            }
            return 0;
        }
    }

    /**
     * blockmover peer set.
     */
    @Command(name = "set", mixinStandardHelpOptions = true, sortOptions = false,
        description = {
            "Change a peer's bandwidth limit now.",
            "",
            "Running copies, resyncs and async shipping follow it at their next frame. The limit is kept in the",
            "state directory (peer-rates.json), so it survives a restart of blockmoverd, and wins over",
            "peer.NAME.max.rate until --reset.",
            "",
            "Applies to: copy jobs, initial sync and resync of groups, and the shipping of async groups. Not to",
            "the foreground writes of sync groups (that would slow the application; see 'blockmover peer --help')",
            "nor to topology-test probes."})
    static final class Set extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "a configured peer")
        String name;

        @Option(names = "--max-rate", paramLabel = "RATE", description = "bytes per second, with k, m, g suffixes " +
            "in powers of 1024 (200m = 200 MiB/s); 0 = unlimited")
        String maxRate;

        @Option(names = "--reset", description = "forget the run-time limit: peer.NAME.max.rate applies again")
        boolean reset;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            if ((maxRate == null) == !reset)
            {
                throw new BlockmoverException(ErrorCode.BAD_REQUEST, "give --max-rate RATE or --reset");
            }
            final Map<String, Object> args = new LinkedHashMap<>();
            args.put("name", name);
            if (reset)
            {
                args.put("reset", true);
            }
            else
            {
                try
                {
                    args.put("max_rate", Context.parseSize(maxRate));
                }
                catch (final NumberFormatException ex)
                {
                    throw new BlockmoverException(ErrorCode.BAD_REQUEST, "--max-rate " + maxRate + " is not a rate " +
                        "(bytes per second, e.g. 200m; 0 = unlimited)");
                }
            }
            final Map<String, Object> result = (Map<String, Object>)call("peer-set", args);
            if (json)
            {
                printJson(result);
            }
            else
            {
                print(result);
            }
            return 0;
        }
    }
}
