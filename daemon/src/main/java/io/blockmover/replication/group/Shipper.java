package io.blockmover.replication.group;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.locks.ReentrantLock;

import org.agrona.concurrent.Agent;
import org.agrona.concurrent.AgentTerminationException;
import org.agrona.concurrent.NanoClock;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.ErrorCode;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameDescriptor;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;
import io.blockmover.ratelimit.TokenBucket;
import io.blockmover.replication.log.RecordFlags;
import io.blockmover.replication.log.RecordLog;
import io.blockmover.replication.log.ZeroRecord;
import io.blockmover.transport.ConnectionIdleStrategy;
import io.blockmover.transport.FrameConnection;

/**
 * The source group's network agent for one session: sends the log in LSN order, asks for durability when a FLUSH
 * needs it, and takes the partner's ACK (appended) and DURABLE (forced) replies. Releasing log space only on
 * DURABLE keeps the invariant: whatever the partner may lose in a crash is still in our log.
 */
public final class Shipper implements Agent, ConnectionIdleStrategy.Sleeper
{
    /** A sync group waits for its partner only while the partner's backlog is below this. */
    static final long CURRENT_BACKLOG_BYTES = 32L << 20;
    /** Longest idle wait of the shipper and the receiver of a group: far below any heartbeat interval. */
    public static final long IDLE_WAIT_MS = 20;

    private final SourceGroup group;
    private final FrameConnection connection;
    private final int sessionId;
    private final NanoClock clock;
    private final long heartbeatIntervalNs;
    private final long peerTimeoutNs;
    private final SessionStatus status = new SessionStatus();
    private final RecordLog log;
    private final RecordLog.Cursor sendCursor;
    private final RecordLog.Cursor releaseCursor;
    // Finds a record the partner asked for again, to check our own copy of it.
    private final RecordLog.Cursor checkCursor;
    private final FrameHeader sendHeader = new FrameHeader();
    private final long ackTimeoutNs;
    private long ackProgressNs;
    private long ackedAtProgress;
    private final FrameHeader receiveHeader = new FrameHeader();
    private final ByteBuffer receivePayload =
        ByteBuffer.allocateDirect(FrameDescriptor.MAX_CONTROL_PAYLOAD);
    private boolean receivingPayload;
    // Settings the conductor hands over (group set, verify schedule) for the next send; rare, so allocation is fine.
    private final java.util.concurrent.atomic.AtomicReference<byte[]> pendingSettings =
        new java.util.concurrent.atomic.AtomicReference<>();
    private final ByteBuffer settingsPayload = ByteBuffer.allocateDirect(FrameDescriptor.MAX_CONTROL_PAYLOAD);
    // The send side (these fields, sendCursor, sendHeader and the connection's send half) is driven under
    // sendLock, by this agent or by a writer that sends its own record (ship()).
    private final ReentrantLock sendLock = new ReentrantLock();
    private volatile long sentLsn;
    private volatile long flushSentLsn;
    private volatile Exception inlineSendFailure;
    private long acked;
    private long durable;
    private boolean releasePending;
    private boolean releaseCursorOnRecord;
    private boolean restartPending;
    // The record that began a new sequence this session: sent again after a NACK, it must say so again.
    private long restartLsn = -1;
    private long lastSendNs;
    // PROGRESS: only to a partner that offered to take it (progressToPartner), once a heartbeat interval.
    private boolean progressToPartner;
    private long lastProgressNs;
    // Zero records (ZeroRecord): as they are to a partner that offered to take them; as the zeros they stand for,
    // from zeroSource (allocated at the first), to one that did not.
    private boolean zeroRecordsToPartner;
    private ByteBuffer zeroSource;
    private final java.util.zip.CRC32C zeroCrc = new java.util.zip.CRC32C();
    private long lastReceiveNs;
    private volatile boolean sleeping;
    private TokenBucket rateLimit;
    private AtomicCounter frameErrors;
    private volatile boolean throttled;

