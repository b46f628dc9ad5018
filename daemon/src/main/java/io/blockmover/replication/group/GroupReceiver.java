package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.replication.verify.VerifyRecord;
import io.blockmover.transport.ConnectionIdleStrategy;
import io.blockmover.transport.FrameConnection;

/**
 * The destination group's network agent for one session: receives records straight into the log (the payload's
 * CRC32C is checked before the record counts), acknowledges what it appended, and has its {@link LogForcer} force
 * the log when a FLUSH asks for it or enough has accumulated (a sync group's: after every batch, while its source's
 * clients flush), then answers DURABLE: one force for every FLUSH waiting (group commit). It goes on receiving
 * while the forcer forces.
 */
public final class GroupReceiver implements Agent, ConnectionIdleStrategy.Sleeper
{
    /** Record flag: the source lost continuity and starts a new LSN sequence with this record. */
    public static final int RECORD_RESTART = io.blockmover.replication.log.RecordFlags.RESTART;
    /** Record flag: the source had regions left to resync when it sent this record (the prefix is inconsistent). */
    public static final int RECORD_UNCLEAN = io.blockmover.replication.log.RecordFlags.UNCLEAN;
    /** Record flag: the source had nothing to resync and this was its last record (see RecordFlags.CLEAN). */
    public static final int RECORD_CLEAN = io.blockmover.replication.log.RecordFlags.CLEAN;
    /** Heartbeat aux flag: the source had nothing to resync and had sent everything through the sequence. */
    public static final int HEARTBEAT_CLEAN = 1;
    /**
     * In the aux field of every ACK, DURABLE and HEARTBEAT the destination sends: its applier is failing (a full or
     * failing disk), so the source shows it long before the log fills.
     */
    public static final int PARTNER_APPLY_FAILING = 2;
    /**
     * A record that arrives damaged is asked for again this many times in one session (NACK); if it is still
     * damaged, the session ends. A payload damaged in the source's own log would never arrive whole. Each NACK
     * costs what was in flight behind the record; a reconnect costs that too, and degrades a sync group meanwhile.
     */
    static final int MAX_NACKS_PER_RECORD = 8;
    private static final int DISCARD_BUFFER_BYTES = 64 * 1024;
    /**
     * A batch up to this size is forced on this thread when the {@link LogForcer} is idle and records are not
     * streaming in: at queue depth 1 the hand-over costs two wake-ups (10-30 us each here) on the path a FLUSH
     * waits for, and nothing arrives meanwhile that a short force could hold up. Larger batches (1 MiB writes) go to
     * the forcer, and so does every batch while records keep arriving during forces (see {@link #streaming}), so
     * they keep being acknowledged.
     */
    static final long INLINE_FORCE_BYTES = 128 * 1024;

    private final DestinationGroup group;
    private final FrameConnection connection;
    private final int sessionId;
    private final NanoClock clock;
    private final long heartbeatIntervalNs;
    private final long peerTimeoutNs;
    private final long forceBytes;
    private final long forceIntervalNs;
    private final boolean eagerForce;
    // The source marks the records its clients' FLUSHes may soon wait for (RecordFlags.FLUSHING); one that says so in
    // its OPEN marks every such record, and a sync partner then forces after every batch only while they come.
    private boolean followsFlushHints;
    // Written on the receiver's thread, and only when it changes: the conductor reads it for status.
    private volatile boolean clientsFlushing = true;
    private final SessionStatus status = new SessionStatus();
    private final RecordLog log;
    private final LogForcer forcer;
    private final FrameHeader receiveHeader = new FrameHeader();
    private final FrameHeader sendHeader = new FrameHeader();
    private final ByteBuffer errorPayload = ByteBuffer.allocateDirect(1024);
    private final ByteBuffer settingsPayload =
        ByteBuffer.allocateDirect(io.blockmover.protocol.FrameDescriptor.MAX_CONTROL_PAYLOAD);
    private final java.util.concurrent.atomic.AtomicReference<java.util.Map<String, Object>> settings =
        new java.util.concurrent.atomic.AtomicReference<>();
    private boolean haveHeader;
    private ByteBuffer claim;
    private long appendedLsn;
    // After a NACK: the LSN asked for again, until it arrives (0: none). Records sent before the source rewound,
    // the ones after the damaged record, are read and dropped meanwhile.
    private boolean askForResends;
    private long nackedLsn;
    private int nacksOfRecord;
    private boolean nackPending;
    private int discardRemaining = -1;
    private ByteBuffer discardBuffer;
    private long ackedLsn;
    private long durableLsn;
    // The highest LSN the forcer was asked to make durable.
    private long requestedLsn;
    /**
     * Records arrived while the last force ran: a force on this thread would hold up their ACKs (at 4k QD16 an
     * inline force of 0.4-0.5 ms each put the partner's ACK at 1.2 ms p50 against a 0.4 ms local write), so
     * forces go to the forcer until one ends with nothing new.
     */
    private boolean streaming;
    private boolean inlineForceJustEnded;
    private long flushWanted;
    private long unforcedBytes;
    private long firstUnforcedNs;
    private long lastSendNs;
    private long lastReceiveNs;
    private volatile long recordsReceived;
    private volatile boolean sleeping;
    private final AtomicCounter crcErrors;
    private final java.util.zip.CRC32C zeroCrc = new java.util.zip.CRC32C();
    private final AtomicCounter frameErrors;

