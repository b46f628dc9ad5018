package io.blockmover.it;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.zip.CRC32C;

/**
 * A QD1 writer for crash tests: one global sequence over the volumes of a group; write {@code seq} goes to volume
 * {@code seq % volumes}, block {@code (seq / volumes * STRIDE) % blocks}, and carries its sequence, its place and a
 * checksum, so a volume read later says exactly which write each block holds. Records the highest acknowledged
 * sequence and the highest one covered by an acknowledged FLUSH. After the connection breaks (a killed daemon)
 * the next {@link #start()} begins with the write that was in flight, as a client retrying it would.
 *
 * <pre>
 * block (4096 bytes):
 *   0        8        16       20       24                                   4088     4096
 *   +--------+--------+--------+--------+------------------------------------+--------+
 *   | MAGIC  | seq    | volume | block  | filler derived from seq            | crc32c |
 *   +--------+--------+--------+--------+------------------------------------+--------+
 * </pre>
 */
final class StampedWriter
{
    static final int BLOCK = 4096;
    private static final long MAGIC = 0x424d5354414d5021L;
    private static final long STRIDE = 7919;
    private static final int CRC_AT = BLOCK - 8;

    private final Path socket;
    private final String[] exports;
    private final int blocks;
    private final int flushEvery;
    private final NbdClient[] clients;
    private volatile long acked;
    private volatile long flushed;
    private volatile long issued;
    private volatile boolean stopping;
    private volatile String ended;
    private long next = 1;
    private Thread thread;

    /**
     * @param socket     the NBD server's socket.
     * @param exports    the group's exports, in volume order.
     * @param blocks     blocks used at the start of each volume (a power of two).
     * @param flushEvery send a FLUSH after this many writes.
     */
    StampedWriter(final Path socket, final String[] exports, final int blocks, final int flushEvery)
    {
        if (Integer.bitCount(blocks) != 1)
        {
            throw new IllegalArgumentException("blocks must be a power of two: " + blocks);
        }
        this.socket = socket;
        this.exports = exports.clone();
        this.blocks = blocks;
        this.flushEvery = flushEvery;
        this.clients = new NbdClient[exports.length];
    }

    static int volumeOf(final long seq, final int volumes)
    {
        return (int)(seq % volumes);
    }

    static int blockOf(final long seq, final int volumes, final int blocks)
    {
        return (int)((seq / volumes * STRIDE) % blocks);
    }

    static byte[] stamp(final long seq, final int volume, final int block)
    {
        final ByteBuffer b = ByteBuffer.allocate(BLOCK);
        b.putLong(MAGIC).putLong(seq).putInt(volume).putInt(block);
        long x = seq * 0x9E3779B97F4A7C15L;
        while (b.position() < CRC_AT)
        {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            b.putLong(x);
        }
        final CRC32C crc = new CRC32C();
        crc.update(b.array(), 0, CRC_AT);
        b.putLong(crc.getValue());
        return b.array();
    }

    /**
     * @return the sequence a block holds, 0 for an all-zero (never written) block.
     * @throws AssertionError for a torn, damaged or misplaced block.
     */
    static long decode(final byte[] data, final int offset, final int volume, final int block)
    {
        final ByteBuffer b = ByteBuffer.wrap(data, offset, BLOCK).slice();
        boolean zero = true;
        for (int i = 0; i < BLOCK && zero; i += 8)
        {
            zero = b.getLong(i) == 0;
        }
        if (zero)
        {
            return 0;
        }
        final long seq = b.getLong(8);
        final CRC32C crc = new CRC32C();
        crc.update(data, offset, CRC_AT);
        if (b.getLong(0) != MAGIC || b.getLong(CRC_AT) != crc.getValue() || b.getInt(16) != volume ||
            b.getInt(20) != block)
        {
            throw new AssertionError("volume " + volume + " block " + block + " is torn or misplaced (stamp says " +
                "seq " + seq + ", volume " + b.getInt(16) + ", block " + b.getInt(20) + ")");
        }
        return seq;
    }