    /**
     * @param group            the source group.
     * @param connection       authenticated connection, OPENED received.
     * @param sessionId        session id of every frame.
     * @param partnerLsn       the highest LSN the partner holds: sending starts after it.
     * @param restart          whether the first record starts a new sequence (continuity was lost).
     * @param clock            clock.
     * @param heartbeatIntervalNs idle heartbeat interval.
     * @param peerTimeoutNs    silence that ends the session.
     */
    public Shipper(final SourceGroup group, final FrameConnection connection, final int sessionId,
        final long partnerLsn, final boolean restart, final NanoClock clock, final long heartbeatIntervalNs,
        final long peerTimeoutNs, final long ackTimeoutNs)
    {
        this.ackTimeoutNs = ackTimeoutNs;
        this.group = group;
        this.connection = connection;
        this.sessionId = sessionId;
        this.clock = clock;
        this.heartbeatIntervalNs = heartbeatIntervalNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.log = group.log();
        this.sendCursor = log.newCursor();
        this.releaseCursor = log.newCursor();
        this.checkCursor = log.newCursor();
        this.sentLsn = partnerLsn;
        this.restartPending = restart;
        this.flushSentLsn = partnerLsn;
        this.acked = partnerLsn;
        // What the partner holds, not what the group last heard was durable: a partner that dropped records damaged
        // in its log holds less than it once said (see onStart).
        this.durable = partnerLsn;
        final long now = clock.nanoTime();
        this.lastSendNs = now;
        this.lastReceiveNs = now;
        this.ackProgressNs = now;
    }

    /**
     * @param shipper the shipper to idle.
     * @return its idle strategy: asleep in the connection's selector, woken by writers only when asleep.
     */
    public static org.agrona.concurrent.IdleStrategy idleStrategy(final Shipper shipper)
    {
        // No spins: each is a duty cycle with a failed read system call, and measured at queue depth 1 the shipper
        // spent more CPU in them than in its work, on a two-core host where the CPU is what the write waits for.
        return new ConnectionIdleStrategy(shipper.connection, shipper, 0);
    }

    /**
     * Limits what this shipper sends to the peer's bandwidth limit (async groups: a sync group's writes are not
     * limited, only its resync). Conductor thread, before the shipper starts.
     *
     * @param bucket the peer's bucket.
     */
    public void rateLimit(final TokenBucket bucket)
    {
        rateLimit = bucket;
    }

    /**
     * Counts unreadable frames from the partner in the daemon's counter. Conductor thread, before the shipper starts.
     *
     * @param counter the daemon's frame error counter.
     */
    public void countFrameErrorsIn(final AtomicCounter counter)
    {
        frameErrors = counter;
    }

    /**
     * Has the shipper tell the partner how far ahead of it this source is (a PROGRESS frame, about once a heartbeat
     * interval, busy or idle), for a partner that offered to take it. Conductor thread, before the shipper starts.
     */
    public void sendProgress()
    {
        progressToPartner = true;
        lastProgressNs = clock.nanoTime() - heartbeatIntervalNs; // The first goes out with the first duty cycle.
    }

    /**
     * Has the shipper send zero records as they are, to a partner that offered to take them; to any other it sends
     * the zeros. Conductor thread, before the shipper starts.
     */
    public void sendZeroRecords()
    {
        zeroRecordsToPartner = true;
    }

    public SessionStatus status()
    {
        return status;
    }

    public FrameConnection connection()
    {
        return connection;
    }

    @Override
    public String roleName()
    {
        return "shipper-" + group.config().name;
    }

    @Override
    public void onStart()
    {
        positionSendCursorAfter(sentLsn);
        releaseCursor.position(log.headPosition());
        // Records made durable in an earlier session may still fill the log: release them now, or a resync that
        // waits for log space (and sends nothing that would bring a DURABLE) waits forever. What the partner holds
        // is durable there (it forces its log before answering OPEN), including records whose DURABLE the last
        // session never delivered: release by that, not only by the DURABLE frames seen so far. Only by that: a
        // partner that dropped records damaged in its log holds less than an earlier session's DURABLE said, and the
        // records it dropped must stay here until they are sent again and made durable there once more.
        releasePending = true;
        group.partnerHolds(acked);
        // Sync writes wait for their record's ACK, so the wake-up of this agent to send it was on their path: on
        // a core shared with the client, the record left only when the writer blocked in its own volume write.
        // An async group's writes leave sending to this agent, which the rate limit paces.
        final boolean writersSend =
            connection.sendsFromAnyThread() && rateLimit == null && group.config().mode == GroupMode.SYNC;
        group.linked(writersSend ? this::ship : this::wakeIfSleeping);
    }

