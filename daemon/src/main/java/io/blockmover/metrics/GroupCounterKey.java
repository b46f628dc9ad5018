package io.blockmover.metrics;

import java.nio.charset.StandardCharsets;

import org.agrona.DirectBuffer;
import org.agrona.MutableDirectBuffer;

/**
 * Layout of the key of a group counter in the counters file (type {@link #TYPE_ID}), so that readers such as
 * {@link PrometheusWriter} know what a counter measures without parsing its label:
 * <pre>
 *   0                   1                   2                   3
 *   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *  +---------------------------------------------------------------+
 *  |                  metric id ({@link GroupMetric})              |  0
 *  +---------------------------------------------------------------+
 *  |               volume index, -1 for the whole group            |  4
 *  +---------------------------------------------------------------+
 *  |          latency stage ({@link #STAGES}), -1 for none         |  8
 *  +-------------------------------+-------------------------------+
 *  |      group name length        |       peer name length        |  12
 *  +---------------+---------------+-------------------------------+
 *  |  role 0 src/1 |  group name (UTF-8), then peer name (UTF-8) ...   17..111
 *  +---------------+-----------------------------------------------+
 * </pre>
 * A group name is at most 64 bytes; a peer name longer than the 31 bytes left is cut. Stateless.
 */
public final class GroupCounterKey
{
    /** Counter type of group counters. */
    public static final int TYPE_ID = 3;
    /** Latency stages, by index. */
    public static final String[] STAGES = {"local_write", "partner_ack", "remote_flush", "apply", "log_force"};
    private static final int METRIC_OFFSET = 0;
    private static final int VOLUME_OFFSET = 4;
    private static final int STAGE_OFFSET = 8;
    private static final int GROUP_LENGTH_OFFSET = 12;
    private static final int PEER_LENGTH_OFFSET = 14;
    private static final int ROLE_OFFSET = 16;
    private static final int NAMES_OFFSET = 17;
    private static final int MAX_KEY_LENGTH = 112;

    private GroupCounterKey()
    {
    }

    /**
     * @return the key's length.
     */
    public static int write(final MutableDirectBuffer key, final GroupMetric metric, final int volume,
        final int stage, final String group, final String role, final String peer)
    {
        final byte[] g = group.getBytes(StandardCharsets.UTF_8);
        final byte[] p = peer.getBytes(StandardCharsets.UTF_8);
        final int groupLength = Math.min(g.length, MAX_KEY_LENGTH - NAMES_OFFSET);
        final int peerLength = Math.min(p.length, MAX_KEY_LENGTH - NAMES_OFFSET - groupLength);
        key.putInt(METRIC_OFFSET, metric.id());
        key.putInt(VOLUME_OFFSET, volume);
        key.putInt(STAGE_OFFSET, stage);
        key.putShort(GROUP_LENGTH_OFFSET, (short)groupLength);
        key.putShort(PEER_LENGTH_OFFSET, (short)peerLength);
        key.putByte(ROLE_OFFSET, (byte)("source".equals(role) ? 0 : 1));
        key.putBytes(NAMES_OFFSET, g, 0, groupLength);
        key.putBytes(NAMES_OFFSET + groupLength, p, 0, peerLength);
        return NAMES_OFFSET + groupLength + peerLength;
    }

    public static int metricId(final DirectBuffer key)
    {
        return key.getInt(METRIC_OFFSET);
    }

    public static int volume(final DirectBuffer key)
    {
        return key.getInt(VOLUME_OFFSET);
    }

    public static int stage(final DirectBuffer key)
    {
        return key.getInt(STAGE_OFFSET);
    }

    public static String role(final DirectBuffer key)
    {
        return key.getByte(ROLE_OFFSET) == 0 ? "source" : "destination";
    }

    public static String group(final DirectBuffer key)
    {
        final int length = Math.min(key.getShort(GROUP_LENGTH_OFFSET), MAX_KEY_LENGTH - NAMES_OFFSET);
        return key.getStringWithoutLengthUtf8(NAMES_OFFSET, Math.max(0, length));
    }

    public static String peer(final DirectBuffer key)
    {
        final int groupLength = Math.max(0, Math.min(key.getShort(GROUP_LENGTH_OFFSET), MAX_KEY_LENGTH - NAMES_OFFSET));
        final int length = Math.min(key.getShort(PEER_LENGTH_OFFSET), MAX_KEY_LENGTH - NAMES_OFFSET - groupLength);
        return key.getStringWithoutLengthUtf8(NAMES_OFFSET + groupLength, Math.max(0, length));
    }
}
