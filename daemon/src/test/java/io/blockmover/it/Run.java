package io.blockmover.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs a real command (a project script, a tool) and captures its exit status and output.
 *
 * @param exitCode of the process.
 * @param stdout   everything it printed on standard output.
 * @param stderr   everything it printed on standard error.
 */
record Run(int exitCode, String stdout, String stderr)
{
    static final Path ROOT = Path.of(System.getProperty("blockmover.root", "..")).toAbsolutePath().normalize();

    /**
     * Ends a tool run in the background (SIGTERM: fio stops its jobs and exits), and waits for it to be gone.
     */
    static void stop(final Process process) throws InterruptedException
    {
        process.destroy();
        if (!process.waitFor(60, TimeUnit.SECONDS))
        {
            process.destroyForcibly().waitFor();
        }
    }

    static Run of(final long timeoutSeconds, final List<String> command)
    {
        try
        {
            final Path out = Files.createTempFile("bm-it", ".out");
            final Path err = Files.createTempFile("bm-it", ".err");
            try
            {
                final Process process = new ProcessBuilder(command)
                    .redirectOutput(out.toFile()).redirectError(err.toFile())
                    .redirectInput(ProcessBuilder.Redirect.PIPE).start();
                process.getOutputStream().close();
                if (!process.waitFor(timeoutSeconds, TimeUnit.SECONDS))
                {
                    process.descendants().forEach(ProcessHandle::destroyForcibly);
                    process.destroyForcibly();
                    throw new AssertionError("timed out after " + timeoutSeconds + " s: " + command + "\n" +
                        Files.readString(err));
                }
                return new Run(process.exitValue(), Files.readString(out, StandardCharsets.UTF_8),
                    Files.readString(err, StandardCharsets.UTF_8));
            }
            finally
            {
                Files.deleteIfExists(out);
                Files.deleteIfExists(err);
            }
        }
        catch (final IOException ex)
        {
            throw new AssertionError("cannot run " + command + ": " + ex, ex);
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted running " + command, ex);
        }
    }

    Run expect(final int expected)
    {
        if (exitCode != expected)
        {
            throw new AssertionError("exit " + exitCode + " (expected " + expected + ")\nstdout: " + stdout +
                "\nstderr: " + stderr);
        }
        return this;
    }
}
