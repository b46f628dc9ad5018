package io.blockmover.replication.log;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileStore;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.agrona.IoUtil;
import org.agrona.collections.LongArrayList;
import org.agrona.concurrent.UnsafeBuffer;

import com.sun.jna.LastErrorException;
import com.sun.nio.file.ExtendedOpenOption;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.io.DurableFiles;
import io.blockmover.io.Libc;

import static io.blockmover.replication.log.RecordLogDescriptor.CAPACITY_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.FILE_HEADER_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.FILE_MAGIC;
import static io.blockmover.replication.log.RecordLogDescriptor.FILE_MAGIC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.FILE_VERSION;
import static io.blockmover.replication.log.RecordLogDescriptor.FILE_VERSION_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.GEOMETRY_CRC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.GEOMETRY_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.MAX_RECORD_LENGTH_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.MAX_SEGMENT_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_EPOCH_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_FLAGS_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_HEADER_CRC_COVERED_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_HEADER_CRC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_HEADER_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_LENGTH_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_LSN_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_MAGIC;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_MAGIC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_OFFSET_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_PAYLOAD_CRC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_RESERVED_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_TYPE_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.RECORD_VOLUME_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SEGMENT_LENGTH_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_A_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_B_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_CRC_COVERED_LENGTH;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_CRC_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_EPOCH_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_GENERATION_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_HEAD_LSN_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.SLOT_HEAD_POSITION_OFFSET;
import static io.blockmover.replication.log.RecordLogDescriptor.TYPE_DATA;
import static io.blockmover.replication.log.RecordLogDescriptor.TYPE_PADDING;
import static io.blockmover.replication.log.RecordLogDescriptor.recordLength;

/**
 * A circular, memory-mapped, crash-recoverable log of replicated writes (records), laid out as described in
 * {@link RecordLogDescriptor}. Positions are logical and only grow; the byte of the body that holds a position is
 * {@code position % capacity}. The body is mapped as segments of at most 1 GiB, so the log may exceed 2 GiB.
 * <p>
 * Threading:
 * <ul>
 * <li>one appender thread at a time (the caller serializes): {@link #tryAppend}, {@link #stage},
 * {@link #writeBatch}, {@link #claim}, {@link #commit}, {@link #abort}, {@link #force}, {@link #reset} and
 * {@link #close};</li>
 * <li>one releaser thread at a time, may differ from the appender: {@link #release};</li>
 * <li>any number of {@link Cursor}s, each confined to one thread, on any thread;</li>
 * <li>{@link #markFlag}, {@link #flags} and the accessors: any thread.</li>
 * </ul>
 * The tail is published with a release store after the record is complete, and read with acquire semantics by
 * cursors, so a cursor never sees a half-written record.
 * <p>
 * Durability: {@link #force} makes the records appended since the last force and the released head durable.
 * Space freed by {@link #release} becomes reusable by appends only at the next {@link #force} (or
 * {@link #persistHead}, which persists the head without the records), once the header
 * that records the release is on disk: otherwise a host crash could leave an old head in the header pointing
 * into records already overwritten, and recovery would lose the whole log. The appender calls force in its duty
 * cycle anyway (records must be durable before they are acknowledged), and a force with nothing new is free.
 * <p>
 * Recovery (at open) scans from the persisted head and accepts records while magic, header CRC, payload CRC,
 * geometry, LSN (previous + 1) and epoch (never decreasing) are valid; the first invalid record is the tail.
 */
public final class RecordLog implements AutoCloseable
{
    /** {@link #tryAppend} and {@link #commit}: not enough free space right now. */
    public static final long NO_SPACE = -1;
    /** {@link #commit}: the claimed payload does not match its CRC; the claim is abandoned. */
    public static final long CRC_MISMATCH = -2;
    /** Head LSN of a log that has never held a record: the first append chooses the LSN. */
    public static final long NULL_LSN = 0;

    private static final long NO_CLAIM = -1;
    /** {@link #stage} could not add the record to the batch: write the batch, then append it alone. */
    public static final long NOT_STAGED = -3;
    /** Bytes a batch of staged records holds at most: one pwrite. */
    static final int BATCH_BYTES = 256 * 1024;
    /** {@link #forceRecords} persists the head once this much was released since (or a 16th of a smaller log). */
    static final long HEAD_PERSIST_BYTES = 4L << 20;
    /** {@link #forceRecords} persists a head that moved once this long has passed since it was last persisted. */
    static final long HEAD_PERSIST_INTERVAL_NS = 100_000_000L;
    /** Appends ask for the page cache to hold this much of the log ahead of the tail (see readAhead). */
    private static final int READ_AHEAD_LENGTH = 1 << 20;
    /** Chunks of {@link #READ_AHEAD_LENGTH} that recovery asks the kernel to read ahead of its scan. */
    private static final int RECOVERY_READ_AHEAD_CHUNKS = 32;
    private static final int STAGING_ALIGNMENT = 4096;
    /** {@link #writeBehind} starts the write-out of appended records once this much is waiting. */
    static final long WRITE_BEHIND_BYTES = 1L << 20;
    /**
     * {@link #discardReleased} zeroes file ranges aligned to this, inside the released span: a multiple of every
     * file system block and page size in use, so that no partial block or page, which may hold bytes of a record
     * still live, is ever zeroed (a zero range rewrites the partial blocks at its edges).
     */
    static final int DISCARD_ALIGNMENT = 64 * 1024;
    /** Ranges of the file kept apart while their blocks may be unwritten (see writeOutForDeviceFlush). */
    private static final int MAX_UNWRITTEN_RANGES = 16;

    private Path path; // Changes only when a resize renames the file (renameTo), under the owner's locks.
    // A copy of another log into this one (startCopyFrom to finishCopyFrom): where it began in the other log, how
    // many records it copied, and the positions (there, here) of those copied without their WRITTEN flag.
    private long copyFromHead;
    private long copiedRecords;
    private final LongArrayList unflagged = new LongArrayList();
    private final FileChannel channel;
    private final MappedByteBuffer headerMapped;
    private final UnsafeBuffer header;
    private final ByteBuffer headerView;
    private final MappedByteBuffer[] segments;
    private final UnsafeBuffer[] segmentBuffers;
    private final ByteBuffer[] appenderViews;
    // A claim is filled here and written to the file with one pwrite at commit, never through the mapping (see
    // commit): stores into a shared mapping make every force write-protect those pages again, a TLB shoot-down
    // each time, and the next store into them faults.
    private final ByteBuffer staging;
    private final UnsafeBuffer stagingBuffer;
    private final ByteBuffer stagingView;
    private final ByteBuffer stagingCrcView;
    private final ByteBuffer padding;
    private final UnsafeBuffer paddingBuffer;
    // Records staged by stage() and written together by writeBatch(): contiguous in the log from batchStart, none
    // of them published. Appender thread only, like the staging buffer.
    private final ByteBuffer batch;
    private final UnsafeBuffer batchBuffer;
    private final ByteBuffer batchCrcView;
    private int batchRecords;
    private long batchStart;
    private long batchEnd;
    private long batchLastLsn;
    private long batchLastPosition;
    private int batchLastLength;
    // The head slot is written the same way, for the same reason (force() may run on another thread than the
    // appender; forces and resets are serialized by their callers, so one buffer serves them).
    private final ByteBuffer slotStaging;
    private final UnsafeBuffer slotBuffer;
    // markFlag runs on any thread (each NBD worker marks its own records).
    private final ThreadLocal<ByteBuffer> flagWord =
        ThreadLocal.withInitial(() -> ByteBuffer.allocateDirect(4).order(java.nio.ByteOrder.nativeOrder()));
    private final long capacity;
    private final int segmentLength;
    private final int segmentShift;
    private final int segmentMask;
    private final int maxRecordLength;
    private final int readAheadLength;
    private final CRC32C appenderCrc = new CRC32C();
    // The head slots have their own CRC state: force() may run on another thread than the appender.
    private final CRC32C slotCrc = new CRC32C();
    // A descriptor of the file for sync_file_range and fallocate, which FileChannel does not offer; -1 if it could
    // not be opened (write-behind and discards only save disk writes: the log works without them).
    private final int fileDescriptor;

    // Tail: single writer (appender), release store; readers acquire.
    private final AtomicLong tailPosition = new AtomicLong();
    private final AtomicLong tailLsn = new AtomicLong();
    // Released head: single writer (releaser), a seqlock keeps the position and LSN pair consistent.
    private final AtomicLong headVersion = new AtomicLong();
    private final AtomicLong headPosition = new AtomicLong();
    private final AtomicLong headLsn = new AtomicLong();
    // Head as last made durable: appends may overwrite up to here only.
    private final AtomicLong reusablePosition = new AtomicLong();

    private final Recovery recovery;

    // Appender thread state.
    private int epoch;
    private long generation;
    private long persistedHeadPosition;
    private long persistedHeadLsn;
    private long headPersistedNs = System.nanoTime();
    private long headPersistIntervalNs = HEAD_PERSIST_INTERVAL_NS;
    // Written by the forcing thread (callers serialize forces); read by a destination's applier, which applies
    // only records durable here (the volumes' write-ahead rule).
    private volatile long forcedPosition;
    // The head as readHead() last read it: the forcing thread's (callers serialize forces).
    private long headPositionRead;
    private long headLsnRead;
    private long nextLsn;
    private long claimRecordPosition = NO_CLAIM;
    private int claimLength;
    private long writeBehindPosition;
    private long writeBehindBytes;
    private boolean closed;
    // Forcing-thread state (callers serialize forces and discards): whether released records may be discarded
    // (see discardReleased), and the position below which released records are discarded or left to the kernel.
    // Appends never reuse space at or beyond it (publishReusable), so no append can land where a discard zeroes.
    private boolean discardable;
    private long discardedPosition;
    // Forcing-thread state: whether a write over this file's blocks needs no change of its metadata once they
    // were written (ext4), and the stream ranges [start, end) whose blocks were zeroed by a discard, or found
    // unwritten or unallocated at open, and are not yet recorded as written again: the records that land on
    // them a lap later, at [start + capacity, end + capacity), need a force of the file (writeOutForDeviceFlush).
    private final boolean overwritesInPlace;
    private final long[] unwrittenRanges = new long[2 * MAX_UNWRITTEN_RANGES];
    private int unwrittenRangeCount;
    private final AtomicLong discardedBytes = new AtomicLong();

    /**
     * What recovery found when the log was opened.
     *
     * @param records      DATA records between head and tail.
     * @param firstLsn     LSN of the oldest record, or the head LSN when there is none.
     * @param lastLsn      LSN of the newest record, or the head LSN - 1 when there is none.
     * @param headPosition persisted head position the scan started from.
     * @param tailPosition position after the last valid record.
     */
    public record Recovery(long records, long firstLsn, long lastLsn, long headPosition, long tailPosition)
    {
    }

    /**
     * Told how far recovery's scan has gone, each time it asks for more to be read ahead: about once a chunk of
     * {@value #READ_AHEAD_LENGTH} bytes, once the scan has passed its first.
     * A full log of tens of GiB takes the scan seconds to minutes (about 0.75 s a GiB measured here), which may
     * outlast systemd's start timeout or watchdog: the daemon tells systemd from here that it is progressing.
     */
    @FunctionalInterface
    public interface RecoveryProgress
    {
        /** Tells nobody. */
        RecoveryProgress NONE = (checkedBytes, capacity) ->
        {
        };

