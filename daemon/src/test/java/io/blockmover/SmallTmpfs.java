package io.blockmover;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A small tmpfs mounted for one unit test: a real file system that runs out of space (ENOSPC) where the test says.
 * Needs root; without it the test is skipped (an assumption), not failed. Unmounted on close, so close whatever
 * holds files in it first.
 */
public final class SmallTmpfs implements AutoCloseable
{
    private final Path dir;

    private SmallTmpfs(final Path dir)
    {
        this.dir = dir;
    }

    /**
     * @param dir  where to mount it (created).
     * @param size its size, as mount's size= option takes it ("128k").
     * @return the mount.
     * @throws IOException          when mount cannot be run.
     * @throws InterruptedException when interrupted while it runs.
     */
    public static SmallTmpfs mount(final Path dir, final String size) throws IOException, InterruptedException
    {
        Files.createDirectories(dir);
        assumeTrue(run("mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", dir.toString()) == 0,
            "needs root to mount a small tmpfs");
        return new SmallTmpfs(dir);
    }

    public Path dir()
    {
        return dir;
    }

    /**
     * Grows or shrinks the mounted file system; its files stay.
     */
    public void resize(final String size) throws IOException, InterruptedException
    {
        assertEquals(0, run("mount", "-o", "remount,size=" + size, dir.toString()), "remount " + dir);
    }

    /**
     * Unmounts it. Interrupted meanwhile, it still waits for umount (a mount left behind outlives the test) and
     * keeps the interrupt for the caller; AutoCloseable's close must not throw InterruptedException.
     */
    @Override
    public void close() throws IOException
    {
        final Process umount = new ProcessBuilder("umount", dir.toString()).inheritIO().start();
        boolean interrupted = false;
        while (true)
        {
            try
            {
                umount.waitFor();
                break;
            }
            catch (final InterruptedException ex)
            {
                interrupted = true;
            }
        }
        if (interrupted)
        {
            Thread.currentThread().interrupt();
        }
    }

    private static int run(final String... command) throws IOException, InterruptedException
    {
        return new ProcessBuilder(command).inheritIO().start().waitFor();
    }
}
