package io.blockmover.topology;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import com.sun.nio.file.ExtendedOpenOption;
import org.agrona.BufferUtil;
import org.agrona.concurrent.Agent;
import org.agrona.concurrent.NanoClock;

import io.blockmover.io.BlockDevices;

/**
 * Measures, for each volume of a topology test, what the initial sync and the log will face:
 * <ul>
 * <li>the write rate over the test's duration, sampled every {@code sampleIntervalNs}: with no workload from the
 * kernel's counters ({@code /sys/dev/block/MAJ:MIN/stat}, write sectors) of the block device, or of the device
 * holding a regular file; with {@code builtin} from a built-in O_DIRECT writer of random 64 KiB blocks, or with
 * {@code fio} from fio's own bandwidth log of a randwrite job, both on a scratch file beside the volume (in the
 * state directory for a block device), never on the volume itself;</li>
 * <li>then the read rate of the volume itself: sequential O_DIRECT reads of one chunk from its start, read only,
 * for at most {@code readTimeNs}: what a resync reads at.</li>
 * </ul>
 * Not a data-path agent: it allocates while it samples (a few objects a sample). Scratch files are removed when
 * it closes.
 */
public final class VolumeProbe implements Agent
{
    /** Block size of the built-in writer and of the fio job. */
    public static final int WORKLOAD_BLOCK = 64 * 1024;
    private static final long SCRATCH_BYTES = 256L << 20;
    private static final int READ_BLOCK = 1 << 20;
    private static final int PHASE_SAMPLE = 0;
    private static final int PHASE_READ = 1;
    private static final int PHASE_DONE = 2;

    /** One volume under test. */
    private static final class Target
    {
        final Path path;
        final boolean block;
        long size;
        Path statFile;
        String writeSource;
        long lastCounter = -1;
        long lastSampleNs;
        final List<List<Object>> writeSamples = new ArrayList<>();
        Path scratch;
        FileChannel scratchChannel;
        long scratchBlocks;
        long workloadBytes;
        Process fio;
        Path fioLogPrefix;
        Path fioOutput;
        long readBytes;
        long readNs;
        String readError;

        Target(final Path path, final boolean block)
        {
            this.path = path;
            this.block = block;
        }
    }

    private final List<Target> targets = new ArrayList<>();
    private final NanoClock clock;
    private final long durationNs;
    private final long sampleIntervalNs;
    private final long readTimeNs;
    private final String workload;
    private final Path scratchDir;
    private final ByteBuffer writeBuffer = BufferUtil.allocateDirectAligned(WORKLOAD_BLOCK, 4096);
    private final ByteBuffer readBuffer = BufferUtil.allocateDirectAligned(READ_BLOCK, 4096);
    private long startNs;
    private long nextSampleNs;
    private volatile int phase = PHASE_SAMPLE;
    private volatile String failure;
    private int readIndex;
    private FileChannel readChannel;
    private long readStartNs;

    /**
     * @param volumes          block devices or regular files.
     * @param workload         none, builtin or fio.
     * @param scratchDir       where the workload's scratch file goes for a block device.
     * @param durationNs       how long to sample writes.
     * @param sampleIntervalNs one write-rate sample this often.
     * @param readTimeNs       longest read test per volume.
     * @param clock            clock.
     * @throws IOException when a volume cannot be examined (the message names it).
     */
    public VolumeProbe(final List<Path> volumes, final String workload, final Path scratchDir, final long durationNs,
        final long sampleIntervalNs, final long readTimeNs, final NanoClock clock) throws IOException
    {
        this.workload = workload;
        this.scratchDir = scratchDir;
        this.durationNs = durationNs;
        this.sampleIntervalNs = sampleIntervalNs;
        this.readTimeNs = readTimeNs;
        this.clock = clock;
        final byte[] random = new byte[WORKLOAD_BLOCK];
        ThreadLocalRandom.current().nextBytes(random);
        writeBuffer.put(random).flip();
        for (final Path path : volumes)
        {
            final boolean block = BlockDevices.isBlockDevice(path);
            if (!block && !Files.isRegularFile(path))
            {
                throw new IOException(path + " is neither a block device nor a regular file");
            }
            final Target t = new Target(path, block);
            final String majMin = BlockDevices.majorMinor(path);
            t.statFile = Path.of("/sys/dev/block/" + majMin + "/stat");
            t.size = block ? Long.parseLong(Files.readString(Path.of("/sys/dev/block/" + majMin + "/size")).trim()) *
                512 : Files.size(path);
            if (!Files.isReadable(t.statFile))
            {
                t.statFile = null;
            }
            targets.add(t);
        }
    }

