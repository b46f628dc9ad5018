package io.blockmover.topology;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.NanoClock;

import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.transport.FrameConnection;

/**
 * The source half of a probe session (OPEN with {@code "probe": true}), after the usual authenticated handshake:
 * <ol>
 * <li>round trips: one HEARTBEAT at a time, sequence = ping number; the {@link ProbeResponder} echoes it at once,
 * so each reply times one round trip through both transports and both daemons (like ping, never pipelined);</li>
 * <li>bandwidth: CHUNK frames of one chunk of random bytes, sent one way as fast as the credits allow (the
 * responder ACKs each one, returning its credit), for a few seconds; the bytes acknowledged are binned by
 * 100 ms, so the report can draw bandwidth over time;</li>
 * <li>CLOSE.</li>
 * </ol>
 * Frames are not rate limited: the test measures the link, not the configured limit. Runs on its own runner;
 * the conductor reads the results once {@link #isDone()}.
 */
public final class ProbeAgent implements Agent
{
    /** Width of a bandwidth bin. */
    public static final long BIN_NS = 100_000_000L;
    private static final int MAX_PINGS = 2_000;
    private static final int MIN_PINGS = 50;
    private static final long DRAIN_TIMEOUT_NS = 5_000_000_000L;
    private static final int STATE_PING = 0;
    private static final int STATE_BULK = 1;
    private static final int STATE_DRAIN = 2;
    private static final int STATE_DONE = 3;

    private final FrameConnection connection;
    private final int sessionId;
    private final NanoClock clock;
    private final long pingTimeNs;
    private final long bulkTimeNs;
    private final long peerTimeoutNs;
    private final int initialCredits;
    private final FrameHeader sendHeader = new FrameHeader();
    private final FrameHeader receiveHeader = new FrameHeader();
    private final ByteBuffer receivePayload = BufferUtil.allocateDirectAligned(FrameDescriptor.MAX_CONTROL_PAYLOAD, 64);
    private final ByteBuffer chunk;
    private final int chunkCrc;
    private final long[] rttNs = new long[MAX_PINGS];
    private final long[] bins;
    private volatile int state = STATE_PING;
    private volatile String failure;
    private int pings;
    private boolean pingOutstanding;
    private long pingSentNs;
    private long pingStartNs = -1;
    private boolean receivingPayload;
    private int credits;
    private long bulkStartNs;
    private long bulkEndNs;
    private long lastAckNs;
    private long bytesAcked;
    private long chunksSent;
    private long lastReceiveNs;

    /**
     * @param connection     authenticated, OPENED received.
     * @param sessionId      of the probe session.
     * @param clock          clock.
     * @param pingTimeNs     longest time spent on round trips.
     * @param bulkTimeNs     time spent sending bulk frames.
     * @param chunkLength    payload of a bulk frame.
     * @param credits        frames in flight (from OPENED).
     * @param peerTimeoutNs  silence that fails the probe.
     */
    public ProbeAgent(final FrameConnection connection, final int sessionId, final NanoClock clock,
        final long pingTimeNs, final long bulkTimeNs, final int chunkLength, final int credits,
        final long peerTimeoutNs)
    {
        this.connection = connection;
        this.sessionId = sessionId;
        this.clock = clock;
        this.pingTimeNs = pingTimeNs;
        this.bulkTimeNs = bulkTimeNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.initialCredits = credits;
        this.credits = credits;
        this.bins = new long[(int)(bulkTimeNs / BIN_NS) + 2 + (int)(DRAIN_TIMEOUT_NS / BIN_NS)];
        this.chunk = BufferUtil.allocateDirectAligned(chunkLength, 4096);
        // Random bytes, so no compression or deduplication on the way flatters the figure.
        final byte[] random = new byte[chunkLength];
        ThreadLocalRandom.current().nextBytes(random);
        chunk.put(random).flip();
        final CRC32C crc = new CRC32C();
        crc.update(chunk.duplicate());
        this.chunkCrc = (int)crc.getValue();
    }

    @Override
    public String roleName()
    {
        return "probe-" + Integer.toHexString(sessionId);
    }

    @Override
    public void onStart()
    {
        lastReceiveNs = clock.nanoTime();
    }

    @Override
    public int doWork()
    {
        if (state == STATE_DONE)
        {
            return 0;
        }
        final long nowNs = clock.nanoTime();
        try
        {
            int work = receive(nowNs);
            if (!connection.flush())
            {
                return work;
            }
            switch (state)
            {
                case STATE_PING -> work += ping(nowNs);
                case STATE_BULK -> work += bulk(nowNs);
                case STATE_DRAIN -> work += drain(nowNs);
                default ->
                {
                }
            }
            if (state != STATE_DONE && nowNs - lastReceiveNs > peerTimeoutNs)
            {
                throw new IOException("no answer from the peer for " + peerTimeoutNs / 1_000_000 + " ms");
            }
            return work;
        }
        catch (final IOException ex)
        {
            failure = ex.getMessage();
            state = STATE_DONE;
            return 1;
        }
    }

    private int ping(final long nowNs) throws IOException
    {
        if (pingOutstanding)
        {
            return 0;
        }
        if (pingStartNs < 0)
        {
            pingStartNs = nowNs;
        }
        if (pings == MAX_PINGS || (pings >= MIN_PINGS && nowNs - pingStartNs > pingTimeNs))
        {
            state = STATE_BULK;
            bulkStartNs = nowNs;
            bulkEndNs = nowNs + bulkTimeNs;
            lastAckNs = nowNs;
            return 1;
        }
        sendHeader.reset(FrameType.HEARTBEAT).sessionId(sessionId).sequence(pings).seal();
        pingSentNs = clock.nanoTime();
        connection.startSend(sendHeader, null);
        connection.flush();
        pingOutstanding = true;
        return 1;
    }

