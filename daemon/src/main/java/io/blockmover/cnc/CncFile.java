package io.blockmover.cnc;

import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.EnumMap;
import java.util.Map;

import org.agrona.IoUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.agrona.concurrent.status.AtomicCounter;
import org.agrona.concurrent.status.CountersManager;
import org.agrona.concurrent.status.CountersReader;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;

import static io.blockmover.cnc.CncFileDescriptor.HEADER_LENGTH;
import static io.blockmover.cnc.CncFileDescriptor.HEARTBEAT_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.MAGIC;
import static io.blockmover.cnc.CncFileDescriptor.MAGIC_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.MAX_NODE_NAME_LENGTH;
import static io.blockmover.cnc.CncFileDescriptor.METADATA_LENGTH_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.NODE_NAME_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.PID_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.START_TIME_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.VALUES_LENGTH_OFFSET;
import static io.blockmover.cnc.CncFileDescriptor.VERSION;
import static io.blockmover.cnc.CncFileDescriptor.VERSION_OFFSET;

/**
 * The memory-mapped counters file ({@link CncFileDescriptor}). The daemon creates it with
 * {@link #create(Path, String, long, int)}; readers map it with {@link #openReadOnly(Path)}. Counters are
 * allocated by the conductor only; any thread may update a counter it was given.
 */
public final class CncFile implements AutoCloseable
{
    private final MappedByteBuffer mapped;
    private final UnsafeBuffer header;
    private final CountersReader reader;
    private final CountersManager manager;
    private final Map<SystemCounter, AtomicCounter> system = new EnumMap<>(SystemCounter.class);

    private CncFile(final MappedByteBuffer mapped, final boolean writable)
    {
        this.mapped = mapped;
        this.header = new UnsafeBuffer(mapped, 0, HEADER_LENGTH);
        final int metadataLength = header.getInt(METADATA_LENGTH_OFFSET);
        final int valuesLength = header.getInt(VALUES_LENGTH_OFFSET);
        final UnsafeBuffer metadata = new UnsafeBuffer(mapped, HEADER_LENGTH, metadataLength);
        final UnsafeBuffer values = new UnsafeBuffer(mapped, HEADER_LENGTH + metadataLength, valuesLength);
        if (writable)
        {
            manager = new CountersManager(metadata, values, StandardCharsets.UTF_8);
            reader = manager;
        }
        else
        {
            manager = null;
            reader = new CountersReader(metadata, values, StandardCharsets.UTF_8);
        }
    }

