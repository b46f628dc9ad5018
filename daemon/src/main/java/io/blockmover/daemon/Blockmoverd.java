package io.blockmover.daemon;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Callable;

import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.ShutdownSignalBarrier;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import sun.misc.Signal;

import io.blockmover.BlockmoverException;
import io.blockmover.cnc.CncFile;
import io.blockmover.cnc.SystemCounter;
import io.blockmover.conductor.Conductor;
import io.blockmover.log.StderrLoggerFinder;
import io.blockmover.systemd.ServiceNotifier;

/**
 * blockmoverd: the replication daemon. Validates its whole configuration before any thread starts, then runs the
 * conductor agent until SIGTERM or SIGINT, and on the way out stops every session with its volumes forced and
 * its bitmaps written, and removes its control socket. Jobs persisted in the state directory resume at the next
 * start.
 */
@Command(
    name = "blockmoverd",
    mixinStandardHelpOptions = true,
    versionProvider = Blockmoverd.Version.class,
    sortOptions = false,
    description = {
        "Block-volume replication daemon. One per host; systemd runs it, the blockmover command drives it.",
        "",
        "Configuration is a properties file (--config); any property may also be",
        "given as -Dblockmover.NAME=VALUE, which wins. Peers are configured with",
        "peer.NAME.address=HOST:PORT, peer.NAME.key.file=FILE (mode 0600, the same",
        "key on both hosts) and peer.NAME.transport=auto|tcp|rdma.",
        ""},
    exitCodeListHeading = "%nExit status:%n",
    exitCodeList = {
        "0:stopped cleanly by SIGTERM or SIGINT",
        "78:the configuration is invalid (every problem is listed on stderr)",
        "70:a fatal JVM error (out of memory, its jar overwritten while it ran) stopped it as a crash would; " +
            "acknowledged writes are durable and the next start recovers every group",
        "1:start-up failed for another reason (stated on stderr)"})
public final class Blockmoverd implements Callable<Integer>
{
    /** sysexits.h EX_CONFIG. */
    public static final int EXIT_CONFIG = 78;
    private static final System.Logger LOG = System.getLogger("blockmoverd");

    @Option(names = {"-c", "--config"}, paramLabel = "FILE",
        description = "properties file, e.g. /etc/blockmover/blockmoverd.conf (default: defaults only)")
    private Path config;

    @Option(names = "--print-config", description = "print the effective configuration and exit")
    private boolean printConfig;

    @Option(names = "--check-config", description = "validate the configuration and exit (0 when valid)")
    private boolean checkConfig;

    /**
     * @param args command line.
     */
    public static void main(final String[] args)
    {
        final CommandLine commandLine = new CommandLine(new Blockmoverd());
        commandLine.setUsageHelpLongOptionsMaxWidth(30);
        final StringBuilder properties = new StringBuilder("Properties (name = default: meaning):%n");
        for (final Map.Entry<String, String[]> property : Configuration.defaults().entrySet())
        {
            properties.append(String.format("  %s = %s%n      %s%n", property.getKey(), property.getValue()[0],
                property.getValue()[1]).replace("%", "%%"));
        }
        commandLine.getCommandSpec().usageMessage().footer(properties.toString());
        final int exitCode = commandLine.execute(args);
        if (exitCode != 0)
        {
            // Never after a signal: System.exit blocks for ever once the JVM's shutdown has begun.
            System.exit(exitCode);
        }
    }