        /**
         * @param checkedBytes bytes of records checked so far, from the head.
         * @param capacity     the most the log can hold.
         */
        void onProgress(long checkedBytes, long capacity);
    }

    private RecordLog(
        final Path path,
        final FileChannel channel,
        final MappedByteBuffer headerMapped,
        final MappedByteBuffer[] segments,
        final long capacity,
        final int segmentLength,
        final int maxRecordLength,
        final RecoveryProgress progress)
    {
        this.path = path;
        this.channel = channel;
        this.headerMapped = headerMapped;
        this.header = new UnsafeBuffer(headerMapped);
        this.headerView = headerMapped.duplicate();
        this.segments = segments;
        this.capacity = capacity;
        this.segmentLength = segmentLength;
        this.segmentShift = Integer.numberOfTrailingZeros(segmentLength);
        this.segmentMask = segmentLength - 1;
        this.maxRecordLength = maxRecordLength;
        this.readAheadLength = Math.min(READ_AHEAD_LENGTH, segmentLength);
        this.segmentBuffers = new UnsafeBuffer[segments.length];
        this.appenderViews = new ByteBuffer[segments.length];
        for (int i = 0; i < segments.length; i++)
        {
            segmentBuffers[i] = new UnsafeBuffer(segments[i]);
            appenderViews[i] = segments[i].duplicate();
        }
        this.staging = BufferUtil.allocateDirectAligned(
            (RECORD_HEADER_LENGTH + maxRecordLength + STAGING_ALIGNMENT - 1) & -STAGING_ALIGNMENT, STAGING_ALIGNMENT);
        this.stagingBuffer = new UnsafeBuffer(staging);
        this.stagingView = staging.duplicate();
        this.stagingCrcView = staging.duplicate();
        this.batch = BufferUtil.allocateDirectAligned(BATCH_BYTES, STAGING_ALIGNMENT);
        this.batchBuffer = new UnsafeBuffer(batch);
        this.batchCrcView = batch.duplicate();
        this.padding = BufferUtil.allocateDirectAligned(RECORD_HEADER_LENGTH, 64);
        this.paddingBuffer = new UnsafeBuffer(padding);
        this.slotStaging = BufferUtil.allocateDirectAligned(SLOT_CRC_OFFSET + 4, 64);
        this.slotBuffer = new UnsafeBuffer(slotStaging);
        this.recovery = recover(progress);
        readAhead(tailPosition.get());
        readAhead(tailPosition.get() + readAheadLength);
        this.writeBehindPosition = tailPosition.get();
        this.fileDescriptor = openDescriptor(path);
        this.discardedPosition = persistedHeadPosition;
        // Both hold on ext4 only: see isExt4.
        final boolean ext4 = fileDescriptor >= 0 && isExt4(path);
        this.discardable = ext4;
        this.overwritesInPlace = ext4;
        if (overwritesInPlace)
        {
            findUnwrittenBlocks();
        }
    }

    /**
     * Keeps apart the ranges of the body whose blocks are not written on disk: holes (a sparse log) and unwritten
     * extents (discards a restart left zeroed). The log is forced first, so that a block written back since its
     * discard, but whose conversion to written the file system has not yet recorded on disk, is recorded now.
     * Each range becomes the stream range its blocks held in the lap before the tail.
     */
    private void findUnwrittenBlocks()
    {
        final long tail = tailPosition.get();
        try
        {
            channel.force(false);
            Libc.unwrittenRanges(fileDescriptor, FILE_HEADER_LENGTH + capacity, (start, end) ->
            {
                final long bodyStart = Math.max(start, FILE_HEADER_LENGTH) - FILE_HEADER_LENGTH;
                final long bodyEnd = end - FILE_HEADER_LENGTH;
                if (bodyEnd <= bodyStart)
                {
                    return;
                }
                // The position in [tail - capacity, tail) of each body offset.
                final long lapStart = tail - capacity;
                final long wrapAt = Math.floorMod(lapStart, capacity);
                final long first = lapStart + Math.floorMod(bodyStart - wrapAt, capacity);
                if (bodyStart < wrapAt && bodyEnd > wrapAt)
                {
                    addUnwritten(lapStart, lapStart + bodyEnd - wrapAt);
                    addUnwritten(first, first + wrapAt - bodyStart);
                }
                else
                {
                    addUnwritten(first, first + bodyEnd - bodyStart);
                }
            });
        }
        catch (final IOException | LastErrorException ex)
        {
            addUnwritten(tail - capacity, tail); // Not known: all of it.
        }
    }

    private void addUnwritten(final long start, final long end)
    {
        for (int i = 0; i < unwrittenRangeCount; i++)
        {
            final int at = 2 * i;
            if (start <= unwrittenRanges[at + 1] && end >= unwrittenRanges[at])
            {
                unwrittenRanges[at] = Math.min(unwrittenRanges[at], start);
                unwrittenRanges[at + 1] = Math.max(unwrittenRanges[at + 1], end);
                return;
            }
        }
        if (unwrittenRangeCount == MAX_UNWRITTEN_RANGES)
        {
            // No room to keep them apart: one range over all of them, larger than it need be.
            long low = start;
            long high = end;
            for (int i = 0; i < unwrittenRangeCount; i++)
            {
                low = Math.min(low, unwrittenRanges[2 * i]);
                high = Math.max(high, unwrittenRanges[2 * i + 1]);
            }
            unwrittenRanges[0] = low;
            unwrittenRanges[1] = high;
            unwrittenRangeCount = 1;
            return;
        }
        unwrittenRanges[2 * unwrittenRangeCount] = start;
        unwrittenRanges[2 * unwrittenRangeCount + 1] = end;
        unwrittenRangeCount++;
    }

    /**
     * Forgets the ranges whose next lap's records a force has made durable: writing them recorded their blocks as
     * written, and that force wrote the record. Forcing thread, after a force.
     */
    private void forgetUnwrittenForcedOver()
    {
        int kept = 0;
        for (int i = 0; i < unwrittenRangeCount; i++)
        {
            final long start = unwrittenRanges[2 * i];
            final long end = unwrittenRanges[2 * i + 1];
            if (end + capacity > forcedPosition)
            {
                unwrittenRanges[2 * kept] = start;
                unwrittenRanges[2 * kept + 1] = end;
                kept++;
            }
        }
        unwrittenRangeCount = kept;
    }

    private static int openDescriptor(final Path path)
    {
        try
        {
            return Libc.open(path.toString(), Libc.O_RDWR | Libc.O_CLOEXEC);
        }
        catch (final LastErrorException ex)
        {
            return -1;
        }
    }

    /**
     * ext4 is where two things this log relies on hold. A zero range of the file drops its dirty pages without
     * writing them (discardReleased): measured under Linux 6.1 (Debian 12) and 6.18, where 256 MiB of dirty log
     * zeroed behind the appends wrote nothing (a punched hole wrote them all first on 6.1). XFS writes a range back
     * before it zeroes it (xfs_flush_unmap_range, read in its source, not measured), which would turn a discard
     * into a synchronous write of what it was meant to spare. And writing over a file's written blocks changes
     * none of the metadata fdatasync would have to write (writeOutForDeviceFlush): ext4 overwrites in place; btrfs
     * copies on write, and so does XFS for a reflinked file's blocks (not measured here). Other file systems get
     * neither until that is measured.
     */
    private static boolean isExt4(final Path path)
    {
        try
        {
            return "ext4".equals(Files.getFileStore(path).type());
        }
        catch (final IOException ex)
        {
            return false;
        }
    }

    /**
     * Opens the log, creating it if the file does not exist, with segments of min(capacity, 1 GiB).
     *
     * @param file            of the log.
     * @param capacity        bytes of body; a multiple of the segment length.
     * @param maxRecordLength largest payload in bytes.
     * @return the open log, recovered.
     */
    public static RecordLog open(final Path file, final long capacity, final int maxRecordLength)
    {
        return open(file, capacity, maxRecordLength, RecoveryProgress.NONE);
    }

    /**
     * Opens the log as {@link #open(Path, long, int)} does, telling progress how far recovery has gone.
     *
     * @param file            of the log.
     * @param capacity        bytes of body; a multiple of the segment length.
     * @param maxRecordLength largest payload in bytes.
     * @param progress        told during a recovery scan longer than a chunk.
     * @return the open log, recovered.
     */
    public static RecordLog open(final Path file, final long capacity, final int maxRecordLength,
        final RecoveryProgress progress)
    {
        return open(file, capacity, maxRecordLength, (int)Math.min(capacity, MAX_SEGMENT_LENGTH), true, progress);
    }

    /**
     * Checks that a log of this capacity can exist, as {@link #open(Path, long, int)} would, before any is written.
     *
     * @param capacity        bytes of records.
     * @param maxRecordLength the longest payload.
     * @throws BlockmoverException (CONFIG_INVALID) saying which sizes are possible.
     */
    public static void checkGeometry(final long capacity, final int maxRecordLength)
    {
        validateGeometry("", capacity, maxRecordLength, (int)Math.min(capacity, MAX_SEGMENT_LENGTH));
    }

    /**
     * Creates the log file as {@link #open(Path, long, int)} would, every block written once, unless it exists; opens
     * nothing. The slow part of a new log (it writes the whole capacity), for a thread other than the conductor's:
     * an 8 GiB log takes seconds to a minute, and a conductor blocked that long answers no command and stops
     * petting the systemd watchdog. The file appears only once complete (written under another name, then
     * renamed), so an existing file is a prepared one.
     *
     * @param file            the log file.
     * @param capacity        bytes of records.
     * @param maxRecordLength the longest payload.
     */
    public static void prepare(final Path file, final long capacity, final int maxRecordLength)
    {
        prepare(file, capacity, maxRecordLength, new AtomicLong(), () -> false);
    }

    /**
     * Creates the log file as {@link #prepare(Path, long, int)} does, counting the bytes of body written so far,
     * and stopping when told: a create refused by the partner, or a log nobody claims any more, must not go on
     * writing gigabytes for nothing.
     *
     * @param file            the log file.
     * @param capacity        bytes of records.
     * @param maxRecordLength the longest payload.
     * @param written         set as the body is written, up to capacity; for another thread to show progress.
     * @param cancelled       asked before each MiB is written: true stops the write, deletes what was written and
     *                        throws (CANCELLED); the file never appears.
     */
    public static void prepare(final Path file, final long capacity, final int maxRecordLength,
        final AtomicLong written, final BooleanSupplier cancelled)
    {
        final int segmentLength = (int)Math.min(capacity, MAX_SEGMENT_LENGTH);
        validateGeometry("record log " + file + ": ", capacity, maxRecordLength, segmentLength);
        if (!Files.exists(file))
        {
            create(file, capacity, maxRecordLength, segmentLength, true, written, cancelled);
        }
        written.set(capacity);
    }

    /**
     * Opens a sparse log, created without writing its body: for tests that place records far into a large log, or
     * that need its writes to find a full file system.
     */
    public static RecordLog open(final Path file, final long capacity, final int maxRecordLength,
        final int segmentLength)
    {
        return open(file, capacity, maxRecordLength, segmentLength, false, RecoveryProgress.NONE);
    }

