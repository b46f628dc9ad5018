package io.blockmover.cli;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import picocli.AutoComplete;

/**
 * Writes the blockmover command's bash completion script (picocli's generator) for the package. Not picocli's own
 * main with the class name: that builds the model from the annotation, which no longer lists the subcommands
 * ({@link BlockmoverCli#commandLine}).
 */
public final class BashCompletion
{
    private BashCompletion()
    {
    }

    /**
     * @param args the file to write.
     * @throws IOException when it cannot be written.
     */
    public static void main(final String[] args) throws IOException
    {
        if (args.length != 1)
        {
            System.err.println("usage: BashCompletion FILE");
            System.exit(2);
        }
        Files.writeString(Path.of(args[0]), AutoComplete.bash("blockmover", BlockmoverCli.commandLine()));
    }
}
