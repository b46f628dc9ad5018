package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.daemon.Configuration;
import io.blockmover.daemon.Context;
import io.blockmover.daemon.PeerConfig;
import io.blockmover.ratelimit.TokenBucket;

/**
 * The bandwidth limit of each peer ({@code peer.NAME.max.rate}, changed at run time with {@code blockmover peer
 * set}): one {@link TokenBucket} per peer, shared by every agent that sends payload to it (copy-job senders, the
 * shippers of async groups, the resyncers of sync groups). A limit set at run time is persisted in
 * {@code STATE_DIR/peer-rates.json} and wins over the configuration file, across restarts, until it is reset.
 * Conductor thread only; the buckets themselves are thread-safe.
 */
final class PeerRates
{
    static final String FILE_NAME = "peer-rates.json";

    private final Context ctx;
    private final Path file;
    private final Map<String, TokenBucket> buckets = new TreeMap<>();
    private final Map<String, Long> overrides = new TreeMap<>();

    PeerRates(final Context ctx, final long nowNs)
    {
        this.ctx = ctx;
        this.file = ctx.stateDir().resolve(FILE_NAME);
        if (Files.exists(file))
        {
            try
            {
                for (final Map.Entry<String, Object> e : JsonFiles.read(file).entrySet())
                {
                    if (ctx.peers().containsKey(e.getKey()) && e.getValue() instanceof Number n)
                    {
                        overrides.put(e.getKey(), n.longValue());
                    }
                }
            }
            catch (final IOException | RuntimeException ex)
            {
                throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot read " + file + ": " + ex.getMessage() +
                    " (fix or delete it; it holds the limits set with 'blockmover peer set')", ex);
            }
        }
        for (final String peer : ctx.peers().keySet())
        {
            buckets.put(peer, new TokenBucket(effectiveRate(peer)));
        }
    }

    /**
     * @param peer a configured peer.
     * @return the bucket every sender to that peer consults.
     */
    TokenBucket bucket(final String peer)
    {
        final TokenBucket bucket = buckets.get(peer);
        if (bucket == null)
        {
            throw new BlockmoverException(ErrorCode.UNKNOWN_PEER, "unknown peer '" + peer + "': configured peers are " +
                ctx.peers().keySet());
        }
        return bucket;
    }

    private long effectiveRate(final String peer)
    {
        final Long override = overrides.get(peer);
        return override != null ? override : ctx.peerMaxRate(peer);
    }

    boolean onRequest(final ControlServer.Client client, final Object id, final String op,
        final Map<String, Object> args, final long nowNs)
    {
        switch (op)
        {
            case "peer-show" -> client.reply(id, show(args.get("name")));
            case "peer-set" -> client.reply(id, set(args, nowNs));
            default ->
            {
                return false;
            }
        }
        return true;
    }

    private Object show(final Object name)
    {
        if (name instanceof String peer)
        {
            bucket(peer);
            return describe(peer);
        }
        final List<Map<String, Object>> all = new ArrayList<>();
        for (final String peer : buckets.keySet())
        {
            all.add(describe(peer));
        }
        return all;
    }

    Map<String, Object> describe(final String peer)
    {
        final PeerConfig config = ctx.peers().get(peer);
        final Map<String, Object> d = new LinkedHashMap<>();
        d.put("name", peer);
        d.put("address", config.address().toString());
        d.put("transport_requested", config.transport().name().toLowerCase(java.util.Locale.ROOT));
        d.put("max_rate", buckets.get(peer).bytesPerSecond());
        d.put("max_rate_source", overrides.containsKey(peer) ? "runtime" : "config");
        d.put("max_rate_config", ctx.peerMaxRate(peer));
        d.put("throttled", buckets.get(peer).throttledCount());
        return d;
    }

    private Map<String, Object> set(final Map<String, Object> args, final long nowNs)
    {
        final Object name = args.get("name");
        if (!(name instanceof String peer))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "missing argument 'name' (the peer)");
        }
        final TokenBucket bucket = bucket(peer);
        final boolean reset = Boolean.TRUE.equals(args.get("reset"));
        final Object rate = args.get("max_rate");
        if (reset == (rate != null))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "give either max_rate (bytes per second, 0 = " +
                "unlimited) or reset");
        }
        if (rate != null && (!(rate instanceof Number n) || n.longValue() < 0))
        {
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "max_rate '" + rate + "' must be a number of bytes " +
                "per second, 0 = unlimited");
        }
        final Map<String, Long> next = new TreeMap<>(overrides);
        if (reset)
        {
            next.remove(peer);
        }
        else
        {
            next.put(peer, ((Number)rate).longValue());
        }
        try
        {
            JsonFiles.writeAtomically(file, new LinkedHashMap<>(next));
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot persist the limit in " + file + ": " +
                ex.getMessage() + " (nothing changed; check " + Configuration.STATE_DIR + ")", ex);
        }
        overrides.clear();
        overrides.putAll(next);
        bucket.bytesPerSecond(effectiveRate(peer), nowNs);
        return describe(peer);
    }
}