    /**
     * @param crcErrors   the daemon's count of payloads that arrived damaged.
     * @param frameErrors the daemon's count of frames that arrived unreadable.
     * @param forcer      forces the log for this receiver, made with the log's tail LSN; started by the caller.
     */
    public GroupReceiver(final DestinationGroup group, final FrameConnection connection, final int sessionId,
        final NanoClock clock, final long heartbeatIntervalNs, final long peerTimeoutNs, final long forceBytes,
        final long forceIntervalNs, final AtomicCounter crcErrors, final AtomicCounter frameErrors,
        final LogForcer forcer)
    {
        this.forcer = forcer;
        forcer.onForced(this::wakeIfSleeping);
        this.crcErrors = crcErrors;
        this.frameErrors = frameErrors;
        this.group = group;
        this.connection = connection;
        this.sessionId = sessionId;
        this.clock = clock;
        this.heartbeatIntervalNs = heartbeatIntervalNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.forceIntervalNs = forceIntervalNs;
        this.eagerForce = group.config().mode == GroupMode.SYNC;
        this.log = group.log();
        // The source gives back its log's space only once this side says its records are durable: a force at least
        // every quarter of the log (both sides' logs have one size), or a fast stream fills it between two forces.
        this.forceBytes = DestinationGroup.forceBytesFor(forceBytes, log);
        this.appendedLsn = log.tailLsn();
        this.ackedLsn = appendedLsn;
        this.durableLsn = appendedLsn;
        this.requestedLsn = appendedLsn;
        final long now = clock.nanoTime();
        this.lastSendNs = now;
        this.lastReceiveNs = now;
    }

    /**
     * The source understands NACK (it offered "resend" in its OPEN): a damaged record is asked for again instead of
     * ending the session. Conductor thread, before the receiver starts.
     */
    public void askForResends()
    {
        askForResends = true;
    }

    /**
     * The source marks the records its clients' FLUSHes may soon wait for (it offered "flush_hints" in its OPEN): a
     * sync partner forces after every batch only while such records come, and otherwise when asked, at
     * flush.interval, or every quarter of its log. Without a FLUSH to wait for it, a force after every batch is a
     * device flush for nothing, and on a disk shared with the source volume (or with this side's own volume) each
     * one holds up the writes queued behind it. Conductor thread, before the receiver starts.
     */
    public void followFlushHints()
    {
        followsFlushHints = true;
    }

    /**
     * Any thread (status reads it): as of the last record received.
     *
     * @return whether this partner forces its log after every batch it acknowledges (a sync group's, while its
     *     source's clients flush); otherwise it forces when a FLUSH asks, at flush.interval, or every quarter of
     *     its log.
     */
    public boolean forcesEveryBatch()
    {
        return eagerForce && (clientsFlushing || !followsFlushHints);
    }

    public SessionStatus status()
    {
        return status;
    }

    public FrameConnection connection()
    {
        return connection;
    }

    public long recordsReceived()
    {
        return recordsReceived;
    }

    @Override
    public String roleName()
    {
        return "receiver-" + group.config().name;
    }

    @Override
    public void onStart()
    {
        group.verifier().onResultQueued(this::wakeIfSleeping);
    }

    /**
     * The source's frames make the socket readable and the applier wakes this agent for verify results, so an
     * idle receiver waits long; it polls only while a record waits for log space the applier is freeing. Asked by
     * the idle strategy on this agent's own thread, so it reads the receive state directly.
     */
    @Override
    public long maxWaitMs()
    {
        return isWaitingForLog() ? ConnectionIdleStrategy.MAX_WAIT_MS : Shipper.IDLE_WAIT_MS;
    }

