package io.blockmover.cli;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import picocli.CommandLine;
import picocli.CommandLine.Model.ArgSpec;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.PositionalParamSpec;

import io.blockmover.daemon.Blockmoverd;
import io.blockmover.daemon.ConfigReload;
import io.blockmover.daemon.Configuration;

/**
 * Writes the man pages (roff, man(7) macros) from the commands' own picocli model, so they say exactly what
 * {@code --help} says: blockmover(1), one page per subcommand (blockmover-copy(1), blockmover-group-create(1),
 * ...), and blockmoverd(8) with every configuration property, its default and meaning from {@link Configuration}.
 * Run by {@code scripts/package-deb} and {@code scripts/install}:
 * {@code java -cp blockmover.jar io.blockmover.cli.ManPages OUTPUT_DIR}.
 */
public final class ManPages
{
    private static final String SOURCE = "blockmover";
    private final String date = LocalDate.now().toString();
    private final String version;
    private final Path out;
    private final List<String> exitCodes = new ArrayList<>();

    private ManPages(final Path out, final String version)
    {
        this.out = out;
        this.version = version;
    }

    /**
     * @param args the output directory (man1/ and man8/ are made in it).
     * @throws IOException when a page cannot be written.
     */
    public static void main(final String[] args) throws IOException
    {
        if (args.length != 1)
        {
            System.err.println("usage: ManPages OUTPUT_DIR");
            System.exit(2);
        }
        final String version = ManPages.class.getPackage().getImplementationVersion();
        final ManPages pages = new ManPages(Path.of(args[0]), version == null ? "development build" : version);
        final CommandLine cli = BlockmoverCli.commandLine();
        pages.exitCodes.addAll(List.of(cli.getCommandSpec().usageMessage().exitCodeList().entrySet().stream()
            .map((e) -> e.getKey().trim() + "\t" + e.getValue()).toArray(String[]::new)));
        pages.command(cli.getCommandSpec(), "blockmover");
        pages.daemon(new CommandLine(new Blockmoverd()).getCommandSpec());
    }

    private void command(final CommandSpec spec, final String pageName) throws IOException
    {
        final StringBuilder page = new StringBuilder();
        header(page, pageName, 1, summary(spec));
        section(page, "SYNOPSIS");
        page.append(".nf\n").append(roff(synopsis(spec))).append(".fi\n");
        section(page, "DESCRIPTION");
        paragraphs(page, spec.usageMessage().description());
        final List<String> seeAlso = new ArrayList<>();
        if (!spec.subcommands().isEmpty())
        {
            section(page, "COMMANDS");
            for (final Map.Entry<String, CommandLine> sub : spec.subcommands().entrySet())
            {
                final CommandSpec subSpec = sub.getValue().getCommandSpec();
                if ("help".equals(sub.getKey()))
                {
                    continue;
                }
                final String subPage = pageName + "-" + sub.getKey();
                page.append(".TP\n.B ").append(roff(sub.getKey())).append('\n')
                    .append(roff(String.join(" ", subSpec.usageMessage().description()))).append("\nSee ")
                    .append(man(subPage, 1)).append(".\n");
                seeAlso.add(man(subPage, 1));
                command(subSpec, subPage);
            }
        }
        arguments(page, spec);
        options(page, spec);
        section(page, "EXIT STATUS");
        for (final String code : exitCodes)
        {
            final String[] parts = code.split("\t", 2);
            page.append(".TP\n.B ").append(parts[0]).append('\n').append(roff(parts[1])).append('\n');
        }
        section(page, "ENVIRONMENT");
        page.append(".TP\n.B BLOCKMOVER_SOCKET\ncontrol socket of blockmoverd when --socket is not given " +
            "(default /run/blockmover/control.sock)\n");
        section(page, "SEE ALSO");
        if (!"blockmover".equals(pageName))
        {
            seeAlso.add(0, man("blockmover", 1));
        }
        seeAlso.add(man("blockmoverd", 8));
        page.append(String.join(",\n", seeAlso)).append('\n');
        write(page, pageName, 1);
    }