    /**
     * Checks the prefix property of one copy of the group: with K the highest sequence found anywhere, every block
     * holds exactly the last write to it with a sequence of at most K, or zeros if there is none.
     *
     * @param files  the copy's volume files, in volume order.
     * @param blocks blocks used at the start of each volume.
     * @return K.
     */
    static long assertPrefix(final String what, final Path[] files, final int blocks) throws IOException
    {
        final int volumes = files.length;
        final long[][] found = new long[volumes][blocks];
        long k = 0;
        for (int v = 0; v < volumes; v++)
        {
            final byte[] data = new byte[blocks * BLOCK];
            try (InputStream in = Files.newInputStream(files[v]))
            {
                if (in.readNBytes(data, 0, data.length) != data.length)
                {
                    throw new AssertionError(what + ": " + files[v] + " is too short");
                }
            }
            for (int block = 0; block < blocks; block++)
            {
                final int volume = v;
                final long seq;
                try
                {
                    seq = decode(data, block * BLOCK, volume, block);
                }
                catch (final AssertionError ex)
                {
                    throw new AssertionError(what + ": " + ex.getMessage(), ex);
                }
                found[v][block] = seq;
                k = Math.max(k, seq);
            }
        }
        final long[][] expected = new long[volumes][blocks];
        for (long seq = 1; seq <= k; seq++)
        {
            expected[volumeOf(seq, volumes)][blockOf(seq, volumes, blocks)] = seq;
        }
        for (int v = 0; v < volumes; v++)
        {
            for (int block = 0; block < blocks; block++)
            {
                if (found[v][block] != expected[v][block])
                {
                    throw new AssertionError(what + " is not a prefix of the writes: highest sequence found " + k +
                        ", but volume " + v + " block " + block + " holds " + found[v][block] + " where the last " +
                        "write up to " + k + " was " + expected[v][block]);
                }
            }
        }
        return k;
    }

    long acked()
    {
        return acked;
    }

    long flushed()
    {
        return flushed;
    }

    long issued()
    {
        return issued;
    }

    /**
     * @return why the last run ended (null while running or after {@link #stop()}).
     */
    String ended()
    {
        return ended;
    }

    boolean isRunning()
    {
        return thread != null && thread.isAlive();
    }

    /**
     * Connects to every export and starts writing from the first unacknowledged sequence.
     */
    void start() throws IOException
    {
        for (int i = 0; i < exports.length; i++)
        {
            clients[i] = NbdClient.connect(socket, exports[i]);
        }
        stopping = false;
        ended = null;
        next = acked + 1;
        thread = new Thread(this::run, "stamped-writer");
        thread.setDaemon(true);
        thread.start();
    }

    private void run()
    {
        long seq = next;
        try
        {
            while (!stopping)
            {
                final int volume = volumeOf(seq, exports.length);
                final int block = blockOf(seq, exports.length, blocks);
                issued = seq;
                final int error = clients[volume].write((long)block * BLOCK, stamp(seq, volume, block));
                if (error != 0)
                {
                    ended = "WRITE seq " + seq + " failed with NBD error " + error;
                    return;
                }
                acked = seq;
                if (seq % flushEvery == 0)
                {
                    final int flushError = clients[volume].flush();
                    if (flushError != 0)
                    {
                        ended = "FLUSH after seq " + seq + " failed with NBD error " + flushError;
                        return;
                    }
                    flushed = seq;
                }
                seq++;
            }
        }
        catch (final IOException ex)
        {
            ended = "connection lost at seq " + seq + ": " + ex;
        }
        finally
        {
            for (final NbdClient client : clients)
            {
                client.close();
            }
        }
    }

    /**
     * Waits for the writer to end on its own (its daemon was killed).
     *
     * @return why it ended.
     */
    String awaitEnded(final long timeoutSeconds) throws InterruptedException
    {
        thread.join(timeoutSeconds * 1000);
        if (thread.isAlive())
        {
            stop();
            throw new AssertionError("the writer did not notice its connection end within " + timeoutSeconds + " s");
        }
        return ended;
    }

    /**
     * Stops after the write in progress; closes the connections if it does not end within 30 s (a blocked write).
     */
    /**
     * Stops the writer, if started, without judging how it ended: for clean-up after a failure.
     */
    void halt() throws InterruptedException
    {
        stopping = true;
        if (thread != null)
        {
            thread.join(30_000);
            if (thread.isAlive())
            {
                for (final NbdClient client : clients)
                {
                    client.close();
                }
            }
        }
    }

    void stop() throws InterruptedException
    {
        stopping = true;
        thread.join(30_000);
        if (thread.isAlive())
        {
            for (final NbdClient client : clients)
            {
                client.close();
            }
            thread.join(5_000);
            throw new AssertionError("a write was not answered within 30 s (acked " + acked + ", issued " +
                issued + ")");
        }
        if (ended != null)
        {
            throw new AssertionError("the writer failed: " + ended);
        }
    }
}