    @Override
    public boolean hasWork()
    {
        return group.verifier().hasResult() || forcer.forcedLsn() > durableLsn;
    }

    @Override
    public void sleeping(final boolean asleep)
    {
        sleeping = asleep;
    }

    private void wakeIfSleeping()
    {
        if (sleeping)
        {
            connection.wakeup();
        }
    }

    @Override
    public int doWork()
    {
        if (!status.isRunning())
        {
            throw new AgentTerminationException();
        }
        try
        {
            final long nowNs = clock.nanoTime();
            final long appendedBefore = appendedLsn;
            int work = receive(nowNs);
            if (inlineForceJustEnded)
            {
                // The first receive after an inline force takes what the socket held during it.
                inlineForceJustEnded = false;
                streaming = appendedLsn != appendedBefore;
            }
            work += reply(nowNs);
            if (nowNs - lastReceiveNs > peerTimeoutNs && !isWaitingForLog())
            {
                throw new IOException("no word from the source for " + peerTimeoutNs / 1_000_000 + " ms");
            }
            return work;
        }
        catch (final IOException | RuntimeException ex)
        {
            throw status.failOn(ex, ErrorCode.PEER_UNREACHABLE);
        }
    }

    private boolean isWaitingForLog()
    {
        return haveHeader && claim == null;
    }

    private int receive(final long nowNs) throws IOException
    {
        int work = 0;
        while (work < 256)
        {
            if (!haveHeader)
            {
                if (!connection.receiveHeader(receiveHeader))
                {
                    break;
                }
                final String problem = receiveHeader.validate(log.maxRecordLength());
                if (problem != null)
                {
                    frameErrors.increment();
                    group.badFrames.incrementAndGet();
                    throw refuse("bad frame: " + problem);
                }
                if (receiveHeader.sessionId() != sessionId)
                {
                    throw refuse("frame of session " + receiveHeader.sessionId() + " on session " + sessionId);
                }
                if (receiveHeader.type() == FrameType.SETTINGS)
                {
                    if (receiveHeader.payloadLength() > settingsPayload.capacity())
                    {
                        throw refuse("SETTINGS of " + receiveHeader.payloadLength() + " bytes");
                    }
                    settingsPayload.clear().limit(receiveHeader.payloadLength());
                }
                haveHeader = true;
                lastReceiveNs = nowNs;
            }
            switch (receiveHeader.type())
            {
                case RECORD ->
                {
                    if (!receiveRecord())
                    {
                        return work;
                    }
                }
                case FLUSH -> flushWanted = Math.max(flushWanted, receiveHeader.sequence());
                case HEARTBEAT -> sourceState(receiveHeader.sequence(), (receiveHeader.aux() & HEARTBEAT_CLEAN) != 0);
                case PROGRESS -> group.sourceReport().update(receiveHeader.sequence(), receiveHeader.offset(),
                    receiveHeader.aux(), receiveHeader.volumeId(), System.currentTimeMillis());
                case CLOSE -> status.complete();
                case SETTINGS ->
                {
                    if (!receiveSettings())
                    {
                        return work;
                    }
                }
                default -> throw refuse("unexpected " + receiveHeader.type());
            }
            if (receiveHeader.type() != FrameType.RECORD && receiveHeader.type() != FrameType.SETTINGS &&
                receiveHeader.payloadLength() != 0)
            {
                throw refuse(receiveHeader.type() + " with a payload");
            }
            haveHeader = false;
            lastReceiveNs = nowNs;
            work++;
        }
        return work;
    }

    /**
     * The source's group settings changed: kept for the conductor, which saves them with the group.
     *
     * @return whether the frame is complete.
     */
    @SuppressWarnings("unchecked")
    private boolean receiveSettings() throws IOException
    {
        if (!connection.receivePayload(settingsPayload))
        {
            return false;
        }
        settingsPayload.flip();
        if (!receiveHeader.payloadMatches(settingsPayload))
        {
            crcErrors.increment();
            group.damagedRecords.incrementAndGet();
            throw refuse("SETTINGS payload CRC mismatch");
        }
        final byte[] json = new byte[settingsPayload.remaining()];
        settingsPayload.get(json);
        settings.set((java.util.Map<String, Object>)(java.util.Map<?, ?>)
            com.fasterxml.jackson.jr.ob.JSON.std.mapFrom(json));
        return true;
    }