    /**
     * Sends what writers published, on the writer's thread, when this agent sleeps and every record sent is
     * acknowledged; otherwise wakes this agent to do it. Whoever holds the send side looks again once it lets go, so
     * a record published while another thread sends is never left behind (the agent's idle strategy checks
     * {@link #hasWork()} too). Any thread.
     */
    private void ship()
    {
        // Only into an idle pipe: while records are in flight the agent batches what writers publish into one
        // write, and the partner takes a batch per wake-up. Sent one by one from each writer, records at queue
        // depth 16 woke the partner's receiver twice as often and cost a third of the IOPS.
        if (!status.isRunning() || group.ackedLsn() < sentLsn || !sleeping)
        {
            wakeIfSleeping();
            return;
        }
        boolean pending;
        do
        {
            if (!sendLock.tryLock())
            {
                return;
            }
            try
            {
                send(clock.nanoTime(), false);
                pending = connection.isSendPending();
            }
            catch (final IOException | RuntimeException ex)
            {
                // The agent ends the session with this at its next duty cycle.
                inlineSendFailure = ex;
                connection.wakeup();
                return;
            }
            finally
            {
                sendLock.unlock();
            }
        }
        while (!pending && hasUnsent(true));
        if (pending)
        {
            wakeIfSleeping(); // The socket is full: the agent waits for room.
        }
    }