    @Override
    public String roleName()
    {
        return "topology-volumes";
    }

    @Override
    public void onStart()
    {
        startNs = clock.nanoTime();
        nextSampleNs = startNs;
        try
        {
            for (final Target t : targets)
            {
                startWorkload(t);
            }
        }
        catch (final IOException ex)
        {
            failure = ex.getMessage();
            phase = PHASE_DONE;
        }
    }

    private void startWorkload(final Target t) throws IOException
    {
        if ("none".equals(workload))
        {
            t.writeSource = t.statFile == null ? "none: no kernel counters for " + t.path :
                (t.block ? "kernel counters of the device (" + t.statFile + "): writes by anyone" :
                "kernel counters of the device holding the file (" + t.statFile + "): writes to every file on it");
            return;
        }
        final Path dir = t.block ? scratchDir : t.path.toAbsolutePath().getParent();
        Files.createDirectories(dir);
        t.scratch = dir.resolve(".blockmover-topology-" + ProcessHandle.current().pid() + "-" + targets.indexOf(t) +
            ".scratch");
        final long scratchBytes = Math.max(WORKLOAD_BLOCK,
            Math.min(SCRATCH_BYTES, t.size) / WORKLOAD_BLOCK * WORKLOAD_BLOCK);
        t.scratchBlocks = scratchBytes / WORKLOAD_BLOCK;
        if ("builtin".equals(workload))
        {
            t.scratchChannel = FileChannel.open(t.scratch, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.READ, ExtendedOpenOption.DIRECT);
            t.writeSource = "built-in O_DIRECT writer, random " + WORKLOAD_BLOCK / 1024 + " KiB blocks, on scratch " +
                "file " + t.scratch;
            return;
        }
        t.fioLogPrefix = t.scratch.resolveSibling(t.scratch.getFileName() + ".fio");
        t.fioOutput = t.scratch.resolveSibling(t.scratch.getFileName() + ".fio.out");
        final long seconds = Math.max(1, TimeUnit.NANOSECONDS.toSeconds(durationNs + 999_999_999L));
        final List<String> command = List.of("fio", "--name=topology", "--filename=" + t.scratch,
            "--rw=randwrite", "--bs=" + WORKLOAD_BLOCK, "--direct=1", "--ioengine=psync", "--size=" + scratchBytes,
            "--time_based", "--runtime=" + seconds, "--write_bw_log=" + t.fioLogPrefix,
            "--log_avg_msec=" + Math.max(100, sampleIntervalNs / 1_000_000), "--output-format=json",
            "--output=" + t.fioOutput);
        try
        {
            t.fio = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(t.scratch.resolveSibling(t.scratch.getFileName() + ".fio.log").toFile()).start();
        }
        catch (final IOException ex)
        {
            throw new IOException("cannot run fio (" + ex.getMessage() + "): install it (apt-get install fio) or use " +
                "--workload builtin");
        }
        t.writeSource = "fio randwrite, " + WORKLOAD_BLOCK / 1024 + " KiB blocks, direct=1, on scratch file " +
            t.scratch + " (fio's bandwidth log)";
    }

    @Override
    public int doWork()
    {
        final long nowNs = clock.nanoTime();
        try
        {
            return switch (phase)
            {
                case PHASE_SAMPLE -> sample(nowNs);
                case PHASE_READ -> read(nowNs);
                default -> 0;
            };
        }
        catch (final IOException | RuntimeException ex)
        {
            failure = ex.getMessage();
            phase = PHASE_DONE;
            return 1;
        }
    }