    /**
     * @return settings the source sent since the last call, or null. Conductor thread.
     */
    public java.util.Map<String, Object> takeSettings()
    {
        return settings.getAndSet(null);
    }

    /**
     * @return whether the record is complete (false: wait for log space or bytes).
     */
    private boolean receiveRecord() throws IOException
    {
        if (claim == null && discardRemaining < 0 && nackedLsn != 0)
        {
            if (receiveHeader.sequence() == nackedLsn)
            {
                nackedLsn = 0; // The record asked for again: take it as usual.
            }
            else
            {
                // Sent before the source rewound: it comes again after the record asked for.
                discardRemaining = receiveHeader.payloadLength();
            }
        }
        if (discardRemaining >= 0)
        {
            return discardPayload();
        }
        if (claim == null)
        {
            final long lsn = receiveHeader.sequence();
            if (lsn != appendedLsn + 1)
            {
                if ((receiveHeader.aux() & RECORD_RESTART) == 0)
                {
                    throw refuse("record LSN " + lsn + " after " + appendedLsn + ": a record is missing");
                }
                // Start over once the forcer is done with the old sequence and the applier has applied and
                // released everything of it.
                if (!forcer.isIdle())
                {
                    return false;
                }
                group.forceLog();
                if (!log.isEmpty())
                {
                    return false;
                }
                log.reset(lsn);
                appendedLsn = lsn - 1;
                ackedLsn = appendedLsn;
                durableLsn = appendedLsn;
                requestedLsn = appendedLsn;
                forcer.restart(appendedLsn);
            }
            final int vol = receiveHeader.volumeId();
            final long offset = receiveHeader.offset();
            final int length = receiveHeader.payloadLength();
            // A zero record's range is in its payload, checked once that has arrived (checkZeroRecord).
            final boolean valid = ZeroRecord.isZeroes((int)receiveHeader.aux()) ?
                length == ZeroRecord.PAYLOAD_LENGTH && withinVolumes(vol, offset, 1, false) :
                withinVolumes(vol, offset, length, (receiveHeader.aux() & VerifyRecord.RECORD_VERIFY) == 0);
            if (!valid)
            {
                throw refuse("record LSN " + lsn + " for volume " + vol + " at " + offset + "+" + length +
                    " is outside the group's volumes");
            }
            claim = log.claim(length);
            if (claim == null)
            {
                // Space the applier released becomes reusable only once the log's head is forced.
                group.forceLog();
                claim = log.claim(length);
                if (claim == null)
                {
                    final String applyFailure = group.failure();
                    if (applyFailure != null)
                    {
                        // Neither applied nor logged: holding the session would hold the source's sync writes,
                        // which wait for an ACK that cannot come. Ending it lets the source go on without us
                        // (degraded, its regions tracked) and tells it why; it reconnects and catches up later.
                        throw refuse(ErrorCode.IO_ERROR, "destination " + group.config().name + " cannot take more:" +
                            " its log is full and its applier is failing (" + applyFailure + ")");
                    }
                    return false;
                }
            }
        }
        if (!connection.receivePayload(claim))
        {
            return false;
        }
        if (ZeroRecord.isZeroes((int)receiveHeader.aux()))
        {
            checkZeroRecord(claim);
        }
        claim = null;
        if ((receiveHeader.aux() & (RECORD_UNCLEAN | RECORD_CLEAN)) != 0)
        {
            sourceState(receiveHeader.sequence(), (receiveHeader.aux() & RECORD_UNCLEAN) == 0);
        }
        final long position = log.commit(receiveHeader.sequence(), receiveHeader.volumeId(), receiveHeader.offset(),
            (int)receiveHeader.aux() & ~RecordFlags.WIRE_ONLY, receiveHeader.payloadCrc());
        if (position < 0)
        {
            crcErrors.increment();
            group.damagedRecords.incrementAndGet();
            if (askForResends && nacksOfRecord < MAX_NACKS_PER_RECORD)
            {
                // Ask for it again and keep the session: the source rewinds to it, sync writes wait one more
                // round trip instead of the group going degraded while it reconnects.
                nacksOfRecord++;
                nackedLsn = receiveHeader.sequence();
                nackPending = true;
                return true;
            }
            // A link that damages one long record on every send (a resync region of chunk.length) ends up here
            // too: the count and length say which of the two it was.
            throw refuse("record LSN " + receiveHeader.sequence() + " (" + receiveHeader.payloadLength() +
                " bytes) arrived damaged (CRC32C mismatch)" + (askForResends ? " " + (nacksOfRecord + 1) +
                " times in a row" : "") + "; it will be sent again after reconnecting");
        }
        appendedLsn = receiveHeader.sequence();
        nacksOfRecord = 0;
        final boolean flushing = (receiveHeader.aux() & RecordFlags.FLUSHING) != 0;
        if (flushing != clientsFlushing)
        {
            clientsFlushing = flushing;
        }
        if (unforcedBytes == 0)
        {
            firstUnforcedNs = clock.nanoTime();
        }
        unforcedBytes += receiveHeader.payloadLength();
        recordsReceived++;
        if (!forcesEveryBatch())
        {
            // Forced only every flush.interval: stream the records to the disk meanwhile, or each force writes an
            // interval's worth at once and the apply writes (and, on a shared disk, everyone's) queue behind it.
            // A partner that forces after every batch has nothing to gain.
            log.writeBehind();
        }
        return true;
    }