    /**
     * @param records whether records count (not while the rate limit holds them back).
     * @return whether anything is waiting to be sent: records, a FLUSH request, settings.
     */
    private boolean hasUnsent(final boolean records)
    {
        return (records && group.publishedLsn() > sentLsn) || group.flushWantedLsn() > flushSentLsn ||
            pendingSettings.get() != null;
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
            final Exception inlineFailure = inlineSendFailure;
            if (inlineFailure != null)
            {
                throw status.failOn(inlineFailure, ErrorCode.PEER_UNREACHABLE);
            }
            final long nowNs = clock.nanoTime();
            int work = receive(nowNs);
            work += release();
            sendLock.lock();
            try
            {
                work += send(nowNs, true);
            }
            finally
            {
                sendLock.unlock();
            }
            group.updateCurrent(CURRENT_BACKLOG_BYTES);
            if (nowNs - lastReceiveNs > peerTimeoutNs)
            {
                throw new IOException("no word from the partner for " + peerTimeoutNs / 1_000_000 + " ms");
            }
            checkAckProgress(nowNs);
            return work;
        }
        catch (final IOException | RuntimeException ex)
        {
            throw status.failOn(ex, ErrorCode.PEER_UNREACHABLE);
        }
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
                    break;
                }
                final String problem = receiveHeader.validate(FrameDescriptor.MAX_CONTROL_PAYLOAD);
                if (problem != null)
                {
                    if (frameErrors != null)
                    {
                        frameErrors.increment();
                    }
                    throw new IOException("bad frame from the partner: " + problem);
                }
                receivePayload.clear().limit(receiveHeader.payloadLength());
                receivingPayload = true;
            }
            if (!connection.receivePayload(receivePayload))
            {
                break;
            }
            receivingPayload = false;
            lastReceiveNs = nowNs;
            work++;
            final FrameType type = receiveHeader.type();
            if (type == FrameType.ACK || type == FrameType.DURABLE || type == FrameType.HEARTBEAT)
            {
                group.partnerApplyFailing((receiveHeader.aux() & GroupReceiver.PARTNER_APPLY_FAILING) != 0);
            }
            switch (type)
            {
                case ACK -> acked = Math.max(acked, receiveHeader.sequence());
                case NACK -> rewind(receiveHeader.sequence());
                case DURABLE ->
                {
                    durable = Math.max(durable, receiveHeader.sequence());
                    acked = Math.max(acked, durable);
                    releasePending = true;
                }
                case HEARTBEAT ->
                {
                    // Proof of life only.
                }
                case VERIFY_RESULT ->
                {
                    final SourceGroup.Verifier verifier = group.verifier();
                    if (verifier != null)
                    {
                        receivePayload.flip();
                        verifier.onResult(receiveHeader, receivePayload);
                    }
                }
                case ERROR ->
                {
                    receivePayload.flip();
                    final byte[] payload = new byte[receivePayload.remaining()];
                    receivePayload.get(payload);
                    final String message = "the partner reported: " + ErrorPayload.message(payload);
                    // BUSY: it ended the session for a moment (a move to a new log) and takes the next OPEN soon.
                    status.fail(ErrorPayload.code(payload) == ErrorCode.BUSY ? ErrorCode.BUSY :
                        ErrorCode.PEER_UNREACHABLE, message, true);
                    throw new IOException(message);
                }
                default -> throw new IOException("unexpected " + receiveHeader.type() + " from the partner");
            }
        }
        if (work > 0)
        {
            group.partnerProgress(acked, durable);
        }
        return work;
    }

    /**
     * The partner got the record with this LSN damaged and drops everything after it until it comes again: send
     * the log again from there, after mending the record if our own copy is the damaged one.
     */
    private void rewind(final long lsn) throws IOException
    {
        if (lsn <= acked || lsn > sentLsn)
        {
            throw new IOException("the partner asked for LSN " + lsn + " again, outside the unacknowledged records " +
                (acked + 1) + " to " + sentLsn);
        }
        if (ownCopyDamaged(lsn))
        {
            // When it cannot be mended yet (its local write is still running), it goes as it is and the partner
            // asks again.
            group.mendDamagedRecord(checkCursor);
        }
        sendLock.lock();
        try
        {
            sentLsn = lsn - 1;
            positionSendCursorAfter(sentLsn);
        }
        finally
        {
            sendLock.unlock();
        }
        group.recordsResent.incrementAndGet();
    }

    /**
     * Puts the send cursor on the first record after the given LSN, now: never on records this agent may release
     * before the cursor has passed them. It once started at the head and let the send loop skip what the partner
     * held; with the socket full, release() let those records go first, a writer short of room reused their space,
     * and the cursor then read a later lap: records out of order, or payload bytes taken for a length. Every record
     * released is at most the partner's durable LSN, never above what was sent, so records behind the cursor are
     * the only ones ever released. The check cursor looks: the send cursor's payload view may still be a frame the
     * socket has not taken whole. Agent thread, under the send lock or while no writer can send (onStart).
     */
    private void positionSendCursorAfter(final long lsn)
    {
        long position = log.headPosition();
        checkCursor.position(position);
        while (checkCursor.next() && checkCursor.lsn() <= lsn)
        {
            position = checkCursor.nextPosition();
        }
        sendCursor.position(position);
    }

    /**
     * @return whether our log's copy of the record with this LSN no longer matches its CRC; checkCursor is then on
     *     it. Scans from the head: a NACK is rare, and the records before it are at most what was in flight.
     */
    private boolean ownCopyDamaged(final long lsn)
    {
        checkCursor.position(log.headPosition());
        while (checkCursor.next())
        {
            if (checkCursor.lsn() == lsn)
            {
                return !checkCursor.verifyPayload();
            }
        }
        return false;
    }

    /**
     * A partner that is alive (heartbeats) yet acknowledges nothing (its log full, its disk stalled) would hold
     * every sync write for as long as it lasts. After ack.timeout it is dropped like a lost one: writes go on,
     * tracked, and it catches up when it reconnects. Sync groups only: an async group's writes never wait for the
     * partner, and over a slow link one large record may take longer than the timeout to arrive, so dropping the
     * partner there would only restart the same transfer again and again.
     */
    private void checkAckProgress(final long nowNs) throws IOException
    {
        if (group.config().mode != GroupMode.SYNC || acked >= sentLsn || acked != ackedAtProgress)
        {
            ackedAtProgress = acked;
            ackProgressNs = nowNs;
        }
        else if (nowNs - ackProgressNs > ackTimeoutNs)
        {
            throw new IOException("the partner acknowledged nothing for " + ackTimeoutNs / 1_000_000_000 +
                " s (LSN " + (acked + 1) + " to " + sentLsn + " wait; ack.timeout): is its log full, or its disk " +
                "failing? Going on without it");
        }
    }

    private int release()
    {
        if (!releasePending)
        {
            return 0;
        }
        releasePending = false;
        int released = 0;
        while (true)
        {
            if (!releaseCursorOnRecord)
            {
                if (!releaseCursor.next())
                {
                    break;
                }
                releaseCursorOnRecord = true;
            }
            if (releaseCursor.lsn() > durable)
            {
                break;
            }
            log.release(releaseCursor.position());
            releaseCursorOnRecord = false;
            released++;
        }
        // Released space becomes reusable once the head is forced; that costs a flush, so it is done off this
        // thread (SourceGroup.reclaimLogSpace), not on every DURABLE: a force here held up the next write's ACK.
        return released;
    }

    /**
     * Sends what is due, under sendLock.
     *
     * @param agent whether on the agent's own thread: only it sends PROGRESS, whose figures (the dirty bitmaps'
     *              cardinality) a client's write must not wait for.
     */
    private int send(final long nowNs, final boolean agent) throws IOException
    {
        int work = 0;
        // Every frame of this duty cycle goes out in one write where the transport can (TCP): at queue depth 16,
        // a write per 4 KiB record cost a system call and a trip through both hosts' network stacks each.
        connection.cork();
        final int flushing = group.clientsFlushing() ? RecordFlags.FLUSHING : 0;
        while (connection.flush())
        {
            final long flushWanted = group.flushWantedLsn();
            if (pendingSettings.get() != null)
            {
                sendSettingsNow(pendingSettings.getAndSet(null));
            }
            else if (flushWanted > flushSentLsn && sentLsn >= flushWanted)
            {
                sendHeader.reset(FrameType.FLUSH).sessionId(sessionId).sequence(flushWanted).seal();
                connection.startSend(sendHeader, null);
                flushSentLsn = flushWanted;
            }
            else if (agent && progressToPartner && nowNs - lastProgressNs >= heartbeatIntervalNs)
            {
                // Ahead of records and the rate limit: while a backlog drains, this is how the partner knows how
                // far it has to go, and what it would lose if this host were gone.
                sendProgressNow();
                lastProgressNs = nowNs;
                work++;
                continue; // Not a heartbeat: the partner learns what is clean from those.
            }
            else if (rateLimited(nowNs))
            {
                break; // Out of tokens: the idle strategy waits (hasWork() says no meanwhile).
            }
            else if (sendCursor.next())
            {
                if (sendCursor.lsn() != sentLsn + 1)
                {
                    // positionSendCursorAfter leaves the cursor on the record after what was sent, and records are
                    // appended in LSN order: anything else is a broken invariant, and sending on would give the
                    // partner a gap or a repeat. It ends the session as a bug, named, rather than be skipped.
                    throw new IllegalStateException("group " + group.config().name + ": the next record in the log " +
                        "is LSN " + sendCursor.lsn() + ", expected " + (sentLsn + 1) + " (at position " +
                        sendCursor.position() + ")");
                }
                int flags = sendCursor.flags() & ~SourceGroup.RECORD_WRITTEN;
                ByteBuffer payload = sendCursor.payload();
                int payloadCrc = sendCursor.payloadCrc();
                if (ZeroRecord.isZeroes(flags) && !zeroRecordsToPartner)
                {
                    payload = zerosFor(sendCursor);
                    payloadCrc = (int)zeroCrc.getValue();
                    flags &= ~RecordFlags.ZEROES;
                }
                if (rateLimit != null)
                {
                    rateLimit.consume(payload.remaining(), nowNs);
                }
                if (restartPending)
                {
                    restartLsn = sendCursor.lsn();
                }
                final int consistency = consistencyAt(sendCursor.lsn());
                sendHeader.reset(FrameType.RECORD)
                    .sessionId(sessionId)
                    .volumeId(sendCursor.volume())
                    .sequence(sendCursor.lsn())
                    .offset(sendCursor.offset())
                    .payloadLength(payload.remaining())
                    .payloadCrc(payloadCrc)
                    .aux(flags | (restartPending || sendCursor.lsn() == restartLsn ? GroupReceiver.RECORD_RESTART : 0) |
                        consistency | flushing)
                    .seal();
                restartPending = false;
                connection.startSend(sendHeader, payload);
                sentLsn = sendCursor.lsn();
            }
            else if (nowNs - lastSendNs > heartbeatIntervalNs)
            {
                // Tells the destination whether its volumes are a consistent prefix through sentLsn.
                final boolean clean = consistencyAt(sentLsn) == GroupReceiver.RECORD_CLEAN;
                sendHeader.reset(FrameType.HEARTBEAT).sessionId(sessionId).sequence(sentLsn)
                    .aux(clean ? GroupReceiver.HEARTBEAT_CLEAN : 0).seal();
                connection.startSend(sendHeader, null);
            }
            else
            {
                break;
            }
            lastSendNs = nowNs;
            work++;
        }
        connection.uncork();
        return work;
    }

    /**
     * The zeros a zero record stands for, as a payload for a partner that does not take zero records, their CRC in
     * {@link #zeroCrc}. Computes the CRC each time: for a partner of an older version only.
     */
    private ByteBuffer zerosFor(final RecordLog.Cursor record)
    {
        if (zeroSource == null)
        {
            zeroSource = ByteBuffer.allocateDirect(log.maxRecordLength());
        }
        final long length = ZeroRecord.decode(record.payload());
        final boolean damaged = length <= 0 || length > zeroSource.capacity();
        // Our copy no longer says a length (damaged in our log): the shortest record the partner takes, under a CRC
        // that cannot match, so that it asks for it again (NACK) and the rewind mends our copy first.
        final int n = (int)(damaged ?
            ZeroRecord.shortestAt(group.config().volumes.get(record.volume()).size, record.offset()) : length);
        final ByteBuffer zeros = zeroSource.duplicate().clear().limit(n);
        zeroCrc.reset();
        zeroCrc.update(zeros.duplicate());
        if (damaged)
        {
            zeroCrc.update(1);
        }
        return zeros;
    }

    /**
     * What this source says of the partner's volumes through {@code lsn}, on a record or a heartbeat: a consistent
     * prefix ({@link GroupReceiver#RECORD_CLEAN}) when nothing is left to resync or to compare (seeded) and
     * {@code lsn} is the last record; not one ({@link GroupReceiver#RECORD_UNCLEAN}) while something is; otherwise
     * nothing. Nothing to resync is checked before the published LSN is read, so a resync record appended meanwhile
     * (its bit already clear) is never counted as sent.
     */
    private int consistencyAt(final long lsn)
    {
        return group.mayDifferBeyondLog() ? GroupReceiver.RECORD_UNCLEAN :
            group.publishedLsn() == lsn ? GroupReceiver.RECORD_CLEAN : 0;
    }

    /**
     * Sends the group's settings to the destination at the next chance. Any thread.
     *
     * @param json the settings, as JSON.
     */
    public void sendSettings(final byte[] json)
    {
        if (json.length > FrameDescriptor.MAX_CONTROL_PAYLOAD)
        {
            throw new IllegalArgumentException("settings of " + json.length + " bytes do not fit a control frame");
        }
        pendingSettings.set(json);
        connection.wakeup();
    }

    private void sendSettingsNow(final byte[] json)
    {
        settingsPayload.clear();
        settingsPayload.put(json).flip();
        sendHeader.reset(FrameType.SETTINGS).sessionId(sessionId).controlPayload(settingsPayload).seal();
        connection.startSend(sendHeader, settingsPayload);
    }

    private void sendProgressNow()
    {
        final long rpoBytes = group.rpoBytes();
        sendHeader.reset(FrameType.PROGRESS).sessionId(sessionId)
            .sequence(group.publishedLsn())
            .offset(rpoBytes)
            .aux(GroupStatus.rpoMillis(group, rpoBytes))
            .volumeId((int)Math.min(Integer.MAX_VALUE, group.dirtyRegions()))
            .seal();
        connection.startSend(sendHeader, null);
    }

    private boolean rateLimited(final long nowNs)
    {
        final boolean limited = rateLimit != null && !rateLimit.isAvailable(nowNs);
        if (limited != throttled)
        {
            throttled = limited;
        }
        return limited;
    }

    /**
     * @return whether anything is waiting to be sent: checked by the idle strategy after it declares itself asleep,
     * so a wake-up cannot be lost between the check and the wait.
     */
    @Override
    public boolean hasWork()
    {
        // A frame the socket has not taken yet blocks everything behind it: the wait for the socket to become
        // writable is the work then. Saying yes here spun the shipper on failing writev and read calls while a
        // large write's records filled the socket (3 ms of CPU per MiB shipped).
        return !connection.isSendPending() && hasUnsent(!throttled);
    }

    /**
     * Writers, flushes, resync and verify wake the shipper, and the partner's frames make its socket readable; it
     * polls only for the rate limit's tokens. An idle group's shipper then wakes only for heartbeats and checks
     * instead of a thousand times a second.
     */
    @Override
    public long maxWaitMs()
    {
        return throttled ? ConnectionIdleStrategy.MAX_WAIT_MS : IDLE_WAIT_MS;
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
    public void onClose()
    {
        status.fail(ErrorCode.CANCELLED, "session closed", true);
        group.unlinked();
    }
}