    /**
     * Creates (replacing any old one) and maps the counters file, and allocates the system counters.
     *
     * @param path        of the file.
     * @param nodeName    of the daemon.
     * @param pid         of the daemon.
     * @param maxCounters capacity.
     * @return the file.
     */
    public static CncFile create(final Path path, final String nodeName, final long pid, final int maxCounters)
    {
        final int valuesLength = maxCounters * CountersReader.COUNTER_LENGTH;
        final int metadataLength = maxCounters * CountersReader.METADATA_LENGTH;
        try
        {
            Files.createDirectories(path.toAbsolutePath().getParent());
            Files.deleteIfExists(path);
            final MappedByteBuffer mapped;
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE))
            {
                mapped = channel.map(FileChannel.MapMode.READ_WRITE, 0, HEADER_LENGTH + metadataLength + valuesLength);
            }
            final UnsafeBuffer header = new UnsafeBuffer(mapped, 0, HEADER_LENGTH);
            header.putInt(VERSION_OFFSET, VERSION);
            header.putInt(PID_OFFSET, (int)pid);
            header.putLong(START_TIME_OFFSET, System.currentTimeMillis());
            header.putInt(METADATA_LENGTH_OFFSET, metadataLength);
            header.putInt(VALUES_LENGTH_OFFSET, valuesLength);
            final byte[] name = nodeName.getBytes(StandardCharsets.UTF_8);
            final int nameLength = Math.min(name.length, MAX_NODE_NAME_LENGTH);
            header.putInt(NODE_NAME_OFFSET, nameLength);
            header.putBytes(NODE_NAME_OFFSET + 4, name, 0, nameLength);
            final CncFile file = new CncFile(mapped, true);
            for (final SystemCounter counter : SystemCounter.values())
            {
                file.system.put(counter, file.manager.newCounter(counter.label(), SystemCounter.TYPE_ID));
            }
            file.heartbeat(System.currentTimeMillis());
            // The magic goes last: a reader that sees it sees a complete file.
            header.putLongVolatile(MAGIC_OFFSET, MAGIC);
            return file;
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "cannot create counters file " + path + ": " +
                ex.getMessage() + " (check counters.file and that its directory is writable)", ex);
        }
    }

    /**
     * Maps an existing counters file for reading.
     *
     * @param path of the file.
     * @return the file.
     * @throws BlockmoverException NOT_FOUND when there is no file (daemon never started here).
     */
    public static CncFile openReadOnly(final Path path)
    {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ))
        {
            final long size = channel.size();
            if (size < HEADER_LENGTH)
            {
                throw new BlockmoverException(ErrorCode.NOT_FOUND, path + " is not a blockmover counters file " +
                    "(or the daemon is still creating it)");
            }
            final MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_ONLY, 0, size);
            final UnsafeBuffer header = new UnsafeBuffer(mapped, 0, HEADER_LENGTH);
            if (header.getLongVolatile(MAGIC_OFFSET) != MAGIC || header.getInt(VERSION_OFFSET) != VERSION ||
                size < (long)HEADER_LENGTH + header.getInt(METADATA_LENGTH_OFFSET) +
                header.getInt(VALUES_LENGTH_OFFSET))
            {
                IoUtil.unmap(mapped);
                throw new BlockmoverException(ErrorCode.NOT_FOUND, path + " is not a blockmover counters file " +
                    "(or the daemon is still creating it)");
            }
            return new CncFile(mapped, false);
        }
        catch (final NoSuchFileException ex)
        {
            throw new BlockmoverException(ErrorCode.NOT_FOUND, "no counters file at " + path +
                ": blockmoverd has not run here (start it, or name the file with --counters-file)");
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot read counters file " + path + ": " + ex, ex);
        }
    }

    /**
     * @param counter a system counter.
     * @return it, for updates from any thread.
     */
    public AtomicCounter counter(final SystemCounter counter)
    {
        return system.get(counter);
    }

    /**
     * Allocates a counter. Conductor thread only.
     *
     * @param label  shown by blockmover stat.
     * @param typeId kind of counter.
     * @return the counter; close it to free the slot.
     */
    public AtomicCounter newCounter(final String label, final int typeId)
    {
        return manager.newCounter(label, typeId);
    }

    /**
     * Allocates a counter with a key that says what it measures (see the key layouts of its type). Conductor
     * thread only.
     *
     * @param label  shown by blockmover stat.
     * @param typeId kind of counter.
     * @param key    writes the key.
     * @return the counter; close it to free the slot.
     */
    public AtomicCounter newCounter(final String label, final int typeId,
        final java.util.function.Consumer<org.agrona.MutableDirectBuffer> key)
    {
        return manager.newCounter(label, typeId, key);
    }

    /**
     * @return a reader over the counters.
     */
    public CountersReader reader()
    {
        return reader;
    }

    public void heartbeat(final long epochMs)
    {
        header.putLongRelease(HEARTBEAT_OFFSET, epochMs);
    }

    public long heartbeatMs()
    {
        return header.getLongVolatile(HEARTBEAT_OFFSET);
    }

    public long pid()
    {
        return header.getInt(PID_OFFSET) & 0xFFFFFFFFL;
    }

    public long startTimeMs()
    {
        return header.getLong(START_TIME_OFFSET);
    }

    public String nodeName()
    {
        final int length = Math.min(header.getInt(NODE_NAME_OFFSET), MAX_NODE_NAME_LENGTH);
        final byte[] bytes = new byte[length];
        header.getBytes(NODE_NAME_OFFSET + 4, bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    @Override
    public void close()
    {
        IoUtil.unmap(mapped);
    }
}