    private void daemon(final CommandSpec spec) throws IOException
    {
        final StringBuilder page = new StringBuilder();
        header(page, "blockmoverd", 8, "block-volume replication daemon");
        section(page, "SYNOPSIS");
        page.append(".nf\n").append(roff(synopsis(spec))).append(".fi\n");
        section(page, "DESCRIPTION");
        paragraphs(page, spec.usageMessage().description());
        page.append(".PP\nUnder systemd (blockmoverd.service, Type=notify) it reports READY=1 once its control " +
            "socket serves, STATUS= with the state of each group and copy job, STOPPING=1 on SIGTERM and " +
            "WATCHDOG=1 when the unit sets WatchdogSec=.\n");
        options(page, spec);
        section(page, "CONFIGURATION");
        page.append("Each property is a line NAME = VALUE in the configuration file, or -Dblockmover.NAME=VALUE " +
            "on the command line, which wins. Sizes take k, m, g, t suffixes (powers of 1024); durations ms, s, " +
            "m.\n");
        for (final Map.Entry<String, String[]> property : Configuration.defaults().entrySet())
        {
            page.append(".TP\n.BR \"").append(roff(property.getKey())).append("\" \" = ")
                .append(roff(property.getValue()[0].isEmpty() ? "(none)" : property.getValue()[0])).append("\"\n")
                .append(roff(property.getValue()[1])).append('\n');
            final String reload = ConfigReload.whenApplied(property.getKey());
            page.append(".br\n").append(reload == null ? "A change needs a restart." :
                roff("A reload applies a change " + reload + ".")).append('\n');
        }
        page.append(".TP\n.BI peer. NAME .address\nhost:port of the peer's listener\n")
            .append(".TP\n.BI peer. NAME .key.file\nfile holding the key shared with the peer (mode 0600, at " +
                "least 16 bytes, readable by the daemon's user)\n")
            .append(".TP\n.BI peer. NAME .transport\nauto (RDMA when a device owns the local address that routes " +
                "to the peer, else TCP), tcp or rdma\n")
            .append(".TP\n.BI nbd.export. NAME\na volume exported over NBD without replication\n");
        section(page, "SIGNALS");
        page.append(".TP\n.B SIGTERM, SIGINT\nstop: every session is stopped with its volumes forced and its " +
            "bitmaps written; jobs and groups resume at the next start.\n")
            .append(".TP\n.B SIGHUP\nre-read the configuration file without dropping replication (as " +
                "blockmover reload and systemctl reload do). Peers, log.level and the timing settings are " +
                "applied; settings that need a restart keep their running value and are named in the log; an " +
                "invalid file is refused with every problem logged, and the running configuration is kept.\n");
        section(page, "EXIT STATUS");
        for (final Map.Entry<String, String> code : spec.usageMessage().exitCodeList().entrySet())
        {
            page.append(".TP\n.B ").append(roff(code.getKey().trim())).append('\n').append(roff(code.getValue()))
                .append('\n');
        }
        section(page, "FILES");
        page.append(".TP\n.I /etc/blockmover/blockmoverd.conf\nthe configuration file\n")
            .append(".TP\n.I /run/blockmover/\ncontrol socket, counters file, NBD socket\n")
            .append(".TP\n.I /var/lib/blockmover/\njobs, groups, bitmaps and record logs\n")
            .append(".TP\n.I /usr/share/blockmover/jvm.options\nthe JVM flags the launcher passes\n");
        section(page, "SEE ALSO");
        page.append(man("blockmover", 1)).append(",\n").append(man("systemd.exec", 5)).append('\n');
        write(page, "blockmoverd", 8);
    }

    /**
     * @return the first clause of a description, short enough for the NAME line (whatis, apropos).
     */
    /**
     * The command's summary: the first line of its description, one sentence (BlockmoverCliTest checks every
     * command), shown in the lists of commands of --help and as the page's NAME line, without its full stop.
     */
    static String summary(final CommandSpec spec)
    {
        final String first = spec.usageMessage().description()[0];
        return first.endsWith(".") ? first.substring(0, first.length() - 1) : first;
    }

    private static String synopsis(final CommandSpec spec)
    {
        return new CommandLine.Help(spec, CommandLine.Help.defaultColorScheme(CommandLine.Help.Ansi.OFF))
            .synopsis(0);
    }

