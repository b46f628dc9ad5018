package io.blockmover.cli;

import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

/**
 * blockmover group test-failover: a writable copy-on-write view of a destination while replication goes on.
 */
@Command(name = "test-failover", mixinStandardHelpOptions = true,
    subcommands = {
        TestFailoverCommand.Mount.class,
        TestFailoverCommand.Dismount.class,
        CommandLine.HelpCommand.class},
    description = {
        "Test a failover without stopping replication; run it on the destination host.",
        "",
        "Storage Replica calls this Mount-SRDestination.",
        "",
        "'mount' exposes each volume of the group with every write this host held",
        "at that moment (a crash-consistent image of the source, what a failover",
        "then would give) as a writable NBD export GROUP-test/VOLUME on this host's",
        "NBD server: boot a VM or mount a file system from it and test the",
        "application. Replication goes",
        "on underneath: the destination volumes keep being updated, and the old",
        "contents they overwrite are kept for the view in the group's state",
        "directory (leave room there). Writes to the view go to an overlay and",
        "never reach the destination volumes. 'dismount' throws the view and its",
        "writes away.",
        "",
        "A test mount does not survive a restart of blockmoverd: its files are",
        "removed at start-up; mount again. If the state directory fills up, the",
        "view fails (its clients get EIO) and is dismounted with an error in the",
        "log and in 'group status'; replication is not affected."})
final class TestFailoverCommand implements Callable<Integer>
{
    @Override
    public Integer call()
    {
        new CommandLine(this).usage(System.out);
        return 2;
    }

    /**
     * blockmover group test-failover mount.
     */
    @Command(name = "mount", mixinStandardHelpOptions = true,
        description = {
            "Serve writable point-in-time views of a destination group's volumes.",
            "",
            "Freezes a writable view of every volume of group NAME holding every",
            "write this host held when asked, and serves it as NBD exports on this",
            "host; prints each view's NBD URI. The destination's log is forced and",
            "applied through that point first: at once unless its applier is behind",
            "(then 'group status' shows the mount waiting, and 'dismount' cancels it).",
            "Refused on the source, when the group is mounted already, and while the",
            "destination is not consistent (initial sync or resync running: wait",
            "until the source's 'group status' says replicating)."})
    static final class Mount extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "the group (a destination on this host)")
        String name;

        @Override
        @SuppressWarnings("unchecked")
        public Integer call()
        {
            final Map<String, Object> status;
            try (GroupProgress progress = GroupProgress.testMount(socket(), name, System.err, json))
            {
                status = (Map<String, Object>)call("group-test-mount", Map.of("name", name));
                progress.succeeded();
            }
            if (json)
            {
                printJson(status);
                return 0;
            }
            final Map<String, Object> mount = (Map<String, Object>)status.get("test_mount");
            System.out.println("group " + name + " test-mounted at LSN " + mount.get("lsn") +
                "; replication goes on underneath");
            for (final Map<String, Object> v : (List<Map<String, Object>>)mount.get("volumes"))
            {
                System.out.printf(Locale.ROOT, "  %s  %s%n", v.get("target"), v.get("nbd_uri"));
            }
            return 0;
        }
    }

    /**
     * blockmover group test-failover dismount.
     */
    @Command(name = "dismount", mixinStandardHelpOptions = true,
        description = {
            "Throw a group's test views and their writes away.",
            "",
            "Stops serving the test views of group NAME and deletes them with every",
            "write made to them. The destination volumes never saw those writes."})
    static final class Dismount extends BlockmoverCli.Common implements Callable<Integer>
    {
        @Parameters(index = "0", paramLabel = "NAME", description = "the group (a destination on this host)")
        String name;

        @Override
        public Integer call()
        {
            final Object status = call("group-test-dismount", Map.of("name", name));
            if (json)
            {
                printJson(status);
            }
            else
            {
                System.out.println("group " + name + " test mount dismounted, its writes discarded");
            }
            return 0;
        }
    }

    /**
     * Adds a destination's test mount (or the error that ended it) to 'group status'.
     *
     * @param g a group's status.
     */
    @SuppressWarnings("unchecked")
    static void printStatus(final Map<String, Object> g)
    {
        if (g.get("consistent") != null)
        {
            System.out.println("  consistent: " + (Boolean.TRUE.equals(g.get("consistent")) ? "yes" :
                "no (initial sync or resync unfinished; a failover is refused without --allow-inconsistent)"));
        }
        if (g.get("test_mount") instanceof Map<?, ?> m)
        {
            final Map<String, Object> mount = (Map<String, Object>)m;
            System.out.println("  test mount at LSN " + mount.get("lsn") +
                (mount.get("error") != null ? ", failing: " + mount.get("error") : ""));
            for (final Map<String, Object> v : (List<Map<String, Object>>)mount.get("volumes"))
            {
                System.out.printf(Locale.ROOT, "    %s  %s  preserved %s  written %s%n", v.get("target"),
                    v.get("nbd_uri"), Format.bytes(((Number)v.get("preserved_bytes")).longValue()),
                    Format.bytes(((Number)v.get("written_bytes")).longValue()));
            }
        }
        else if (g.get("test_mount_pending") instanceof Map<?, ?> p)
        {
            System.out.printf(Locale.ROOT, "  test mount requested %.1f s ago: applying the log first (LSN %s of " +
                "%s)%n", ((Number)p.get("waiting_s")).doubleValue(), p.get("applied_lsn"), p.get("from_lsn"));
        }
        else if (g.get("test_mount_error") != null)
        {
            System.out.println("  last test mount failed: " + g.get("test_mount_error"));
        }
    }
}