    @Override
    public Integer call()
    {
        FatalErrorHandler.install();
        final Context ctx;
        try
        {
            ctx = Context.conclude(config, System.getProperties());
        }
        catch (final BlockmoverException ex)
        {
            System.err.println("blockmoverd: " + ex.getMessage());
            return EXIT_CONFIG;
        }
        if (printConfig)
        {
            ctx.effective().forEach((name, value) -> System.out.println(name + " = " + value));
            return 0;
        }
        if (checkConfig)
        {
            System.out.println("configuration is valid: node " + ctx.nodeName() + ", " + ctx.peers().size() +
                " peers");
            return 0;
        }

        StderrLoggerFinder.threshold(ctx.logLevel());
        final CncFile cnc;
        final Conductor conductor;
        try
        {
            cnc = CncFile.create(ctx.countersFile(), ctx.nodeName(), ProcessHandle.current().pid(), 1024);
            conductor = new Conductor(ctx, cnc);
        }
        catch (final BlockmoverException ex)
        {
            System.err.println("blockmoverd: " + ex.getMessage());
            return ex.code() == io.blockmover.ErrorCode.CONFIG_INVALID ? EXIT_CONFIG : 1;
        }

        // SIGHUP re-reads the configuration (systemctl reload, kill -HUP) instead of the JVM's default, which is to
        // shut down. The handler only raises a flag: the conductor reloads on its own thread.
        final boolean hangUpIgnored = isHangUpIgnored();
        Signal.handle(new Signal("HUP"), (signal) -> conductor.requestReload());
        if (hangUpIgnored)
        {
            // The JVM keeps a signal ignored at its start (nohup does that) and installs nothing.
            LOG.log(System.Logger.Level.WARNING, "SIGHUP is ignored by whoever started blockmoverd (nohup?): " +
                "reload the configuration with 'blockmover reload' instead");
        }
        final ServiceNotifier notifier = conductor.serviceNotifier();
        final String initialStatus = conductor.serviceStatus(); // before the conductor thread owns the groups
        final ShutdownSignalBarrier barrier = new ShutdownSignalBarrier();
        final AgentRunner runner = new AgentRunner(
            conductor.idleStrategy(),
            (throwable) ->
            {
                // The runner rethrows an Error, which FatalErrorHandler then logs, with its stack, before it halts.
                if (!(throwable instanceof Error))
                {
                    LOG.log(System.Logger.Level.ERROR, "conductor error", throwable);
                }
            },
            cnc.counter(SystemCounter.ERRORS),
            conductor);
        io.blockmover.metrics.MetricsHttpServer metrics = null;
        if (ctx.metricsListen() != null)
        {
            try
            {
                metrics = io.blockmover.metrics.MetricsHttpServer.start(ctx.metricsListen(), ctx.countersFile());
            }
            catch (final BlockmoverException ex)
            {
                System.err.println("blockmoverd: " + ex.getMessage());
                conductor.onClose();
                cnc.close();
                return EXIT_CONFIG;
            }
            LOG.log(System.Logger.Level.INFO, "metrics on http://" + ctx.metricsListen().getHostString() + ":" +
                ctx.metricsListen().getPort() + "/metrics");
        }
        AgentRunner.startOnThread(runner);
        LOG.log(System.Logger.Level.INFO, "blockmoverd " + ctx.nodeName() + " ready: peers on " + ctx.listen() +
            ", control " + ctx.controlSocket() + ", peers " + ctx.peers().keySet() + ", chunk " + ctx.chunkLength() +
            " bytes, slab " + ctx.slabSlots() + " slots; " + notifier.describe());
        notifier.ready(initialStatus);
        barrier.await();
        notifier.stopping("stopping: forcing volumes and bitmaps, closing sessions");
        LOG.log(System.Logger.Level.INFO, "blockmoverd " + ctx.nodeName() + " stopping");
        org.agrona.CloseHelper.quietClose(metrics);
        runner.close();
        cnc.close();
        LOG.log(System.Logger.Level.INFO, "blockmoverd " + ctx.nodeName() + " stopped");
        barrier.close();
        return 0;
    }

    /**
     * @return whether SIGHUP was ignored when this process started (bit 0 of SigIgn in /proc/self/status).
     */
    private static boolean isHangUpIgnored()
    {
        try
        {
            for (final String line : java.nio.file.Files.readAllLines(Path.of("/proc/self/status")))
            {
                if (line.startsWith("SigIgn:"))
                {
                    return (Long.parseUnsignedLong(line.substring("SigIgn:".length()).trim(), 16) & 1) != 0;
                }
            }
        }
        catch (final java.io.IOException | NumberFormatException ex)
        {
            LOG.log(System.Logger.Level.DEBUG, "cannot read /proc/self/status: " + ex);
        }
        return false;
    }

    /**
     * Version from the jar manifest.
     */
    static final class Version implements CommandLine.IVersionProvider
    {
        @Override
        public String[] getVersion()
        {
            final String version = Blockmoverd.class.getPackage().getImplementationVersion();
            return new String[] {"blockmoverd " + (version == null ? "development build" : version)};
        }
    }
}