    private void header(final StringBuilder page, final String name, final int section, final String summary)
    {
        page.append(".\\\" Generated by io.blockmover.cli.ManPages from the command's --help; do not edit.\n")
            .append(".TH ").append(name.toUpperCase(Locale.ROOT).replace("-", "\\-")).append(' ').append(section)
            .append(" \"").append(date).append("\" \"").append(SOURCE).append(' ').append(roff(version))
            .append("\" \"").append(section == 8 ? "System Administration" : "User Commands").append("\"\n");
        section(page, "NAME");
        page.append(roff(name)).append(" \\- ").append(roff(summary.toLowerCase(Locale.ROOT).charAt(0) +
            summary.substring(1))).append('\n');
    }

    private static void section(final StringBuilder page, final String name)
    {
        page.append(".SH ").append(name).append('\n');
    }

    private static void paragraphs(final StringBuilder page, final String[] lines)
    {
        final StringBuilder paragraph = new StringBuilder();
        for (final String line : lines)
        {
            if (line.isBlank())
            {
                flush(page, paragraph);
            }
            else
            {
                paragraph.append(paragraph.length() == 0 ? "" : " ").append(line.trim());
            }
        }
        flush(page, paragraph);
    }

    private static void flush(final StringBuilder page, final StringBuilder paragraph)
    {
        if (paragraph.length() > 0)
        {
            page.append(".PP\n").append(roff(paragraph.toString())).append('\n');
            paragraph.setLength(0);
        }
    }

    private static void arguments(final StringBuilder page, final CommandSpec spec)
    {
        if (spec.positionalParameters().isEmpty())
        {
            return;
        }
        section(page, "ARGUMENTS");
        for (final PositionalParamSpec positional : spec.positionalParameters())
        {
            page.append(".TP\n.I ").append(roff(positional.paramLabel())).append('\n')
                .append(roff(description(positional))).append('\n');
        }
    }

    private static void options(final StringBuilder page, final CommandSpec spec)
    {
        if (spec.options().isEmpty())
        {
            return;
        }
        section(page, "OPTIONS");
        for (final OptionSpec option : spec.options())
        {
            final String names = roff(String.join(", ", option.names()));
            page.append(option.arity().max() > 0 ?
                ".TP\n.BI \"" + names + " \" \"" + roff(option.paramLabel()) + "\"\n" :
                ".TP\n.B \"" + names + "\"\n");
            page.append(roff(description(option))).append('\n');
        }
    }

    private static String description(final ArgSpec arg)
    {
        String text = String.join(" ", arg.description());
        if (arg.defaultValue() != null && !text.contains("${DEFAULT-VALUE}") &&
            !text.toLowerCase(Locale.ROOT).contains("default"))
        {
            text += " (default: " + arg.defaultValue() + ")";
        }
        return text.replace("${DEFAULT-VALUE}", String.valueOf(arg.defaultValue()))
            .replace("${COMPLETION-CANDIDATES}", arg.completionCandidates() == null ? "" :
                String.join(", ", iterable(arg.completionCandidates())));
    }

    private static List<String> iterable(final Iterable<String> values)
    {
        final List<String> list = new ArrayList<>();
        values.forEach(list::add);
        return list;
    }

    private static String man(final String name, final int section)
    {
        return ".BR " + roff(name) + " (" + section + ")";
    }

    /**
     * Escapes text for roff: backslashes, hyphens (so they stay ASCII hyphens for copy and paste), and lines
     * that would start with a control character.
     */
    static String roff(final String text)
    {
        final StringBuilder escaped = new StringBuilder();
        for (final String line : text.replace("\\", "\\e").replace("-", "\\-").split("\n", -1))
        {
            if (escaped.length() > 0)
            {
                escaped.append('\n');
            }
            if (line.startsWith(".") || line.startsWith("'"))
            {
                escaped.append("\\&");
            }
            escaped.append(line);
        }
        return escaped.toString();
    }

    private void write(final StringBuilder page, final String name, final int section) throws IOException
    {
        final Path dir = Files.createDirectories(out.resolve("man" + section));
        Files.writeString(dir.resolve(name + "." + section), page, StandardCharsets.UTF_8);
    }
}
