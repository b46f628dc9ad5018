package io.blockmover;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import io.blockmover.io.Libc;

/**
 * A file's ranges with no data written, as its file system maps them (FIEMAP, dirty pages written out first): what
 * tests of deallocation compare.
 */
public final class FileHoles
{
    private FileHoles()
    {
    }

    /**
     * @param file a file.
     * @param end  where to stop looking.
     * @return each range as [start, end), in order.
     */
    public static List<List<Long>> of(final Path file, final long end)
    {
        final List<List<Long>> holes = new ArrayList<>();
        final int fd = Libc.open(file.toString(), Libc.O_RDONLY);
        try
        {
            Libc.unwrittenRanges(fd, end, (start, stop) -> holes.add(List.of(start, stop)));
        }
        finally
        {
            Libc.close(fd);
        }
        return holes;
    }

    /**
     * @return where each of those ranges starts.
     */
    public static List<Long> starts(final Path file, final long end)
    {
        return of(file, end).stream().map(range -> range.get(0)).toList();
    }
}