    private int sample(final long nowNs) throws IOException
    {
        int work = 0;
        if ("builtin".equals(workload))
        {
            for (final Target t : targets)
            {
                final long offset = ThreadLocalRandom.current().nextLong(t.scratchBlocks) * WORKLOAD_BLOCK;
                writeBuffer.clear();
                while (writeBuffer.hasRemaining())
                {
                    t.scratchChannel.write(writeBuffer, offset + writeBuffer.position());
                }
                t.workloadBytes += WORKLOAD_BLOCK;
                work++;
            }
        }
        if (nowNs >= nextSampleNs)
        {
            for (final Target t : targets)
            {
                final long counter = "builtin".equals(workload) ? t.workloadBytes : writtenBytes(t);
                if (t.lastCounter >= 0 && counter >= 0)
                {
                    final long elapsed = Math.max(1, nowNs - t.lastSampleNs);
                    t.writeSamples.add(List.of((t.lastSampleNs - startNs) / 1_000_000,
                        (long)((counter - t.lastCounter) * 1e9 / elapsed)));
                }
                t.lastCounter = counter;
                t.lastSampleNs = nowNs;
            }
            nextSampleNs += sampleIntervalNs;
            work++;
        }
        if (nowNs - startNs >= durationNs && (!"fio".equals(workload) || fioFinished(nowNs)))
        {
            finishWorkloads();
            phase = PHASE_READ;
            work++;
        }
        return work;
    }

    private boolean fioFinished(final long nowNs)
    {
        for (final Target t : targets)
        {
            if (t.fio.isAlive() && nowNs - startNs < durationNs + TimeUnit.SECONDS.toNanos(30))
            {
                return false;
            }
        }
        return true;
    }

    private long writtenBytes(final Target t) throws IOException
    {
        if (t.statFile == null)
        {
            return -1;
        }
        final String[] fields = Files.readString(t.statFile).trim().split("\\s+");
        return Long.parseLong(fields[6]) * 512;
    }

    private void finishWorkloads() throws IOException
    {
        for (final Target t : targets)
        {
            if (t.scratchChannel != null)
            {
                t.scratchChannel.close();
                t.scratchChannel = null;
            }
            if (t.fio != null)
            {
                if (t.fio.isAlive())
                {
                    t.fio.destroy();
                    throw new IOException("fio did not finish in time on " + t.scratch);
                }
                if (t.fio.exitValue() != 0)
                {
                    final Path log = t.scratch.resolveSibling(t.scratch.getFileName() + ".fio.log");
                    throw new IOException("fio failed (exit " + t.fio.exitValue() + "): " +
                        (Files.exists(log) ? Files.readString(log, StandardCharsets.UTF_8).trim() : ""));
                }
                t.writeSamples.clear();
                t.writeSamples.addAll(parseFioBandwidthLog(t.fioLogPrefix.resolveSibling(
                    t.fioLogPrefix.getFileName() + "_bw.1.log")));
            }
        }
        removeScratch();
    }

    /**
     * @param log fio's bandwidth log: lines of "msec, KiB/s, direction, block size, offset[, priority]".
     * @return samples of [ms since start, bytes per second].
     * @throws IOException when it cannot be read.
     */
    static List<List<Object>> parseFioBandwidthLog(final Path log) throws IOException
    {
        final List<List<Object>> samples = new ArrayList<>();
        for (final String line : Files.readAllLines(log))
        {
            final String[] f = line.split(",");
            if (f.length >= 2 && !line.isBlank())
            {
                samples.add(List.of(Long.parseLong(f[0].trim()), Long.parseLong(f[1].trim()) * 1024));
            }
        }
        if (samples.isEmpty())
        {
            throw new IOException("fio wrote no bandwidth samples to " + log);
        }
        return samples;
    }

