package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import io.blockmover.io.DurableFiles;

/**
 * What a destination last heard from its source about how far ahead the source is (a PROGRESS frame, about once a
 * heartbeat interval while they are linked). Kept after the link is gone, with its age: with the source lost, it is
 * the best a destination can say about what a failover would lose. Saved in the group's state directory when a
 * session ends, so that a destination restarted after its source was lost still knows, and every few seconds while
 * linked (not once a report): a crash of the destination's daemon or host ends no session, and a report saved only
 * at the end of the session before could be days old, or missing. The receiver updates it, the conductor reads and
 * saves it: both rarely, so a lock is cheaper than anything cleverer.
 */
public final class SourceReport
{
    /** The file in the group's state directory: one line, "LSN RPO_BYTES RPO_MS DIRTY_REGIONS RECEIVED_EPOCH_MS". */
    public static final String FILE_NAME = "source-report";
    private long receivedMs;
    // When the report last saved arrived, and the one last forced to the disk (a session's end forces what a
    // periodic save only wrote).
    private long savedMs;
    private long forcedMs;
    private long lsn;
    private long rpoBytes;
    private long rpoMs;
    private long dirtyRegions;

    /**
     * The source's report. Receiver thread.
     *
     * @param lsn          the source's last logged LSN.
     * @param rpoBytes     bytes the destination may not hold durably, by the source's count.
     * @param rpoMs        how old the oldest of them is.
     * @param dirtyRegions regions the source has to resync.
     * @param nowMs        the time it arrived (epoch ms).
     */
    public synchronized void update(final long lsn, final long rpoBytes, final long rpoMs, final long dirtyRegions,
        final long nowMs)
    {
        this.lsn = lsn;
        this.rpoBytes = Math.max(0, rpoBytes);
        this.rpoMs = Math.max(0, rpoMs);
        this.dirtyRegions = Math.max(0, dirtyRegions);
        this.receivedMs = nowMs;
    }

    /**
     * Saves the last report, if there is one not saved yet. Conductor thread.
     *
     * @param file    where ({@link #FILE_NAME} in the group's state directory).
     * @param durable forced to the disk before it returns (when a session ends); otherwise only replaced whole, so
     *                that a periodic save never holds the conductor for a device flush on a busy disk: a power cut
     *                may then lose it, and {@link #load} knows nothing, as before it was saved.
     * @throws IOException if it cannot be written.
     */
    public void save(final Path file, final boolean durable) throws IOException
    {
        final String line;
        synchronized (this)
        {
            if (receivedMs == 0 || receivedMs == (durable ? forcedMs : savedMs))
            {
                return;
            }
            line = lsn + " " + rpoBytes + " " + rpoMs + " " + dirtyRegions + " " + receivedMs + "\n";
            savedMs = receivedMs;
            if (durable)
            {
                forcedMs = receivedMs;
            }
        }
        if (durable)
        {
            DurableFiles.replace(file, line.getBytes(StandardCharsets.US_ASCII));
        }
        else
        {
            DurableFiles.replaceUnforced(file, line.getBytes(StandardCharsets.US_ASCII));
        }
    }

    /**
     * Takes the report saved by {@link #save}, unless one arrived since. A missing or unreadable file leaves
     * nothing known (it only informs a decision; a wrong one would mislead it).
     *
     * @param file where it was saved.
     */
    public synchronized void load(final Path file)
    {
        if (receivedMs != 0)
        {
            return;
        }
        try
        {
            final String[] f = Files.readString(file, StandardCharsets.US_ASCII).trim().split(" ");
            if (f.length == 5)
            {
                update(Long.parseLong(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3]),
                    Long.parseLong(f[4]));
                savedMs = receivedMs; // Not forcedMs: a periodic save may have written it without a force.
            }
        }
        catch (final IOException | NumberFormatException ex)
        {
            // Nothing known.
        }
    }

    /**
     * @return the source's RPO in seconds as it last reported it, or NaN if it reported nothing. For a check on
     *     every duty cycle, which {@link #describe} would make allocate.
     */
    public synchronized double rpoSeconds()
    {
        return receivedMs == 0 ? Double.NaN : rpoMs / 1000.0;
    }

    /**
     * @param heldLsn the highest LSN this destination holds.
     * @param nowMs   now (epoch ms).
     * @return the last report, for group status ({@code source_report}), or null if none came since the daemon
     *     started: seconds_ago, lsn (the source's last), records_behind (that LSN less what this host holds, never
     *     below 0), rpo_bytes, rpo_seconds and dirty_regions (as the source counted them then).
     */
    public synchronized Map<String, Object> describe(final long heldLsn, final long nowMs)
    {
        if (receivedMs == 0)
        {
            return null;
        }
        final Map<String, Object> m = new LinkedHashMap<>();
        m.put("seconds_ago", Math.max(0, nowMs - receivedMs) / 1000.0);
        m.put("lsn", lsn);
        m.put("records_behind", Math.max(0, lsn - heldLsn));
        m.put("rpo_bytes", rpoBytes);
        m.put("rpo_seconds", rpoMs / 1000.0);
        m.put("dirty_regions", dirtyRegions);
        return m;
    }
}
