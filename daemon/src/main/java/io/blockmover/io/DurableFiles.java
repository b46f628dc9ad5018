package io.blockmover.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;

/**
 * Small state files replaced so that a crash, power loss included, leaves the old or the new version, never a torn
 * one and never neither: write a temporary file, force it, rename it over the old one, force the directory. Without
 * the last step the rename itself may be lost with the power, and a file just created may vanish.
 */
public final class DurableFiles
{
    private DurableFiles()
    {
    }

    /**
     * @param file    the file to create or replace.
     * @param content its new content.
     * @throws IOException when any step fails; the old version then stays.
     */
    public static void replace(final Path file, final byte[] content) throws IOException
    {
        replace(file, content, true);
    }

    /**
     * Replaces a file whole (never torn) without forcing anything: for a file written often whose loss to a power
     * cut is acceptable, where a device flush each time is not.
     *
     * @param file    the file to create or replace.
     * @param content its new content.
     * @throws IOException when any step fails; the old version then stays.
     */
    public static void replaceUnforced(final Path file, final byte[] content) throws IOException
    {
        replace(file, content, false);
    }

    private static void replace(final Path file, final byte[] content, final boolean force) throws IOException
    {
        final Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.createDirectories(file.toAbsolutePath().getParent());
        try (FileChannel channel = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
            StandardOpenOption.TRUNCATE_EXISTING))
        {
            final ByteBuffer bytes = ByteBuffer.wrap(content);
            while (bytes.hasRemaining())
            {
                channel.write(bytes);
            }
            if (force)
            {
                channel.force(true);
            }
        }
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        if (force)
        {
            forceDirectory(file.toAbsolutePath().getParent());
        }
    }

    /**
     * Makes the directory's entries durable (created, renamed or removed files).
     *
     * @param dir the directory.
     * @throws IOException when it cannot be opened or forced.
     */
    public static void forceDirectory(final Path dir) throws IOException
    {
        try (FileChannel channel = FileChannel.open(dir, StandardOpenOption.READ))
        {
            channel.force(true);
        }
    }
}