    private static RecordLog open(final Path file, final long capacity, final int maxRecordLength,
        final int segmentLength, final boolean preallocate, final RecoveryProgress progress)
    {
        validateGeometry("record log " + file + ": ", capacity, maxRecordLength, segmentLength);
        if (!Files.exists(file))
        {
            create(file, capacity, maxRecordLength, segmentLength, preallocate, new AtomicLong(), () -> false);
        }

        FileChannel channel = null;
        MappedByteBuffer headerMapped = null;
        final MappedByteBuffer[] segments = new MappedByteBuffer[(int)(capacity / segmentLength)];
        try
        {
            channel = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
            final long expectedSize = FILE_HEADER_LENGTH + capacity;
            if (channel.size() != expectedSize)
            {
                throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + file + " is " + channel.size() +
                    " bytes, expected " + expectedSize + " for capacity " + capacity +
                    ": set the configured log capacity back to the file's, or remove the file to start an empty" +
                    " log (the group then resyncs from its bitmap)");
            }
            headerMapped = channel.map(FileChannel.MapMode.READ_WRITE, 0, FILE_HEADER_LENGTH);
            validateHeader(file, new UnsafeBuffer(headerMapped), capacity, maxRecordLength, segmentLength);
            for (int i = 0; i < segments.length; i++)
            {
                segments[i] = channel.map(
                    FileChannel.MapMode.READ_WRITE, FILE_HEADER_LENGTH + (long)i * segmentLength, segmentLength);
            }
            return new RecordLog(file, channel, headerMapped, segments, capacity, segmentLength, maxRecordLength,
                progress);
        }
        catch (final IOException ex)
        {
            unmapAll(headerMapped, segments);
            closeQuietly(channel, ex);
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot open record log " + file + ": " + ex, ex);
        }
        catch (final RuntimeException ex)
        {
            unmapAll(headerMapped, segments);
            closeQuietly(channel, ex);
            throw ex;
        }
    }

    /**
     * @return what recovery found at open.
     */
    public Recovery recovery()
    {
        return recovery;
    }

    public Path path()
    {
        return path;
    }

    public long capacity()
    {
        return capacity;
    }

    public int segmentLength()
    {
        return segmentLength;
    }

    public int maxRecordLength()
    {
        return maxRecordLength;
    }

    /**
     * Appends a DATA record: copies the payload, computes its CRC, writes the header last and publishes the new
     * tail. Never blocks and never overwrites unreleased records. Appender thread only.
     *
     * @param lsn         of the record: the previous record's + 1 (any for the first record of a new log).
     * @param volume      index of the volume in the group.
     * @param offset      byte offset in the volume.
     * @param flags       initial flags.
     * @param src         payload source, heap or direct; its position and limit are not used nor changed.
     * @param srcPosition index of the first payload byte in src.
     * @param length      payload bytes, at most {@link #maxRecordLength()}.
     * @return the record's position, or {@link #NO_SPACE}.
     */
    public long tryAppend(
        final long lsn,
        final int volume,
        final long offset,
        final int flags,
        final ByteBuffer src,
        final int srcPosition,
        final int length)
    {
        checkNoClaim();
        checkNoBatch();
        checkLsn(lsn);
        checkLength(length);
        final long recordPosition = reserve(length);
        if (recordPosition < 0)
        {
            return NO_SPACE;
        }
        // Staged and written with one pwrite like a claim (see commit), never stored through the mapping.
        stagingBuffer.putBytes(RECORD_HEADER_LENGTH, src, srcPosition, length);
        final int payloadCrc = crc(stagingCrcView, RECORD_HEADER_LENGTH, length);
        return writeStaged(recordPosition, lsn, volume, offset, flags, payloadCrc, length);
    }

    /**
     * Adds a DATA record to the batch that {@link #writeBatch} writes to the file with one pwrite: a front end that
     * takes many client writes from one socket read appends them all with one system call. Staged records are not
     * published (cursors, {@link #tailPosition} and forces do not see them) until the batch is written, and nothing
     * else may append meanwhile ({@link #tryAppend} and {@link #claim} refuse). Never blocks. Appender thread only.
     *
     * @param lsn         of the record: the previous record's + 1, staged or not.
     * @param volume      index of the volume in the group.
     * @param offset      byte offset in the volume.
     * @param flags       initial flags.
     * @param src         payload source, heap or direct; its position and limit are not used nor changed.
     * @param srcPosition index of the first payload byte in src.
     * @param length      payload bytes, at most {@link #maxRecordLength()}.
     * @return the record's position once written; {@link #NO_SPACE}; or {@link #NOT_STAGED} when it does not fit
     *     the batch (too long, the batch full, or it would start a new segment): write the batch, then
     *     {@link #tryAppend} it.
     */
    public long stage(
        final long lsn,
        final int volume,
        final long offset,
        final int flags,
        final ByteBuffer src,
        final int srcPosition,
        final int length)
    {
        checkNoClaim();
        checkLength(length);
        if (batchRecords == 0)
        {
            checkLsn(lsn);
        }
        else if (lsn != batchLastLsn + 1)
        {
            throw new IllegalArgumentException("LSN " + lsn + " does not follow the staged " + batchLastLsn +
                " in record log " + path);
        }
        final long at = batchRecords == 0 ? tailPosition.get() : batchEnd;
        final int recordLength = recordLength(length);
        if ((batchRecords > 0 ? batchEnd - batchStart : 0) + recordLength > BATCH_BYTES ||
            recordLength > segmentLength - offsetInSegment(at))
        {
            return NOT_STAGED;
        }
        if (at + recordLength - reusablePosition.get() > capacity)
        {
            return NO_SPACE;
        }
        if (batchRecords == 0)
        {
            batchStart = at;
        }
        final int index = (int)(at - batchStart);
        batchBuffer.putBytes(index + RECORD_HEADER_LENGTH, src, srcPosition, length);
        final int payloadCrc = crc(batchCrcView, index + RECORD_HEADER_LENGTH, length);
        fillHeader(batchBuffer, batchCrcView, index, TYPE_DATA, length, volume, lsn, offset, payloadCrc, flags);
        batchRecords++;
        batchEnd = at + recordLength;
        batchLastLsn = lsn;
        batchLastPosition = at;
        batchLastLength = length;
        return at;
    }

    /**
     * @return records staged and not yet written.
     */
    public int stagedRecords()
    {
        return batchRecords;
    }

    /**
     * @return the LSN of the last record staged, or {@link #NULL_LSN} when none is.
     */
    public long lastStagedLsn()
    {
        return batchRecords == 0 ? NULL_LSN : batchLastLsn;
    }

    /**
     * Writes the staged records to the file with one pwrite and publishes them; nothing when none is staged. A
     * crash during the write leaves a prefix of them, as separate appends would: recovery checks each record. On a
     * write error the batch is dropped, as if never staged (the next record takes the first staged LSN), and the
     * error is thrown. Appender thread only.
     *
     * @return the records written.
     */
    public int writeBatch()
    {
        final int records = batchRecords;
        if (records == 0)
        {
            return 0;
        }
        batchRecords = 0;
        final long tail = tailPosition.get();
        // The bytes between a record's payload and the next record (alignment) are whatever the buffer held: no
        // reader looks at them, as none looks at the same bytes of a record appended alone.
        writeFully(batch, (int)(batchEnd - batchStart), fileOffset(batchStart));
        advanceTail(tail, batchLastPosition, batchLastLsn - records + 1, batchLastLsn, batchLastLength);
        return records;
    }

    /**
     * Claims room for a payload of the given length, to be filled (e.g. straight from the network) and then
     * {@link #commit}ted or {@link #abort}ed. The view is a staging buffer of the log, not the mapping: commit
     * writes header and payload to the file in one system call. Appender thread only.
     *
     * @param length payload bytes, at most {@link #maxRecordLength()}.
     * @return a reused view whose position..limit is the payload area, or null if there is no space right now.
     */
    public ByteBuffer claim(final int length)
    {
        checkNoClaim();
        checkNoBatch();
        checkLength(length);
        final long recordPosition = reserve(length);
        if (recordPosition < 0)
        {
            return null;
        }
        claimRecordPosition = recordPosition;
        claimLength = length;
        stagingView.clear();
        stagingView.limit(RECORD_HEADER_LENGTH + length);
        stagingView.position(RECORD_HEADER_LENGTH);
        return stagingView;
    }

    /**
     * Commits the open claim as a DATA record after checking the claimed bytes against the CRC that came with
     * them, so a payload damaged on the way is never accepted. Appender thread only.
     *
     * @param lsn        of the record: the previous record's + 1.
     * @param volume     index of the volume in the group.
     * @param offset     byte offset in the volume.
     * @param flags      initial flags.
     * @param payloadCrc CRC32C of the payload, as sent.
     * @return the record's position, or {@link #CRC_MISMATCH} (the claim is then abandoned).
     */
    public long commit(final long lsn, final int volume, final long offset, final int flags, final int payloadCrc)
    {
        if (claimRecordPosition == NO_CLAIM)
        {
            throw new IllegalStateException("commit without a claim on record log " + path);
        }
        checkLsn(lsn);
        final long recordPosition = claimRecordPosition;
        final int length = claimLength;
        claimRecordPosition = NO_CLAIM;
        if (crc(stagingCrcView, RECORD_HEADER_LENGTH, length) != payloadCrc)
        {
            return CRC_MISMATCH;
        }
        return writeStaged(recordPosition, lsn, volume, offset, flags, payloadCrc, length);
    }

    /**
     * Writes the staged record (payload already in the staging buffer) to the file, after a padding record when
     * it starts a new segment, and publishes it.
     */
    private long writeStaged(final long recordPosition, final long lsn, final int volume, final long offset,
        final int flags, final int payloadCrc, final int length)
    {
        final long tail = tailPosition.get();
        if (recordPosition != tail)
        {
            fillHeader(paddingBuffer, padding, 0, TYPE_PADDING, (int)(recordPosition - tail) - RECORD_HEADER_LENGTH,
                0, 0, 0, 0, 0);
            writeFully(padding, RECORD_HEADER_LENGTH, fileOffset(tail));
        }
        fillHeader(stagingBuffer, stagingCrcView, 0, TYPE_DATA, length, volume, lsn, offset, payloadCrc, flags);
        // One pwrite of header and payload; recovery checks both CRCs, so a torn write is the tail, as before.
        writeFully(staging, RECORD_HEADER_LENGTH + length, fileOffset(recordPosition));
        return advanceTail(tail, recordPosition, lsn, lsn, length);
    }

    /**
     * @return where the body byte of a position lies in the file.
     */
    private long fileOffset(final long position)
    {
        return FILE_HEADER_LENGTH + position % capacity;
    }

    /**
     * Writes {@code buffer}'s first {@code length} bytes at {@code fileOffset}: a positional write, so appender,
     * forcer and flag setters may call it from their own threads, each with its own buffer.
     */
    private void writeFully(final ByteBuffer buffer, final int length, final long fileOffset)
    {
        buffer.clear().limit(length);
        try
        {
            long at = fileOffset;
            while (buffer.hasRemaining())
            {
                at += channel.write(buffer, at);
            }
        }
        catch (final IOException ex)
        {
            throw new UncheckedIOException("cannot write record log " + path + ": " + ex, ex);
        }
    }

    /**
     * Drops the open claim, if any: nothing was published, so nothing else changes. Appender thread only.
     */
    public void abort()
    {
        claimRecordPosition = NO_CLAIM;
    }

    /**
     * Releases every record up to and including the one at the given position: its space is free for appends
     * after the next {@link #force}. One releaser thread at a time.
     *
     * @param recordPosition of a committed DATA record between head and tail (as given by append or a cursor).
     */
    public void release(final long recordPosition)
    {
        final long tail = tailPosition.get();
        final long head = headPosition.get();
        if (recordPosition < head || recordPosition >= tail)
        {
            throw new IllegalArgumentException("position " + recordPosition + " is outside the records [" + head +
                ", " + tail + ") of record log " + path);
        }
        final UnsafeBuffer buffer = segmentBuffers[segmentIndex(recordPosition)];
        final int offsetInSegment = offsetInSegment(recordPosition);
        if (buffer.getInt(offsetInSegment + RECORD_MAGIC_OFFSET) != RECORD_MAGIC ||
            buffer.getInt(offsetInSegment + RECORD_TYPE_OFFSET) != TYPE_DATA)
        {
            throw new IllegalArgumentException("no DATA record at position " + recordPosition + " of " + path);
        }
        final long lsn = buffer.getLong(offsetInSegment + RECORD_LSN_OFFSET);
        final int length = buffer.getInt(offsetInSegment + RECORD_LENGTH_OFFSET);
        writeHead(recordPosition + recordLength(length), lsn + 1);
    }

    /**
     * Sets bits in a committed record's flags, from any thread, one thread per record (e.g. "written to the local
     * volume" by the record's writer). Flags are outside the header CRC precisely so that they can change after
     * the record was committed.
     *
     * @param recordPosition of a committed DATA record.
     * @param flag           bits to set.
     */
    public void markFlag(final long recordPosition, final int flag)
    {
        final int current = flags(recordPosition);
        if ((current & flag) == flag)
        {
            return;
        }
        // A pwrite, not a store into the mapping (see commit). One thread marks a given record (its writer), so
        // the read-modify-write needs no CAS; other records' flags are other bytes.
        final ByteBuffer word = flagWord.get();
        word.putInt(0, current | flag);
        writeFully(word, Integer.BYTES, fileOffset(recordPosition) + RECORD_FLAGS_OFFSET);
    }

    /**
     * Replaces a committed record's payload with other bytes of the same length, and its payload and header CRCs
     * with theirs, durably before it returns: a record whose payload no longer matches its CRC (the disk or memory
     * under the log changed it) is mended with what its volume holds, so that it can be sent again. One pwrite of
     * header and payload, like an append, so a crash leaves either the old record or the new one. Any thread, on a
     * record between head and tail that nobody else writes meanwhile: its flags must not change (see
     * {@link #markFlag}). Allocates: a rare path.
     *
     * @param recordPosition of a committed DATA record between head and tail.
     * @param src            the new payload, its position to its limit: exactly the record's length.
     */
    public void rewritePayload(final long recordPosition, final ByteBuffer src)
    {
        final long head = headPosition.get();
        if (recordPosition < head || recordPosition >= tailPosition.get())
        {
            throw new IllegalArgumentException("position " + recordPosition + " is outside the records of " + path);
        }
        final UnsafeBuffer mapped = segmentBuffers[segmentIndex(recordPosition)];
        final int at = offsetInSegment(recordPosition);
        final int length = mapped.getInt(at + RECORD_LENGTH_OFFSET);
        if (mapped.getInt(at + RECORD_MAGIC_OFFSET) != RECORD_MAGIC ||
            mapped.getInt(at + RECORD_TYPE_OFFSET) != TYPE_DATA || src.remaining() != length)
        {
            throw new IllegalArgumentException("no DATA record of " + src.remaining() + " bytes at position " +
                recordPosition + " of " + path);
        }
        final ByteBuffer record = ByteBuffer.allocateDirect(RECORD_HEADER_LENGTH + length);
        final UnsafeBuffer view = new UnsafeBuffer(record);
        view.putBytes(0, mapped, at, RECORD_HEADER_LENGTH);
        view.putBytes(RECORD_HEADER_LENGTH, src, src.position(), length);
        final CRC32C crc = new CRC32C();
        crc.update(record.duplicate().position(RECORD_HEADER_LENGTH));
        view.putInt(RECORD_PAYLOAD_CRC_OFFSET, (int)crc.getValue());
        crc.reset();
        crc.update(record.duplicate().limit(RECORD_HEADER_CRC_COVERED_LENGTH));
        view.putInt(RECORD_HEADER_CRC_OFFSET, (int)crc.getValue());
        writeFully(record, record.capacity(), fileOffset(recordPosition));
        try
        {
            // Forced here: otherwise the damaged bytes on disk would come back after a crash of this host, and
            // recovery would take the record for the log's torn tail and drop every record after it.
            channel.force(false);
        }
        catch (final IOException ex)
        {
            throw new UncheckedIOException("cannot force record log " + path + ": " + ex, ex);
        }
    }

    /**
     * @return whether the released head is on disk (as of the last force). Call from the thread that forces, or
     * under the lock that serializes forces.
     */
    public boolean isHeadPersisted()
    {
        return headPosition.get() == persistedHeadPosition;
    }

    /**
     * @param recordPosition of a committed DATA record.
     * @return its flags, read with acquire semantics.
     */
    public int flags(final long recordPosition)
    {
        return segmentBuffers[segmentIndex(recordPosition)].getIntVolatile(
            offsetInSegment(recordPosition) + RECORD_FLAGS_OFFSET);
    }

    /**
     * Makes the records appended since the last force durable, then the released head; only then may appends
     * reuse the released space. Costs in proportion to what changed since the last force. May run on another
     * thread than the appender, concurrently with appends (it shares no scratch state with them: a shared CRC
     * object once gave an append a wrong payload CRC); callers serialize forces among themselves.
     */
    public void force()
    {
        force(true);
    }

    /**
     * Makes the records appended since the last force durable, as {@link #force} does, but persists the released
     * head only when it is due: when {@link #HEAD_PERSIST_BYTES} (or a sixteenth of the log) were released since
     * it was last persisted, {@link #HEAD_PERSIST_INTERVAL_NS} passed since, or less than half the log is free for
     * appends. For the force after every batch of a sync partner, the one a FLUSH waits for: the head lives in
     * the file header, a page of its own, and writing it back on every force cost a second write before the
     * device flush (about 40 us of a 450 us pwrite + fdatasync, measured alone on this host's disk). A head
     * persisted late costs nothing but replay after a crash, of records already applied, bounded by those limits.
     */
    public void forceRecords()
    {
        force(headPersistDue());
    }

    private boolean headPersistDue()
    {
        final long released = headPosition.get() - persistedHeadPosition;
        return released >= Math.min(HEAD_PERSIST_BYTES, capacity / 16) ||
            System.nanoTime() - headPersistedNs >= headPersistIntervalNs || freeBytes() < capacity / 2;
    }

    /**
     * Writes the log's dirty pages to the disk and waits for them, as {@link #forceRecords} does, but leaves the
     * flush of the disk's cache to the caller, who makes one next that reaches this file's disk (a FLUSH's
     * fdatasync of a volume on the same disk: see BlockDevices.flushCovers). A FLUSH of an async group then costs
     * one device flush instead of two on the one disk; they ran side by side, but a disk serves its flushes one
     * at a time. That is all a force would have done only where writing the pages changes none of the file's
     * metadata: on ext4 (see overwritesInPlace), over blocks written before (a log is written whole when it is
     * made). So not while records lie over blocks a discard zeroed, or that were unwritten or unallocated at open,
     * until a force has recorded them as written; and not when the released head is due to be persisted, as
     * appends may reuse space only once its slot is durable (the slot's write and the flush would come apart).
     * Callers serialize forces among themselves, and call {@link #flushedThrough} once the disk is flushed.
     *
     * @return the position through which the records are written, for {@link #flushedThrough}; -1 when only a
     *     force will do.
     */
    public long writeOutForDeviceFlush()
    {
        if (!overwritesInPlace)
        {
            return -1;
        }
        final long tail = tailPosition.get();
        if (tail == forcedPosition)
        {
            return tail;
        }
        for (int i = 0; i < unwrittenRangeCount; i++)
        {
            if (unwrittenRanges[2 * i] + capacity < tail)
            {
                return -1;
            }
        }
        if (headPersistDue())
        {
            readHead();
            if (headMoved())
            {
                return -1;
            }
        }
        // The whole file, as fdatasync writes it: flags marked on records forced before (a WRITTEN flag whose
        // record a FLUSH forced while its volume write was under way) must reach the disk with this FLUSH too, or
        // a replay after a power cut could put that older record over a newer write of the same block.
        if (Libc.sync_file_range(fileDescriptor, 0, 0, Libc.SYNC_FILE_RANGE_WAIT_BEFORE |
            Libc.SYNC_FILE_RANGE_WRITE | Libc.SYNC_FILE_RANGE_WAIT_AFTER) != 0)
        {
            return -1;
        }
        return tail;
    }

    /**
     * The disk's cache was flushed after {@link #writeOutForDeviceFlush} returned {@code position}: the records
     * before it are durable. Under the same lock as the forces.
     *
     * @param position what writeOutForDeviceFlush returned.
     */
    public void flushedThrough(final long position)
    {
        if (position > forcedPosition)
        {
            forcedPosition = position;
            giveUpDiscardsBelow(persistedHeadPosition);
        }
    }

    /**
     * Tests: how long {@link #forceRecords} may leave a moved head unpersisted.
     */
    void headPersistInterval(final long intervalNs)
    {
        headPersistIntervalNs = intervalNs;
    }

    /**
     * Persists the released head alone, not the records appended since the last force: the space released so far
     * becomes reusable for one page written and one device flush (an msync of the file header's range), where
     * {@link #force} writes back every record appended since the last force as well. For a log whose records are
     * kept elsewhere until they are released: a source's, whose partner holds every record it acknowledged.
     * Forcing them there wrote each record to this host's disk only to release it a moment later (with 1 MiB
     * writes at queue depth 16, a fourth copy of every write on a disk both test hosts share, made by a full-log
     * fdatasync under the source's append lock). Records appended since the last force stay as durable as they
     * were: the next force writes them, and recovery still ends at the first one that is not on disk. Callers
     * serialize forces among themselves.
     */
    public void persistHead()
    {
        persistHead(false);
    }

    /**
     * Persists the released head as {@link #persistHead} does, but keeps the space released since the head was
     * last persisted from appends until {@link #discardReleased} has discarded it (a {@link #force},
     * {@link #persistHead} or the next call of this gives up what is left of it, which the kernel then writes back
     * as before). Callers serialize forces and discards among themselves.
     */
    public void persistHeadForDiscard()
    {
        persistHead(discardable);
    }

    private void persistHead(final boolean keepForDiscard)
    {
        final long previous = persistedHeadPosition;
        readHead();
        if (headMoved())
        {
            writeSlot(headPositionRead, headLsnRead);
            headerMapped.force();
        }
        // Below the last force the pages are clean, and what an earlier call left is given up: at most one
        // interval's release is ever withheld from appends.
        giveUpDiscardsBelow(keepForDiscard ? Math.max(previous, forcedPosition) : persistedHeadPosition);
    }

    /**
     * Drops the page-cache pages of released records that were never forced, without writing them: a zero range
     * of the file (fallocate), whose blocks stay allocated. A source's records are held by its partner once
     * released, and nothing reads them again (recovery starts at the persisted head), yet the kernel would write
     * every one of them back within 30 s (dirty_expire_centisecs): with a sync partner, a second copy of every
     * client write on the source's disk. Only records behind the persisted head are discarded, in file ranges
     * aligned to {@link #DISCARD_ALIGNMENT}, and only on ext4 (see isExt4). The price: the
     * pages are freed and allocated again by the next lap's appends, and a force of records written over a zeroed
     * range also commits the file system's journal (its blocks turn from unwritten to written). Only what was
     * released before any force wrote it is discarded, so a log forced often (a destination's, an async source's
     * under frequent FLUSHes) discards little or nothing and pays nothing for it. Callers serialize forces and
     * discards among themselves; appends may run alongside.
     *
     * @param maxBytes the most to discard in this call (the file is locked against appends while a range is
     *                 zeroed: about 0.3 us a KiB here).
     * @return bytes of the log this call dealt with (discarded, or too small to discard alone); 0 when nothing
     *     released waits to be discarded.
     */
    public long discardReleased(final long maxBytes)
    {
        final long end = persistedHeadPosition;
        final long start = Math.max(discardedPosition, forcedPosition);
        if (!discardable || start >= end)
        {
            giveUpDiscardsBelow(end);
            return 0;
        }
        final long bodyOffset = start % capacity;
        final long fileStart = FILE_HEADER_LENGTH + bodyOffset;
        final long pieceLength = Math.min(end - start, capacity - bodyOffset);
        final long length = Math.min(pieceLength, Math.max(maxBytes, 2L * DISCARD_ALIGNMENT));
        final long from = (fileStart + DISCARD_ALIGNMENT - 1) & -DISCARD_ALIGNMENT;
        final long to = (fileStart + length) & -DISCARD_ALIGNMENT;
        if (to > from)
        {
            // Kept apart before the call: a zero range that fails may have zeroed part of it.
            addUnwritten(start, start + length);
            try
            {
                Libc.fallocate(fileDescriptor, Libc.FALLOC_FL_ZERO_RANGE | Libc.FALLOC_FL_KEEP_SIZE, from, to - from);
                discardedBytes.addAndGet(to - from);
            }
            catch (final LastErrorException ex)
            {
                // Not supported here after all, or no room for the extent tree to split: keep the pages from now on.
                discardable = false;
                giveUpDiscardsBelow(end);
                return 0;
            }
        }
        // A piece cut short by maxBytes ends where its zeroed range does, so the next call starts aligned; the
        // unaligned edges of a whole piece are left to the kernel.
        final long done = length < pieceLength ? to - fileStart : length;
        discardedPosition = start + done;
        publishReusable();
        return done;
    }

    /**
     * @return bytes {@link #discardReleased} zeroed since the log was opened: released records the disk was spared.
     *     Any thread.
     */
    public long discardedBytes()
    {
        return discardedBytes.get();
    }

    /**
     * @return whether {@link #discardReleased} discards on this log (ext4, and no discard failed). Forcing thread.
     */
    public boolean isDiscardable()
    {
        return discardable;
    }

    /**
     * Leaves what is released below {@code position} to the kernel (nothing there will be discarded) and lets
     * appends reuse it once persisted.
     */
    private void giveUpDiscardsBelow(final long position)
    {
        discardedPosition = Math.max(discardedPosition, position);
        publishReusable();
    }

    /**
     * Appends may reuse released space up to the persisted head, but not where a discard is still due.
     */
    private void publishReusable()
    {
        reusablePosition.lazySet(Math.min(persistedHeadPosition, discardedPosition));
    }

    /**
     * @return System.nanoTime() when the head was last written to the file (by a force or {@link #persistHead}).
     *     Call under the lock that serializes forces.
     */
    public long headPersistedNs()
    {
        return headPersistedNs;
    }

    /**
     * @return the position up to which records are durable: the tail as of the last {@link #force},
     * {@link #forceRecords} or {@link #flushedThrough}, a record's end. Any thread.
     */
    public long forcedPosition()
    {
        return forcedPosition;
    }

    /**
     * Reads the released head's position and LSN as one consistent pair (a seqlock) into headPositionRead and
     * headLsnRead.
     */
    private void readHead()
    {
        long version;
        do
        {
            version = headVersion.get();
            headPositionRead = headPosition.get();
            headLsnRead = headLsn.get();
        }
        while ((version & 1) != 0 || version != headVersion.get());
    }

    /**
     * @return whether the head readHead() last read differs from the one last persisted.
     */
    private boolean headMoved()
    {
        return headPositionRead != persistedHeadPosition || headLsnRead != persistedHeadLsn;
    }

    private void force(final boolean persistHead)
    {
        final long tail = tailPosition.get();

        readHead();
        final boolean writeHead = persistHead && headMoved();
        if (writeHead)
        {
            // The slot only names records already released: it may become durable with the new records, in one
            // fdatasync, rather than after them. Two msyncs cost two device flushes, the larger part of a force.
            writeSlot(headPositionRead, headLsnRead);
        }
        if (writeHead || tail != forcedPosition)
        {
            try
            {
                // Writes back the file's dirty pages, mapped ones included (the new records, the slot, flags),
                // then flushes the device once.
                channel.force(false);
            }
            catch (final IOException ex)
            {
                throw new UncheckedIOException("cannot force record log " + path + ": " + ex, ex);
            }
        }
        forcedPosition = tail;
        forgetUnwrittenForcedOver();
        // Everything before the tail is on disk now: nothing is left to spare it.
        giveUpDiscardsBelow(persistedHeadPosition);
    }

    /**
     * Starts writing the records appended since the last call to the disk, once at least
     * {@link #WRITE_BEHIND_BYTES} are waiting, without waiting for the disk or flushing its cache: durability still
     * comes only from {@link #force}. For a log forced at intervals (an async group's partner forces every
     * flush.interval): its records then stream to the disk as they arrive, and the next force finds little left to
     * write, instead of writing an interval's worth in one burst that every other writer of the disk queues behind.
     * Appender thread only.
     *
     * @return bytes whose write-out was started by this call.
     */
    public long writeBehind()
    {
        return tailPosition.get() - writeBehindPosition < WRITE_BEHIND_BYTES ? 0 : startWriteOut();
    }

    /**
     * Starts writing every record appended since the last call (or {@link #writeBehind}) to the disk, however
     * few, without waiting for the disk or flushing its cache: the next {@link #force} then finds the pages on
     * their way and only waits for them. For a sync partner, called before it acknowledges the records it just
     * logged: the write of their pages overlaps the acknowledgement's trip, which the source's FLUSH would
     * otherwise wait for on top of the force. Appender thread only.
     *
     * @return bytes whose write-out was started by this call.
     */
    public long startWriteOut()
    {
        final long tail = tailPosition.get();
        if (fileDescriptor < 0)
        {
            return 0;
        }
        // Never more than one lap: older positions share their bytes with newer ones.
        long position = Math.max(writeBehindPosition, tail - capacity);
        long started = 0;
        while (position < tail)
        {
            final long bodyOffset = position % capacity;
            final long length = Math.min(tail - position, capacity - bodyOffset);
            if (Libc.sync_file_range(fileDescriptor, FILE_HEADER_LENGTH + bodyOffset, length,
                Libc.SYNC_FILE_RANGE_WRITE) == 0)
            {
                started += length;
            }
            position += length;
        }
        writeBehindPosition = tail;
        writeBehindBytes += started;
        return started;
    }

    /**
     * @return bytes whose write-out {@link #writeBehind} started since the log was opened. Appender thread.
     */
    public long writeBehindBytes()
    {
        return writeBehindBytes;
    }

    /**
     * Discards every record and starts again, empty, at the current tail with the given next LSN; persisted
     * before it returns. Used when the log is abandoned for bitmap tracking. Appender thread only, with no
     * release in progress.
     *
     * @param nextLsn LSN of the next record to append, or {@link #NULL_LSN} to let it choose.
     */
    public void reset(final long nextLsn)
    {
        if (nextLsn < 0)
        {
            throw new IllegalArgumentException("next LSN " + nextLsn + " < 0");
        }
        resetAt(tailPosition.get(), nextLsn);
    }

    /**
     * Reset that may also move the empty log's position forward: tests use it to put records at the far end of a
     * large sparse log without writing the laps before.
     */
    void resetAt(final long tail, final long nextLsn)
    {
        if (tail < tailPosition.get() || (tail & (RecordLogDescriptor.RECORD_ALIGNMENT - 1)) != 0)
        {
            throw new IllegalArgumentException("position " + tail + " is behind the tail or misaligned");
        }
        claimRecordPosition = NO_CLAIM;
        batchRecords = 0;
        forceRange(forcedPosition, tailPosition.get());
        forcedPosition = tail;
        tailPosition.lazySet(tail);
        // Old records behind the new head must never be mistaken for new ones: invalidate the header there.
        final UnsafeBuffer buffer = segmentBuffers[segmentIndex(tail)];
        final int offsetInSegment = offsetInSegment(tail);
        buffer.setMemory(offsetInSegment, RECORD_HEADER_LENGTH, (byte)0);
        segments[segmentIndex(tail)].force(offsetInSegment, RECORD_HEADER_LENGTH);

        epoch++;
        writeHead(tail, nextLsn);
        tailLsn.lazySet(nextLsn - 1);
        this.nextLsn = nextLsn;
        writeSlot(tail, nextLsn);
        headerMapped.force();
        giveUpDiscardsBelow(tail);
    }

    /**
     * Begins a copy of {@code from}'s unreleased records into this new, empty log, for the resize of a running
     * group's log: the copy goes on in steps ({@link #continueCopyFrom}) while {@code from}'s appender goes on (it
     * only adds records after them), and ends with {@link #finishCopyFrom} once it is stopped. Nothing may be
     * released from {@code from} meanwhile, and its flags may still change (a write in flight marks its record
     * WRITTEN): finishCopyFrom takes those again. This log's own thread only.
     *
     * @param from the log being replaced.
     * @return the position in {@code from} to copy from, or -1 when its records need more than half of this log
     *     (nothing was written then).
     */
    public long startCopyFrom(final RecordLog from)
    {
        checkNoClaim();
        if (!isEmpty())
        {
            throw new IllegalStateException("record log " + path + " is not empty: it cannot take another's records");
        }
        if (from.maxRecordLength > maxRecordLength)
        {
            throw new IllegalArgumentException("record log " + from.path + " holds records of up to " +
                from.maxRecordLength + " bytes, " + path + " only " + maxRecordLength);
        }
        if (!fitsHalf(from))
        {
            return -1;
        }
        reset(from.headLsn());
        copyFromHead = from.headPosition();
        copiedRecords = 0;
        unflagged.clear();
        return copyFromHead;
    }

    /**
     * Copies up to {@code maxBytes} more of {@code from}'s records, appends still going on there, and forces them
     * (so that the force at the end has only what follows to write).
     *
     * @param from     the log being replaced.
     * @param resumeAt what startCopyFrom, or the last call of this, returned.
     * @param maxBytes how much to copy at most in this step (at least one record).
     * @return the position in {@code from} after the last record copied, or -1 when this log ran out of room (its
     *     appends outgrew it): it is empty again, for another startCopyFrom.
     */
    public long continueCopyFrom(final RecordLog from, final long resumeAt, final long maxBytes)
    {
        final long tail = from.tailPosition();
        final long end = copyRecords(from, resumeAt, maxBytes >= tail - resumeAt ? tail : resumeAt + maxBytes);
        if (end < 0)
        {
            abandonCopy(from);
            return -1;
        }
        forceRecords();
        return end;
    }

    /**
     * Ends what {@link #startCopyFrom} began, with {@code from}'s appender stopped and no write between its append
     * and its flag: the flags of the records copied so far as they are now, then the records appended since, then
     * a force of this log, records and header. This log's own thread only.
     *
     * @param from     the log being replaced.
     * @param resumeAt what startCopyFrom, or the last {@link #continueCopyFrom}, returned.
     * @return records copied in all, or -1 when they now need more than half of this log (this log is empty again,
     *     for another startCopyFrom).
     */
    public long finishCopyFrom(final RecordLog from, final long resumeAt)
    {
        if (!fitsHalf(from))
        {
            abandonCopy(from);
            return -1;
        }
        if (from.headPosition() != copyFromHead)
        {
            throw new IllegalStateException("records were released from record log " + from.path + " during its " +
                "copy to " + path);
        }
        // Only a record copied before its WRITTEN flag was set can differ now: the others' flags are final (a walk
        // of every record through both mappings instead took writes 200 ms to wait for, at 35,000 records).
        for (int i = 0; i < unflagged.size(); i += 2)
        {
            final int flags = from.flags(unflagged.getLong(i));
            if ((flags(unflagged.getLong(i + 1)) & flags) != flags)
            {
                markFlag(unflagged.getLong(i + 1), flags);
            }
        }
        if (copyRecords(from, resumeAt, from.tailPosition()) < 0)
        {
            throw new IllegalStateException("record log " + path + " ran out of room copying " + from.path +
                ", though it held no more than half of it");
        }
        force();
        unflagged.clear();
        return copiedRecords;
    }

    private void abandonCopy(final RecordLog from)
    {
        reset(from.headLsn());
        unflagged.clear();
    }

    /** Half: the copy must also leave room for the appends that wait for it, and the two logs pad differently. */
    private boolean fitsHalf(final RecordLog from)
    {
        return from.usedBytes() <= capacity / 2;
    }

    /**
     * Copies {@code from}'s records from {@code start} on, each whole, until one ends at or past {@code end}.
     *
     * @return the position after the last record copied, or -1 when this log ran out of room.
     */
    private long copyRecords(final RecordLog from, final long start, final long end)
    {
        final Cursor records = from.newCursor();
        records.position(start);
        while (records.nextPosition() < end && records.next())
        {
            final int length = records.length();
            final long recordPosition = reserve(length);
            if (recordPosition < 0)
            {
                return -1;
            }
            final ByteBuffer payload = records.payload();
            stagingBuffer.putBytes(RECORD_HEADER_LENGTH, payload, payload.position(), length);
            final int flags = records.flags();
            writeStaged(recordPosition, records.lsn(), records.volume(), records.offset(), flags,
                records.payloadCrc(), length);
            copiedRecords++;
            if ((flags & RecordFlags.WRITTEN) == 0)
            {
                unflagged.addLong(records.position());
                unflagged.addLong(recordPosition);
            }
        }
        return records.nextPosition();
    }

    /**
     * Renames the log's file durably (the new name's directory entry forced), replacing whatever file had that
     * name: the last step of a resize, which makes the copy the group's log. When only the directory's force
     * fails, the file is renamed ({@link #path} says so) and it throws all the same.
     *
     * @param target the file's new name.
     */
    public void renameTo(final Path target)
    {
        try
        {
            Files.move(path, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot rename record log " + path + " to " + target +
                ": " + ex, ex);
        }
        // Renamed, whatever follows: the file the name gives after a restart is this log's.
        path = target;
        try
        {
            DurableFiles.forceDirectory(target.toAbsolutePath().getParent());
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + path + " is renamed, but its " +
                "directory could not be forced (a failing disk?): " + ex, ex);
        }
    }

    /**
     * @param file a record log.
     * @return its capacity as its header says, or -1 when it has no readable, undamaged header.
     */
    public static long capacityOf(final Path file)
    {
        final ByteBuffer header = ByteBuffer.allocate(FILE_HEADER_LENGTH).order(java.nio.ByteOrder.nativeOrder());
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ))
        {
            while (header.hasRemaining() && channel.read(header, header.position()) > 0)
            {
                // Read until the header is whole or the file ends.
            }
        }
        catch (final IOException ex)
        {
            return -1;
        }
        if (header.hasRemaining())
        {
            return -1;
        }
        final UnsafeBuffer view = new UnsafeBuffer(header.array());
        final CRC32C crc = new CRC32C();
        crc.update(header.array(), 0, GEOMETRY_LENGTH);
        if (view.getLong(FILE_MAGIC_OFFSET) != FILE_MAGIC || view.getInt(FILE_VERSION_OFFSET) != FILE_VERSION ||
            view.getInt(GEOMETRY_CRC_OFFSET) != (int)crc.getValue())
        {
            return -1;
        }
        return view.getLong(CAPACITY_OFFSET);
    }

    /**
     * @return bytes free for appends right now (space released but not yet forced is not counted).
     */
    public long freeBytes()
    {
        final long reusable = reusablePosition.get();
        return capacity - (tailPosition.get() - reusable);
    }

    /**
     * @return bytes held by unreleased records, padding included.
     */
    public long usedBytes()
    {
        final long head = headPosition.get();
        return tailPosition.get() - head;
    }

    public boolean isEmpty()
    {
        final long head = headPosition.get();
        return tailPosition.get() == head;
    }

    /**
     * @return position of the oldest unreleased record (or of the tail when empty).
     */
    public long headPosition()
    {
        return headPosition.get();
    }

    /**
     * @return LSN of the oldest unreleased record, or of the next record when empty.
     */
    public long headLsn()
    {
        return headLsn.get();
    }

    /**
     * @return position after the newest record: where the next append goes (or its padding).
     */
    public long tailPosition()
    {
        return tailPosition.get();
    }

    /**
     * @return LSN of the newest record, or {@link #headLsn()} - 1 when empty.
     */
    public long tailLsn()
    {
        return tailLsn.get();
    }

    /**
     * @return a new cursor, to be created once and kept by its reader thread; it starts at the head.
     */
    public Cursor newCursor()
    {
        return new Cursor();
    }

    /**
     * Forces, unmaps and closes. Appender thread only, after readers and releaser have stopped.
     */
    @Override
    public void close()
    {
        close(true);
    }

    /**
     * Unmaps and closes without forcing: for a log another one replaced ({@link #finishCopyFrom}), whose file
     * is gone. Forcing it would write back to a deleted file every record it still had in the page cache (up to
     * its whole capacity), while the group's writes wait.
     */
    public void closeReplaced()
    {
        close(false);
    }

    private void close(final boolean force)
    {
        if (closed)
        {
            return;
        }
        closed = true;
        try
        {
            if (force)
            {
                force();
            }
        }
        finally
        {
            unmapAll(headerMapped, segments);
            if (fileDescriptor >= 0)
            {
                try
                {
                    Libc.close(fileDescriptor);
                }
                catch (final LastErrorException ignored)
                {
                    // Used only for sync_file_range and fallocate, never to write: nothing can be lost by failing to
                    // close it.
                }
            }
            try
            {
                channel.close();
            }
            catch (final IOException ex)
            {
                throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot close record log " + path + ": " + ex, ex);
            }
        }
    }

    /**
     * A reader of committed DATA records in position order (padding is skipped). A flyweight: the fields and the
     * payload view describe the current record until the next call of {@link #next()}. Confined to one thread;
     * several cursors may read the same log independently. The cursor's owner must keep it between head and tail
     * (do not release what a cursor has not read yet).
     */
    public final class Cursor
    {
        private final ByteBuffer[] views = new ByteBuffer[segments.length];
        private final CRC32C crc = new CRC32C();
        private long nextPosition;
        private long position = -1;
        private long lsn;
        private long offset;
        private int volume;
        private int length;
        private int payloadCrc;
        private ByteBuffer payload;

        private Cursor()
        {
            for (int i = 0; i < views.length; i++)
            {
                views[i] = segments[i].duplicate();
            }
            nextPosition = headPosition.get();
        }

        /**
         * @param position of a record (or of the head or tail) to read from next.
         * @return this cursor.
         */
        public Cursor position(final long position)
        {
            this.nextPosition = position;
            return this;
        }

        /**
         * Moves to the next committed DATA record.
         *
         * @return true if there is one; false if the cursor has reached the tail.
         */
        public boolean next()
        {
            final long tail = tailPosition.get();
            while (nextPosition < tail)
            {
                final int segment = segmentIndex(nextPosition);
                final int offsetInSegment = offsetInSegment(nextPosition);
                final UnsafeBuffer buffer = segmentBuffers[segment];
                if (buffer.getInt(offsetInSegment + RECORD_TYPE_OFFSET) == TYPE_PADDING)
                {
                    nextPosition += segmentLength - offsetInSegment;
                    continue;
                }
                position = nextPosition;
                length = buffer.getInt(offsetInSegment + RECORD_LENGTH_OFFSET);
                if (buffer.getInt(offsetInSegment + RECORD_MAGIC_OFFSET) != RECORD_MAGIC ||
                    buffer.getInt(offsetInSegment + RECORD_TYPE_OFFSET) != TYPE_DATA || length < 0 ||
                    length > maxRecordLength)
                {
                    // A cursor left behind released space that appends reused: say so, rather than take payload
                    // bytes for a length (once an IllegalArgumentException from the payload view's limit).
                    throw new IllegalStateException("no record at position " + position + " of record log " + path +
                        " (head " + headPosition.get() + ", tail " + tail + "): a cursor read released space");
                }
                volume = buffer.getInt(offsetInSegment + RECORD_VOLUME_OFFSET);
                lsn = buffer.getLong(offsetInSegment + RECORD_LSN_OFFSET);
                offset = buffer.getLong(offsetInSegment + RECORD_OFFSET_OFFSET);
                payloadCrc = buffer.getInt(offsetInSegment + RECORD_PAYLOAD_CRC_OFFSET);
                final ByteBuffer view = views[segment];
                view.clear();
                view.limit(offsetInSegment + RECORD_HEADER_LENGTH + length);
                view.position(offsetInSegment + RECORD_HEADER_LENGTH);
                payload = view;
                nextPosition = position + recordLength(length);
                return true;
            }
            return false;
        }

        /**
         * @return position of the current record: give it to {@link RecordLog#release} or {@link #markFlag}.
         */
        public long position()
        {
            return position;
        }

        /**
         * @return position after the current record, where {@link #next()} continues.
         */
        public long nextPosition()
        {
            return nextPosition;
        }

        public long lsn()
        {
            return lsn;
        }

        public int volume()
        {
            return volume;
        }

        public long offset()
        {
            return offset;
        }

        public int length()
        {
            return length;
        }

        public int payloadCrc()
        {
            return payloadCrc;
        }

        /**
         * @return the current flags, read with acquire semantics (they may change after commit).
         */
        public int flags()
        {
            return RecordLog.this.flags(position);
        }

        /**
         * @return a reused view whose position..limit is the payload; reading it relative moves its position.
         */
        public ByteBuffer payload()
        {
            return payload;
        }

        /**
         * Checks the payload against its CRC again, e.g. just before it is applied to the volume.
         *
         * @return true if the payload matches.
         */
        public boolean verifyPayload()
        {
            final ByteBuffer view = payload;
            final int start = view.position();
            crc.reset();
            crc.update(view);
            view.position(start);
            return (int)crc.getValue() == payloadCrc;
        }
    }

    private long reserve(final int length)
    {
        final long tail = tailPosition.get();
        final int recordLength = recordLength(length);
        final int gap = segmentLength - offsetInSegment(tail);
        final int padding = recordLength > gap ? gap : 0;
        if (tail + padding + recordLength - reusablePosition.get() > capacity)
        {
            return NO_SPACE;
        }
        return tail + padding;
    }

    /**
     * Publishes the records written from the tail through the one at {@code recordPosition}, LSNs
     * {@code firstLsn..lsn}.
     */
    private long advanceTail(final long tail, final long recordPosition, final long firstLsn, final long lsn,
        final int length)
    {
        if (headLsn.get() == NULL_LSN)
        {
            // The first record of a new log fixes the LSN space; nothing can be released before it is published.
            writeHead(headPosition.get(), firstLsn);
        }
        nextLsn = lsn + 1;
        tailLsn.lazySet(lsn);
        final long newTail = recordPosition + recordLength(length);
        tailPosition.lazySet(newTail);
        if ((newTail ^ tail) >= readAheadLength)
        {
            readAhead(newTail + readAheadLength);
        }
        return recordPosition;
    }

    /**
     * Asks the kernel to read the chunk holding {@code position} into the page cache. The first write to a mapped
     * page that is not cached must read it from the disk first, a stall of a disk read (about 70 us here) in the
     * middle of an append; the appender asks one chunk ahead of the tail, so the read happens while it appends.
     */
    private void readAhead(final long position)
    {
        final long chunk = position & -readAheadLength;
        final long offset = chunk % capacity;
        final int segment = (int)(offset >>> segmentShift);
        Libc.madvise(segmentBuffers[segment].addressOffset() + (offset & segmentMask), readAheadLength,
            Libc.MADV_WILLNEED);
    }

    private void fillHeader(
        final UnsafeBuffer buffer,
        final ByteBuffer crcView,
        final int at,
        final int type,
        final int length,
        final int volume,
        final long lsn,
        final long volumeOffset,
        final int payloadCrc,
        final int flags)
    {
        buffer.putInt(at + RECORD_MAGIC_OFFSET, RECORD_MAGIC);
        buffer.putInt(at + RECORD_TYPE_OFFSET, type);
        buffer.putInt(at + RECORD_LENGTH_OFFSET, length);
        buffer.putInt(at + RECORD_VOLUME_OFFSET, volume);
        buffer.putLong(at + RECORD_LSN_OFFSET, lsn);
        buffer.putLong(at + RECORD_OFFSET_OFFSET, volumeOffset);
        buffer.putInt(at + RECORD_EPOCH_OFFSET, epoch);
        buffer.putInt(at + RECORD_PAYLOAD_CRC_OFFSET, payloadCrc);
        buffer.putLong(at + RECORD_RESERVED_OFFSET, 0);
        buffer.putLong(at + RECORD_RESERVED_OFFSET + 8, 0);
        buffer.putInt(at + RECORD_FLAGS_OFFSET, flags);
        buffer.putInt(at + RECORD_HEADER_CRC_OFFSET, crc(crcView, at, RECORD_HEADER_CRC_COVERED_LENGTH));
    }

    private int payloadCrc(final long recordPosition, final int length)
    {
        final int payloadOffset = offsetInSegment(recordPosition) + RECORD_HEADER_LENGTH;
        return crc(appenderViews[segmentIndex(recordPosition)], payloadOffset, length);
    }

    private int slotCrc(final int slot)
    {
        headerView.clear();
        headerView.limit(slot + SLOT_CRC_COVERED_LENGTH);
        headerView.position(slot);
        slotCrc.reset();
        slotCrc.update(headerView);
        return (int)slotCrc.getValue();
    }

    private int crc(final ByteBuffer view, final int index, final int length)
    {
        view.clear();
        view.limit(index + length);
        view.position(index);
        appenderCrc.reset();
        appenderCrc.update(view);
        return (int)appenderCrc.getValue();
    }

    private void writeHead(final long position, final long lsn)
    {
        final long version = headVersion.get();
        headVersion.set(version + 1);
        headLsn.set(lsn);
        headPosition.set(position);
        headVersion.set(version + 2);
    }

    private void writeSlot(final long position, final long lsn)
    {
        generation++;
        final int slot = (generation & 1) == 0 ? SLOT_A_OFFSET : SLOT_B_OFFSET;
        slotBuffer.putLong(SLOT_GENERATION_OFFSET, generation);
        slotBuffer.putLong(SLOT_HEAD_POSITION_OFFSET, position);
        slotBuffer.putLong(SLOT_HEAD_LSN_OFFSET, lsn);
        slotBuffer.putInt(SLOT_EPOCH_OFFSET, epoch);
        slotStaging.clear().limit(SLOT_CRC_COVERED_LENGTH);
        slotCrc.reset();
        slotCrc.update(slotStaging);
        slotBuffer.putInt(SLOT_CRC_OFFSET, (int)slotCrc.getValue());
        writeFully(slotStaging, SLOT_CRC_OFFSET + 4, slot);
        persistedHeadPosition = position;
        persistedHeadLsn = lsn;
        headPersistedNs = System.nanoTime();
    }

    private void forceRange(final long from, final long to)
    {
        long position = from;
        while (position < to)
        {
            final int offsetInSegment = offsetInSegment(position);
            final int length = (int)Math.min(to - position, segmentLength - offsetInSegment);
            segments[segmentIndex(position)].force(offsetInSegment, length);
            position += length;
        }
    }

    private Recovery recover(final RecoveryProgress progress)
    {
        final int slotA = validSlot(SLOT_A_OFFSET);
        final int slotB = validSlot(SLOT_B_OFFSET);
        if (slotA < 0 && slotB < 0)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + path + " has no valid head slot:" +
                " the header is damaged; remove the file to start an empty log (the group then resyncs from its" +
                " bitmap)");
        }
        final int slot = slotB < 0 || (slotA >= 0 &&
            header.getLong(slotA + SLOT_GENERATION_OFFSET) > header.getLong(slotB + SLOT_GENERATION_OFFSET)) ?
            slotA : slotB;
        generation = header.getLong(slot + SLOT_GENERATION_OFFSET);
        final long head = header.getLong(slot + SLOT_HEAD_POSITION_OFFSET);
        final long persistedLsn = header.getLong(slot + SLOT_HEAD_LSN_OFFSET);
        final int persistedEpoch = header.getInt(slot + SLOT_EPOCH_OFFSET);
        if (head < 0 || (head & (RecordLogDescriptor.RECORD_ALIGNMENT - 1)) != 0 || persistedLsn < 0)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + path + " has an invalid head " +
                head + " / LSN " + persistedLsn + ": remove the file to start an empty log (the group then resyncs" +
                " from its bitmap)");
        }

        long scan = head;
        long tail = head;
        long expectedLsn = persistedLsn;
        long firstLsn = NULL_LSN;
        long lastLsn = NULL_LSN;
        long records = 0;
        int minEpoch = Integer.MIN_VALUE;
        // The scan reads every record through the mapping. Left to page faults, the kernel reads a little ahead
        // of each and the disk idles between them: ask for a window of chunks ahead instead, once the scan has
        // passed its first chunk (a log that holds less, an empty one above all, is read no further than that).
        long askedTo = head & -readAheadLength;
        final long readAheadWindow = (long)RECOVERY_READ_AHEAD_CHUNKS * readAheadLength;
        while (scan - head < capacity)
        {
            if (scan - head >= readAheadLength && askedTo - scan < readAheadWindow && askedTo - head < capacity)
            {
                do
                {
                    readAhead(askedTo);
                    askedTo += readAheadLength;
                }
                while (askedTo - scan < readAheadWindow && askedTo - head < capacity);
                progress.onProgress(scan - head, capacity);
            }
            final int segment = segmentIndex(scan);
            final int at = offsetInSegment(scan);
            final UnsafeBuffer buffer = segmentBuffers[segment];
            final int type = buffer.getInt(at + RECORD_TYPE_OFFSET);
            final int length = buffer.getInt(at + RECORD_LENGTH_OFFSET);
            final int recordEpoch = buffer.getInt(at + RECORD_EPOCH_OFFSET);
            if (buffer.getInt(at + RECORD_MAGIC_OFFSET) != RECORD_MAGIC ||
                buffer.getInt(at + RECORD_HEADER_CRC_OFFSET) !=
                crc(appenderViews[segment], at, RECORD_HEADER_CRC_COVERED_LENGTH) ||
                recordEpoch < minEpoch || recordEpoch > persistedEpoch)
            {
                break;
            }
            if (type == TYPE_PADDING)
            {
                if (length != segmentLength - at - RECORD_HEADER_LENGTH)
                {
                    break;
                }
                // Padding is accepted in place, but the tail only moves past a DATA record behind it.
                scan += segmentLength - at;
            }
            else if (type == TYPE_DATA)
            {
                final long lsn = buffer.getLong(at + RECORD_LSN_OFFSET);
                if (length < 0 || length > maxRecordLength || at + recordLength(length) > segmentLength ||
                    (expectedLsn != NULL_LSN && lsn != expectedLsn) || lsn <= NULL_LSN ||
                    buffer.getInt(at + RECORD_PAYLOAD_CRC_OFFSET) != payloadCrc(scan, length))
                {
                    break;
                }
                if (records == 0)
                {
                    firstLsn = lsn;
                }
                records++;
                lastLsn = lsn;
                expectedLsn = lsn + 1;
                scan += recordLength(length);
                tail = scan;
            }
            else
            {
                break;
            }
            minEpoch = recordEpoch;
        }

        final long lsnAtHead = persistedLsn == NULL_LSN ? firstLsn : persistedLsn;
        epoch = persistedEpoch + 1;
        writeHead(head, lsnAtHead);
        tailPosition.set(tail);
        tailLsn.set(records > 0 ? lastLsn : lsnAtHead - 1);
        nextLsn = records > 0 ? lastLsn + 1 : lsnAtHead;
        // Recovered records may only be in the page cache (kill -9): make them durable before we build on them.
        forceRange(head, tail);
        forcedPosition = tail;
        writeSlot(head, lsnAtHead);
        headerMapped.force();
        reusablePosition.set(head);
        return new Recovery(records, records > 0 ? firstLsn : lsnAtHead, records > 0 ? lastLsn : lsnAtHead - 1,
            head, tail);
    }

    private int validSlot(final int slot)
    {
        final int crc = slotCrc(slot);
        return header.getInt(slot + SLOT_CRC_OFFSET) == crc && header.getLong(slot + SLOT_GENERATION_OFFSET) > 0 ?
            slot : -1;
    }

    private void checkNoClaim()
    {
        if (claimRecordPosition != NO_CLAIM)
        {
            throw new IllegalStateException("a claim is open on record log " + path + ": commit or abort it first");
        }
    }

    private void checkNoBatch()
    {
        if (batchRecords != 0)
        {
            throw new IllegalStateException(batchRecords + " records are staged on record log " + path +
                ": write the batch first");
        }
    }

    private void checkLsn(final long lsn)
    {
        if (lsn <= NULL_LSN || (nextLsn != NULL_LSN && lsn != nextLsn))
        {
            throw new IllegalArgumentException("LSN " + lsn + " does not follow " + (nextLsn - 1) +
                " in record log " + path);
        }
    }

    private void checkLength(final int length)
    {
        if (length < 0 || length > maxRecordLength)
        {
            throw new IllegalArgumentException("record length " + length + " is outside 0.." + maxRecordLength +
                " of record log " + path);
        }
    }

    private int segmentIndex(final long position)
    {
        return (int)((position % capacity) >>> segmentShift);
    }

    private int offsetInSegment(final long position)
    {
        return (int)(position % capacity) & segmentMask;
    }

    /**
     * @param what names the log at the head of a refusal ("record log PATH: "), or is empty for a size alone.
     */
    private static void validateGeometry(
        final String what, final long capacity, final int maxRecordLength, final int segmentLength)
    {
        if (segmentLength < FILE_HEADER_LENGTH || Integer.bitCount(segmentLength) != 1 ||
            segmentLength > MAX_SEGMENT_LENGTH)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, what + "segment length " +
                segmentLength + " must be a power of two between 4096 and " + MAX_SEGMENT_LENGTH +
                ": use a log capacity that is a power of two up to 1 GiB or a multiple of 1 GiB");
        }
        if (capacity <= 0 || capacity % segmentLength != 0)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, what + "capacity " + capacity +
                " is not a multiple of the segment length " + segmentLength +
                ": use a log capacity that is a power of two up to 1 GiB or a multiple of 1 GiB");
        }
        if (maxRecordLength <= 0 || (long)recordLength(maxRecordLength) > segmentLength)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, what + "max record length " +
                maxRecordLength + " does not fit a segment of " + segmentLength + " bytes with its header:" +
                " lower the max record length or raise the log capacity");
        }
    }

    private static void validateHeader(
        final Path file,
        final UnsafeBuffer header,
        final long capacity,
        final int maxRecordLength,
        final int segmentLength)
    {
        if (header.getLong(FILE_MAGIC_OFFSET) != FILE_MAGIC)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "file " + file + " is not a record log (bad magic):" +
                " check the configured log path; remove the file only if it is a damaged log");
        }
        if (header.getInt(FILE_VERSION_OFFSET) != FILE_VERSION)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + file + " has version " +
                header.getInt(FILE_VERSION_OFFSET) + ", this daemon reads " + FILE_VERSION +
                ": drain it with the daemon that wrote it, or remove it (the group then resyncs from its bitmap)");
        }
        final CRC32C crc = new CRC32C();
        final ByteBuffer view = header.byteBuffer().duplicate();
        view.limit(GEOMETRY_LENGTH).position(0);
        crc.update(view);
        if (header.getInt(GEOMETRY_CRC_OFFSET) != (int)crc.getValue())
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "record log " + file + " has a damaged header (CRC" +
                " mismatch): remove the file to start an empty log (the group then resyncs from its bitmap)");
        }
        final long fileCapacity = header.getLong(CAPACITY_OFFSET);
        final long fileSegmentLength = header.getLong(SEGMENT_LENGTH_OFFSET);
        final int fileMaxRecordLength = header.getInt(MAX_RECORD_LENGTH_OFFSET);
        if (fileCapacity != capacity || fileSegmentLength != segmentLength || fileMaxRecordLength != maxRecordLength)
        {
            throw new BlockmoverException(ErrorCode.CONFIG_INVALID, "record log " + file + " has capacity " +
                fileCapacity + ", segment length " + fileSegmentLength + ", max record length " +
                fileMaxRecordLength + " but the configuration asks for " + capacity + ", " + segmentLength + ", " +
                maxRecordLength + ": set the configuration back to the file's, or drain the log and remove the file" +
                " to recreate it");
        }
    }

    private static void create(final Path file, final long capacity, final int maxRecordLength,
        final int segmentLength, final boolean preallocate, final AtomicLong written, final BooleanSupplier cancelled)
    {
        final Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try
        {
            final Path parent = file.toAbsolutePath().getParent();
            if (parent != null)
            {
                Files.createDirectories(parent);
            }
            Files.deleteIfExists(tmp);
            if (preallocate)
            {
                checkRoom(file, FILE_HEADER_LENGTH + capacity);
            }
            try (RandomAccessFile raf = new RandomAccessFile(tmp.toFile(), "rw"))
            {
                raf.setLength(FILE_HEADER_LENGTH + capacity);
                if (preallocate)
                {
                    writeZeros(tmp, FILE_HEADER_LENGTH + capacity, written, cancelled);
                }
                final FileChannel channel = raf.getChannel();
                final MappedByteBuffer mapped = channel.map(FileChannel.MapMode.READ_WRITE, 0, FILE_HEADER_LENGTH);
                final UnsafeBuffer header = new UnsafeBuffer(mapped);
                header.putLong(FILE_MAGIC_OFFSET, FILE_MAGIC);
                header.putInt(FILE_VERSION_OFFSET, FILE_VERSION);
                header.putInt(MAX_RECORD_LENGTH_OFFSET, maxRecordLength);
                header.putLong(CAPACITY_OFFSET, capacity);
                header.putLong(SEGMENT_LENGTH_OFFSET, segmentLength);
                final CRC32C crc = new CRC32C();
                final ByteBuffer view = mapped.duplicate();
                view.limit(GEOMETRY_LENGTH).position(0);
                crc.update(view);
                header.putInt(GEOMETRY_CRC_OFFSET, (int)crc.getValue());

                header.putLong(SLOT_A_OFFSET + SLOT_GENERATION_OFFSET, 1);
                header.putLong(SLOT_A_OFFSET + SLOT_HEAD_POSITION_OFFSET, 0);
                header.putLong(SLOT_A_OFFSET + SLOT_HEAD_LSN_OFFSET, NULL_LSN);
                header.putInt(SLOT_A_OFFSET + SLOT_EPOCH_OFFSET, 1);
                crc.reset();
                view.limit(SLOT_A_OFFSET + SLOT_CRC_COVERED_LENGTH).position(SLOT_A_OFFSET);
                crc.update(view);
                header.putInt(SLOT_A_OFFSET + SLOT_CRC_OFFSET, (int)crc.getValue());
                mapped.force();
                IoUtil.unmap(mapped);
                channel.force(true);
            }
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            DurableFiles.forceDirectory(file.toAbsolutePath().getParent());
        }
        catch (final IOException | BlockmoverException ex)
        {
            // Half a log is no log: it would only take room (a cancelled write, a full disk).
            try
            {
                Files.deleteIfExists(tmp);
            }
            catch (final IOException deleteFailed)
            {
                ex.addSuppressed(deleteFailed);
            }
            if (ex instanceof BlockmoverException b)
            {
                throw b;
            }
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot create record log " + file + ": " + ex, ex);
        }
    }

    /**
     * Refuses, before anything is written, a log of this capacity its file system has no room for (as
     * {@link #prepare} would, later). Written until the disk was full, a --log-size typed with a digit too many
     * (500g for 50g) took the file system's last byte, for every other service of the host too, and a minute to
     * fail. Besides the log, min(1 GiB, 5% of the file system) must stay free.
     *
     * @param file     the log file to be.
     * @param capacity bytes of records.
     * @throws BlockmoverException (BAD_REQUEST) saying the largest size that fits.
     */
    public static void checkRoomFor(final Path file, final long capacity)
    {
        try
        {
            checkRoom(file, FILE_HEADER_LENGTH + capacity);
        }
        catch (final IOException ex)
        {
            throw new BlockmoverException(ErrorCode.IO_ERROR, "cannot check the room for record log " + file + ": " +
                ex, ex);
        }
    }

    private static void checkRoom(final Path file, final long length) throws IOException
    {
        // Its directory, or the nearest that exists: a new group's is made only as its log is written.
        Path dir = file.toAbsolutePath().getParent();
        while (dir.getParent() != null && !Files.exists(dir))
        {
            dir = dir.getParent();
        }
        final FileStore store = Files.getFileStore(dir);
        final long usable = store.getUsableSpace();
        final long keep = Math.min(1L << 30, store.getTotalSpace() / 20);
        if (usable - keep < length)
        {
            final long room = usable - keep - FILE_HEADER_LENGTH;
            // The largest capacity that fits and is valid: whole GiB, or a power of two below one.
            final String largest = room >= 1L << 30 ? (room >> 30) + "g" :
                room >= 1L << 20 ? (Long.highestOneBit(room >> 20)) + "m" : null;
            throw new BlockmoverException(ErrorCode.BAD_REQUEST, "record log " + file + " needs " + gib(length) +
                ", and its file system has " + gib(usable) + " free, of which " + gib(keep) + " stays free for " +
                "the rest of the host: " + (largest != null ? "choose --log-size " + largest + " or less, or " :
                "") + "free space in " + dir);
        }
    }

    private static String gib(final long bytes)
    {
        return String.format(Locale.ROOT, "%.1f GiB", bytes / (double)(1L << 30));
    }

    /**
     * Writes every block of a new log file once. A sparse (or fallocated, hence unwritten) body makes every force
     * of the first lap also allocate blocks or convert extents: measured here with fio's mmap engine, a 4 KiB
     * write + msync took 322 us in a sparse file against 272 us in a written one. Written with O_DIRECT, so a large
     * log does not flood the page cache; about a second per GiB on this kind of disk, once, when a group is
     * created. The caller's fsync of the new file makes the zeros durable.
     */
    private static void writeZeros(final Path file, final long length, final AtomicLong written,
        final BooleanSupplier cancelled) throws IOException
    {
        final int chunk = 1 << 20;
        final ByteBuffer zeros = BufferUtil.allocateDirectAligned(chunk, FILE_HEADER_LENGTH);
        try (FileChannel channel = openForZeros(file))
        {
            long at = 0;
            while (at < length)
            {
                if (cancelled.getAsBoolean())
                {
                    throw new BlockmoverException(ErrorCode.CANCELLED, "record log " + file + " not written: " +
                        "cancelled after " + Math.max(0, at - FILE_HEADER_LENGTH) + " of " +
                        (length - FILE_HEADER_LENGTH) + " bytes");
                }
                zeros.clear().limit((int)Math.min(chunk, length - at));
                while (zeros.hasRemaining())
                {
                    at += channel.write(zeros, at);
                }
                written.lazySet(Math.max(0, at - FILE_HEADER_LENGTH));
            }
        }
    }

    private static FileChannel openForZeros(final Path file) throws IOException
    {
        try
        {
            return FileChannel.open(file, StandardOpenOption.WRITE, ExtendedOpenOption.DIRECT);
        }
        catch (final IOException | UnsupportedOperationException ex)
        {
            // Some file systems (tmpfs on older kernels, 9p) refuse O_DIRECT: the page cache will do.
            return FileChannel.open(file, StandardOpenOption.WRITE);
        }
    }

    private static void unmapAll(final MappedByteBuffer headerMapped, final MappedByteBuffer[] segments)
    {
        if (headerMapped != null)
        {
            IoUtil.unmap(headerMapped);
        }
        for (final MappedByteBuffer segment : segments)
        {
            if (segment != null)
            {
                IoUtil.unmap(segment);
            }
        }
    }

    private static void closeQuietly(final FileChannel channel, final Exception cause)
    {
        if (channel != null)
        {
            try
            {
                channel.close();
            }
            catch (final IOException ex)
            {
                cause.addSuppressed(ex);
            }
        }
    }
}
