package io.blockmover.topology;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The recommendations of a topology test, drawn from its measurements:
 * <ul>
 * <li>log size = the outage to tolerate x the sum of the volumes' peak write rates (every volume of a group
 * shares its log), rounded up to a whole GiB, and never below {@link #LOG_FLOOR_BYTES} (the default
 * {@code group.log.size});</li>
 * <li>initial sync time of each volume = its size / min(its read rate, the best bandwidth to the peer); the
 * volumes of a group are synced one after the other, so the group's time is their sum.</li>
 * </ul>
 */
public final class TopologyReport
{
    /** Smallest log recommended. */
    public static final long LOG_FLOOR_BYTES = 1L << 30;
    /** Recommended log sizes are whole multiples of this. */
    public static final long LOG_ROUNDING_BYTES = 1L << 30;

    private TopologyReport()
    {
    }

    /**
     * @param outageSeconds     outage to tolerate.
     * @param peakWriteRateBps  sum of the volumes' peak write rates.
     * @return the recommended log size in bytes.
     */
    public static long recommendedLogBytes(final long outageSeconds, final long peakWriteRateBps)
    {
        final double needed = (double)outageSeconds * peakWriteRateBps;
        final long rounded = (long)Math.ceil(needed / LOG_ROUNDING_BYTES) * LOG_ROUNDING_BYTES;
        return Math.max(LOG_FLOOR_BYTES, rounded);
    }

    /**
     * @param network       per transport results (maps with "available" and "bandwidth_bps").
     * @param volumes       per volume results of {@link VolumeProbe#results()}.
     * @param outageSeconds outage to tolerate.
     * @return the "recommendations" part of the result.
     */
    public static Map<String, Object> recommend(final List<Map<String, Object>> network,
        final List<Map<String, Object>> volumes, final long outageSeconds)
    {
        long bandwidth = 0;
        String via = "none";
        for (final Map<String, Object> t : network)
        {
            final Object bps = t.get("bandwidth_bps");
            if (Boolean.TRUE.equals(t.get("available")) && bps instanceof Number n && n.longValue() > bandwidth)
            {
                bandwidth = n.longValue();
                via = String.valueOf(t.get("transport"));
            }
        }
        long peakSum = 0;
        double totalSyncSeconds = 0;
        final List<Map<String, Object>> syncs = new ArrayList<>();
        for (final Map<String, Object> v : volumes)
        {
            peakSum += ((Number)v.get("write_rate_peak_bps")).longValue();
            final long size = ((Number)v.get("size")).longValue();
            final long readRate = ((Number)v.get("read_rate_bps")).longValue();
            final long rate = readRate > 0 && bandwidth > 0 ? Math.min(readRate, bandwidth) : Math.max(readRate,
                bandwidth);
            final Map<String, Object> s = new LinkedHashMap<>();
            s.put("volume", v.get("path"));
            s.put("size", size);
            s.put("rate_bps", rate);
            s.put("limited_by", readRate > 0 && readRate < bandwidth ? "volume read rate" : "network (" + via + ")");
            final double seconds = rate > 0 ? (double)size / rate : -1;
            s.put("seconds", Math.round(seconds * 10) / 10.0);
            totalSyncSeconds += Math.max(0, seconds);
            syncs.add(s);
        }
        final Map<String, Object> r = new LinkedHashMap<>();
        r.put("outage_seconds", outageSeconds);
        r.put("peak_write_rate_bps", peakSum);
        r.put("log_bytes", recommendedLogBytes(outageSeconds, peakSum));
        r.put("log_rule", "max(1 GiB, outage x sum of peak write rates, rounded up to a whole GiB)");
        r.put("network_bandwidth_bps", bandwidth);
        r.put("network_transport", via);
        r.put("initial_sync", syncs);
        r.put("initial_sync_seconds", Math.round(totalSyncSeconds * 10) / 10.0);
        return r;
    }
}