    /**
     * @param wholeBlocks whether the range must also end on a 4 KiB boundary or at the volume's end (bytes written
     *                    to the volume; a VERIFY record's digests are not).
     * @return whether {@code length} bytes at {@code offset} of volume {@code vol} lie inside it, 4 KiB aligned at
     *     their start.
     */
    private boolean withinVolumes(final int vol, final long offset, final long length, final boolean wholeBlocks)
    {
        return vol >= 0 && vol < group.volumeCount() && offset >= 0 && length > 0 &&
            offset + length <= group.volumeSize(vol) && offset % 4096 == 0 &&
            (!wholeBlocks || length % 4096 == 0 || offset + length == group.volumeSize(vol));
    }

    /**
     * A zero record's range must lie inside its volume, as a record of data must, and be no longer than a record
     * of data may be (what a partner that does not take zero records would have been sent). One that is not,
     * arriving undamaged, ends the session; a damaged one goes on to the CRC check, which asks for it again.
     */
    private void checkZeroRecord(final ByteBuffer received) throws IOException
    {
        final int end = received.limit();
        received.position(end - ZeroRecord.PAYLOAD_LENGTH);
        final long length = ZeroRecord.decode(received);
        final int vol = receiveHeader.volumeId();
        final long offset = receiveHeader.offset();
        if (length <= log.maxRecordLength() && withinVolumes(vol, offset, length, true))
        {
            received.position(end);
            return;
        }
        zeroCrc.reset();
        zeroCrc.update(received);
        received.position(end);
        if ((int)zeroCrc.getValue() == receiveHeader.payloadCrc())
        {
            throw refuse("record LSN " + receiveHeader.sequence() + " for volume " + vol + ": zeros at " + offset +
                "+" + length + " are outside the group's volumes");
        }
    }

    /**
     * Reads and drops the rest of the current record's payload.
     *
     * @return whether all of it is read.
     */
    private boolean discardPayload() throws IOException
    {
        if (discardBuffer == null)
        {
            discardBuffer = ByteBuffer.allocateDirect(DISCARD_BUFFER_BYTES); // Only once a record was damaged.
        }
        while (discardRemaining > 0)
        {
            discardBuffer.clear().limit(Math.min(DISCARD_BUFFER_BYTES, discardRemaining));
            final boolean full = connection.receivePayload(discardBuffer);
            discardRemaining -= discardBuffer.position();
            if (!full)
            {
                return false;
            }
        }
        discardRemaining = -1;
        return true;
    }