    private int bulk(final long nowNs) throws IOException
    {
        if (nowNs >= bulkEndNs)
        {
            state = STATE_DRAIN;
            return 1;
        }
        int work = 0;
        while (credits > 0 && !connection.isSendPending())
        {
            chunk.clear();
            sendHeader.reset(FrameType.CHUNK).sessionId(sessionId).sequence(chunksSent++)
                .payloadLength(chunk.remaining()).payloadCrc(chunkCrc).seal();
            connection.startSend(sendHeader, chunk);
            credits--;
            work++;
            if (!connection.flush())
            {
                break;
            }
        }
        return work;
    }

    private int drain(final long nowNs) throws IOException
    {
        if (credits < initialCredits && nowNs - bulkEndNs < DRAIN_TIMEOUT_NS)
        {
            return 0;
        }
        sendHeader.reset(FrameType.CLOSE).sessionId(sessionId).seal();
        connection.startSend(sendHeader, null);
        connection.flush();
        state = STATE_DONE;
        return 1;
    }

    private int receive(final long nowNs) throws IOException
    {
        int work = 0;
        while (true)
        {
            if (!receivingPayload)
            {
                if (!connection.receiveHeader(receiveHeader))
                {
                    return work;
                }
                final String problem = receiveHeader.validate(FrameDescriptor.MAX_CONTROL_PAYLOAD);
                if (problem != null)
                {
                    throw new IOException("bad frame from the peer: " + problem);
                }
                receivePayload.clear().limit(receiveHeader.payloadLength());
                receivingPayload = true;
            }
            if (!connection.receivePayload(receivePayload))
            {
                return work;
            }
            receivingPayload = false;
            lastReceiveNs = nowNs;
            work++;
            switch (receiveHeader.type())
            {
                case HEARTBEAT ->
                {
                    if (pingOutstanding && receiveHeader.sequence() == pings)
                    {
                        rttNs[pings++] = clock.nanoTime() - pingSentNs;
                        pingOutstanding = false;
                    }
                }
                case ACK ->
                {
                    credits++;
                    final long ackNs = clock.nanoTime();
                    bytesAcked += receiveHeader.aux();
                    final int bin = (int)Math.min(bins.length - 1, (ackNs - bulkStartNs) / BIN_NS);
                    bins[bin] += receiveHeader.aux();
                    lastAckNs = ackNs;
                }
                case ERROR ->
                {
                    receivePayload.flip();
                    final byte[] text = new byte[receivePayload.remaining()];
                    receivePayload.get(text);
                    throw new IOException("the peer reported: " + ErrorPayload.message(text));
                }
                default -> throw new IOException("unexpected " + receiveHeader.type() + " from the peer");
            }
        }
    }

    /**
     * @return whether the probe finished (or failed); then the results may be read from any thread.
     */
    public boolean isDone()
    {
        return state == STATE_DONE;
    }

    /**
     * @return why the probe failed, or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return a one-line description of what the probe is doing, for progress.
     */
    public String phase()
    {
        return switch (state)
        {
            case STATE_PING -> "round trips";
            case STATE_BULK, STATE_DRAIN -> "bandwidth";
            default -> "done";
        };
    }

    /**
     * The results, once {@link #isDone()}: round trips in microseconds (min, p50, p99, max, mean and every sample
     * for the histogram), bandwidth in bytes per second and per 100 ms bin.
     *
     * @return a JSON-ready map.
     */
    public Map<String, Object> results()
    {
        final Map<String, Object> r = new LinkedHashMap<>();
        final long[] sorted = Arrays.copyOf(rttNs, pings);
        Arrays.sort(sorted);
        final Map<String, Object> rtt = new LinkedHashMap<>();
        rtt.put("count", pings);
        if (pings > 0)
        {
            long sum = 0;
            for (final long v : sorted)
            {
                sum += v;
            }
            rtt.put("min_us", micros(sorted[0]));
            rtt.put("p50_us", micros(sorted[percentileIndex(pings, 0.50)]));
            rtt.put("p99_us", micros(sorted[percentileIndex(pings, 0.99)]));
            rtt.put("max_us", micros(sorted[pings - 1]));
            rtt.put("mean_us", micros(sum / pings));
            final List<Double> samples = new ArrayList<>(pings);
            for (int i = 0; i < pings; i++)
            {
                samples.add(micros(rttNs[i]));
            }
            rtt.put("samples_us", samples);
        }
        r.put("rtt", rtt);
        final double seconds = Math.max(1, lastAckNs - bulkStartNs) / 1e9;
        r.put("bulk_bytes", bytesAcked);
        r.put("bulk_seconds", Math.round(seconds * 1000) / 1000.0);
        r.put("bandwidth_bps", bytesAcked > 0 ? (long)(bytesAcked / seconds) : 0L);
        final List<List<Object>> series = new ArrayList<>();
        final int lastBin = (int)Math.min(bins.length - 1, (lastAckNs - bulkStartNs) / BIN_NS);
        for (int i = 0; i <= lastBin && bytesAcked > 0; i++)
        {
            series.add(List.of(i * (BIN_NS / 1_000_000), bins[i] * (1_000_000_000L / BIN_NS)));
        }
        r.put("bandwidth_samples", series);
        return r;
    }

    static int percentileIndex(final int count, final double p)
    {
        return (int)Math.min(count - 1, Math.max(0, Math.ceil(p * count) - 1));
    }

    private static double micros(final long ns)
    {
        return Math.round(ns / 100.0) / 10.0;
    }
}