    private int read(final long nowNs) throws IOException
    {
        if (readIndex >= targets.size())
        {
            phase = PHASE_DONE;
            return 1;
        }
        final Target t = targets.get(readIndex);
        if (readChannel == null)
        {
            try
            {
                readChannel = FileChannel.open(t.path, StandardOpenOption.READ, ExtendedOpenOption.DIRECT);
            }
            catch (final IOException ex)
            {
                t.readError = "cannot open " + t.path + " for reading: " + ex.getMessage();
                readIndex++;
                return 1;
            }
            readStartNs = nowNs;
        }
        final long readable = t.size / 4096 * 4096;
        final boolean timeUp = nowNs - readStartNs >= readTimeNs;
        if (t.readBytes >= readable || timeUp)
        {
            t.readNs = Math.max(1, nowNs - readStartNs);
            readChannel.close();
            readChannel = null;
            readIndex++;
            return 1;
        }
        readBuffer.clear().limit((int)Math.min(READ_BLOCK, readable - t.readBytes));
        final int n = readChannel.read(readBuffer, t.readBytes);
        if (n <= 0)
        {
            t.readBytes = readable; // Shorter than it said: stop here.
            return 1;
        }
        t.readBytes += n;
        return 1;
    }

    /**
     * @return whether every measurement finished (or one failed).
     */
    public boolean isDone()
    {
        return phase == PHASE_DONE;
    }

    /**
     * @return why the volume measurements stopped early, or null.
     */
    public String failure()
    {
        return failure;
    }

    /**
     * @return fraction of the planned time elapsed, 0..1, for progress.
     */
    public double progress()
    {
        if (phase == PHASE_DONE)
        {
            return 1.0;
        }
        final double planned = durationNs + (double)readTimeNs * targets.size();
        return Math.min(0.99, (clock.nanoTime() - startNs) / planned);
    }

    /**
     * @return a one-line description of the current phase.
     */
    public String phase()
    {
        return switch (phase)
        {
            case PHASE_SAMPLE -> "write rate (" + workload + ")";
            case PHASE_READ -> "read rate of " + targets.get(Math.min(readIndex, targets.size() - 1)).path;
            default -> "done";
        };
    }

    /**
     * @return per volume: path, kind, size, where the write rate came from, samples, peak and mean write rate,
     * read rate. Once {@link #isDone()}.
     */
    public List<Map<String, Object>> results()
    {
        final List<Map<String, Object>> list = new ArrayList<>();
        for (final Target t : targets)
        {
            final Map<String, Object> v = new LinkedHashMap<>();
            v.put("path", t.path.toString());
            v.put("kind", t.block ? "block device" : "file");
            v.put("size", t.size);
            v.put("workload", workload);
            v.put("write_source", t.writeSource);
            long peak = 0;
            double sum = 0;
            for (final List<Object> s : t.writeSamples)
            {
                final long rate = ((Number)s.get(1)).longValue();
                peak = Math.max(peak, rate);
                sum += rate;
            }
            v.put("write_rate_peak_bps", peak);
            v.put("write_rate_mean_bps", t.writeSamples.isEmpty() ? 0L : (long)(sum / t.writeSamples.size()));
            v.put("write_samples", t.writeSamples);
            v.put("sample_interval_ms", sampleIntervalNs / 1_000_000);
            v.put("read_bytes", t.readBytes);
            v.put("read_rate_bps", t.readNs > 0 ? (long)(t.readBytes * 1e9 / t.readNs) : 0L);
            if (t.readError != null)
            {
                v.put("read_error", t.readError);
            }
            list.add(v);
        }
        return list;
    }

    @Override
    public void onClose()
    {
        try
        {
            if (readChannel != null)
            {
                readChannel.close();
            }
            for (final Target t : targets)
            {
                if (t.scratchChannel != null)
                {
                    t.scratchChannel.close();
                }
                if (t.fio != null && t.fio.isAlive())
                {
                    t.fio.destroy();
                }
            }
            removeScratch();
        }
        catch (final IOException ex)
        {
            failure = failure != null ? failure : "cleaning up: " + ex.getMessage();
        }
    }

    private void removeScratch() throws IOException
    {
        for (final Target t : targets)
        {
            if (t.scratch != null)
            {
                Files.deleteIfExists(t.scratch);
                for (final String suffix : new String[] {".fio_bw.1.log", ".fio.out", ".fio.log"})
                {
                    Files.deleteIfExists(t.scratch.resolveSibling(t.scratch.getFileName() + suffix));
                }
            }
        }
    }
}