    private int reply(final long nowNs) throws IOException
    {
        if (!connection.flush())
        {
            return 0;
        }
        if (nackPending)
        {
            nackPending = false;
            send(FrameType.NACK, nackedLsn, nowNs);
            return 1;
        }
        final boolean everyBatch = forcesEveryBatch();
        if (appendedLsn > ackedLsn)
        {
            if (everyBatch)
            {
                // A sync partner forces right after this ACK: its records' pages start for the disk first, so that
                // their write overlaps the ACK's send (on a loopback or veth link, the send runs the receiving
                // side's network stack too) instead of following it.
                log.startWriteOut();
            }
            ackedLsn = appendedLsn;
            send(FrameType.ACK, ackedLsn, nowNs);
            if (!everyBatch || !connection.flush())
            {
                return 1;
            }
        }
        final long forced = forcer.forcedLsn();
        if (forced > durableLsn)
        {
            streaming = appendedLsn > forced;
            durableLsn = forced;
            send(FrameType.DURABLE, durableLsn, nowNs);
            return 1;
        }
        // A sync group's partner forces after every batch it acknowledged while its source's clients flush, without
        // being asked: the force runs while the ACK travels and the source writes its own volume, so the two hosts'
        // flushes overlap instead of one waiting for the other, and the source's FLUSH rarely needs a round trip
        // (SourceGroup.flush). Under load the records that arrive during one force share the next (group commit).
        final boolean forceNow = everyBatch || (flushWanted > requestedLsn && appendedLsn >= flushWanted) ||
            unforcedBytes >= forceBytes || (unforcedBytes > 0 && nowNs - firstUnforcedNs >= forceIntervalNs);
        if (forceNow && appendedLsn > requestedLsn)
        {
            final long batchBytes = unforcedBytes;
            requestedLsn = appendedLsn;
            unforcedBytes = 0;
            if (batchBytes <= INLINE_FORCE_BYTES && forcer.isIdle() && !streaming)
            {
                forceAndAnswer(nowNs);
            }
            else
            {
                forcer.request(requestedLsn);
            }
            return 1;
        }
        if (group.verifier().sendNext(connection, sendHeader, sessionId))
        {
            lastSendNs = nowNs;
            return 1;
        }
        if (nowNs - lastSendNs > heartbeatIntervalNs)
        {
            send(FrameType.HEARTBEAT, 0, nowNs);
            return 1;
        }
        return 0;
    }

    /**
     * What the source says of its state at {@code lsn}. Volumes not yet durably consistent become so only once the
     * applier has applied the clean point, and it applies only what the log made durable: the point is forced now,
     * not at the next flush.interval, so that a failover from here is safe as soon as it can be (an initial sync or a
     * resync has just ended). Once per such end: the applier then marks the volumes durably consistent.
     */
    private void sourceState(final long lsn, final boolean clean)
    {
        group.sourceState(lsn, clean);
        if (clean && group.durableCleanLsn() == DurableConsistency.INCONSISTENT)
        {
            flushWanted = Math.max(flushWanted, group.cleanLsn());
        }
    }

    private void forceAndAnswer(final long nowNs) throws IOException
    {
        final long startNs = clock.nanoTime();
        group.forceRecords();
        group.logForceNs.recordValue(Math.min(clock.nanoTime() - startNs, DestinationGroup.HIGHEST_LATENCY_NS));
        durableLsn = requestedLsn;
        send(FrameType.DURABLE, durableLsn, nowNs);
        inlineForceJustEnded = true;
    }

    private void send(final FrameType type, final long sequence, final long nowNs) throws IOException
    {
        sendHeader.reset(type).sessionId(sessionId).sequence(sequence)
            .aux(group.failure() != null ? PARTNER_APPLY_FAILING : 0).seal();
        connection.startSend(sendHeader, null);
        connection.flush();
        lastSendNs = nowNs;
    }

    private IOException refuse(final String message)
    {
        return refuse(ErrorCode.PROTOCOL_ERROR, message);
    }

    private IOException refuse(final ErrorCode code, final String message)
    {
        status.fail(code, message, true);
        return sendError(code, message);
    }

    /**
     * Tells the source why the session ends, best effort: from this receiver's thread, or from another once the
     * receiver has stopped (the conductor, ending a session for a move to a new log, says BUSY: reconnect soon).
     *
     * @return the exception to end the session with.
     */
    public IOException sendError(final ErrorCode code, final String message)
    {
        try
        {
            if (connection.flush())
            {
                // The project's ERROR payload (code name, newline, message), as ControlChannel sends it.
                final byte[] payload = ErrorPayload.encode(code, message);
                final int n = Math.min(payload.length, errorPayload.capacity());
                errorPayload.clear();
                errorPayload.put(payload, 0, n).flip();
                sendHeader.reset(FrameType.ERROR).sessionId(sessionId).controlPayload(errorPayload).seal();
                connection.startSend(sendHeader, errorPayload);
                connection.flush();
            }
        }
        catch (final IOException ex)
        {
            // Best effort: the connection closes either way.
            return new IOException(message, ex);
        }
        return new IOException(message);
    }

    @Override
    public void onClose()
    {
        if (claim != null)
        {
            // A session that dies halfway through a record's payload must give the claim back: the log outlives
            // the session, and the next session's first claim would otherwise fail for ever.
            claim = null;
            log.abort();
        }
        status.fail(ErrorCode.CANCELLED, "session closed", true);
        group.verifier().onResultQueued(() -> { });
    }
}
