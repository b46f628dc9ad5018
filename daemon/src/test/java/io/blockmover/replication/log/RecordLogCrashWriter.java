package io.blockmover.replication.log;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;

/**
 * Child process of {@link RecordLogTest}: appends records with a known pattern and prints each LSN once its append
 * has returned, until the test kills it with kill -9. Never forces: a killed process leaves its writes in the page
 * cache, and that is exactly what recovery must cope with.
 */
public final class RecordLogCrashWriter
{
    private RecordLogCrashWriter()
    {
    }

    /**
     * @param args file, capacity, max record length, segment length.
     */
    public static void main(final String[] args) throws IOException
    {
        final Path file = Path.of(args[0]);
        final long capacity = Long.parseLong(args[1]);
        final int maxRecordLength = Integer.parseInt(args[2]);
        final int segmentLength = Integer.parseInt(args[3]);
        final RecordLog log = RecordLog.open(file, capacity, maxRecordLength, segmentLength);
        final ByteBuffer payload = ByteBuffer.allocateDirect(maxRecordLength);
        long lsn = 1;
        while (true)
        {
            final int length = RecordLogTest.lengthOf(lsn, maxRecordLength);
            RecordLogTest.fill(payload, lsn, length);
            final long position = log.tryAppend(lsn, (int)(lsn % 3), lsn * 4096, 0, payload, 0, length);
            if (position == RecordLog.NO_SPACE)
            {
                System.out.println("FULL");
                System.out.flush();
                // Idles until the test kills it with kill -9, or, should the test itself die first, until its end of
                // this process's stdin closes: no fixed sleep, and no child left behind.
                while (System.in.read() >= 0)
                {
                    continue;
                }
                return;
            }
            System.out.println(lsn);
            System.out.flush();
            lsn++;
        }
    }
}
