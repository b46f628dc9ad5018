package io.blockmover.conductor;

import java.io.IOException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import org.agrona.CloseHelper;
import org.agrona.concurrent.AgentRunner;
import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.io.Volume;
import io.blockmover.pipeline.Reader;
import io.blockmover.pipeline.Sender;
import io.blockmover.pipeline.SessionStatus;
import io.blockmover.pipeline.SourceSession;
import io.blockmover.replication.DirtyBitmap;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.transport.FrameConnection;

/**
 * A copy of one source volume to a volume on a peer: its definition, its persisted progress (the dirty bitmap),
 * and the state machine that connects, authenticates, opens the destination, runs a session, and on a lost link
 * waits and resumes from the bitmap. Conductor thread only.
 */
final class CopyJob
{
    private static final long FIRST_RETRY_NS = 500_000_000L;

    final long id;
    final Path source;
    final String peer;
    final String target;
    final boolean verify;
    final boolean seeded;
    final long createdMs;

    long size;
    int chunkLength;
    JobState state = JobState.CONNECTING;
    String phase = "connecting";
    ErrorCode errorCode;
    String errorMessage;
    String lastError;
    long startedMs;
    long finishedMs;
    int attempts;
    boolean seedDone;
    boolean verified;
    long regionsDifferent;
    long verifyMismatches;
    /** Bytes of zeros sent as their length, by the sessions that ended (see {@link #zeroBytes}). */
    long zeroBytesOfEndedSessions;
    String transport;
    String transportReason;

    Volume volume;
    DirtyBitmap bitmap;
    ControlServer.Client pendingClient;
    Object pendingRequestId;

    private final Conductor conductor;
    private final PeerDialer dialer;
    private FrameConnection connection;
    private long retryAtNs;
    private long backoffNs = FIRST_RETRY_NS;
    private long bytesCopiedAtSessionStart;
    private SourceSession session;
    private AgentRunner readerRunner;
    private AgentRunner senderRunner;
    private int slotBase = -1;
    private AtomicCounter bytesRemaining;
    private AtomicCounter bytesCopied;

    CopyJob(final Conductor conductor, final long id, final Path source, final String peer, final String target,
        final boolean verify, final boolean seeded, final long createdMs)
    {
        this.conductor = conductor;
        this.id = id;
        this.source = source;
        this.peer = peer;
        this.target = target;
        this.dialer = new PeerDialer(conductor, peer);
        this.verify = verify;
        this.seeded = seeded;
        this.createdMs = createdMs;
    }

    /**
     * @return whether the job has been accepted by the peer and persisted (a new job is not, until OPENED).
     */
    /**
     * @return whether the job is connecting or authenticating right now (its socket is polled, not selected).
     */
    boolean isHandshaking()
    {
        return dialer.isActive();
    }

    boolean isPersisted()
    {
        return pendingClient == null;
    }

    /**
     * Turns the job's state machine once.
     *
     * @param nowNs conductor time.
     * @return work done.
     */
    int doWork(final long nowNs)
    {
        switch (state)
        {
            case CONNECTING, WAITING ->
            {
                if (!dialer.isActive())
                {
                    if (nowNs < retryAtNs)
                    {
                        return 0;
                    }
                    startConnect(nowNs);
                    return 1;
                }
                return handshake(nowNs);
            }
            case RUNNING ->
            {
                return checkSession();
            }
            default ->
            {
                return 0;
            }
        }
    }

    private void startConnect(final long nowNs)
    {
        attempts++;
        phase = "connecting";
        try
        {
            if (volume == null)
            {
                openResources();
            }
            final Map<String, Object> open = new LinkedHashMap<>();
            open.put("job", id);
            open.put("target", target);
            open.put("size", size);
            open.put("chunk_length", chunkLength);
            open.put("source", source.toString());
            dialer.start(open, nowNs);
            transportReason = dialer.transportReason();
        }
        catch (final IOException | RdmaException ex)
        {
            connectionFailed("cannot connect to " + peer + " at " + conductor.peerConfig(peer).address() + ": " +
                ex.getMessage(), nowNs);
        }
        catch (final BlockmoverException ex)
        {
            fail(ex.code(), ex.getMessage());
        }
    }

    /**
     * Reopens the volume and bitmap of a job loaded from disk.
     */
    private void openResources()
    {
        volume = Volume.open(source, false);
        if (volume.size() != size)
        {
            throw new BlockmoverException(ErrorCode.INVALID_STATE, "source " + source + " is now " + volume.size() +
                " bytes, was " + size + " when the job started: start a new copy");
        }
        openBitmap();
    }

    /**
     * Opens the persisted bitmap of a job loaded from disk, so its progress shows before it reconnects.
     */
    void openBitmap()
    {
        if (bitmap == null)
        {
            bitmap = DirtyBitmap.open(conductor.jobStore().bitmapPath(id), chunkCount(), chunkLength);
        }
    }

    long chunkCount()
    {
        return (size + chunkLength - 1) / chunkLength;
    }

    private int handshake(final long nowNs)
    {
        try
        {
            final int work = dialer.doWork(nowNs);
            phase = dialer.phase();
            if (dialer.isOpened())
            {
                onOpened(dialer.opened());
            }
            return work;
        }
        catch (final PeerRefusal ex)
        {
            closeConnection();
            if (isPersisted())
            {
                // The admin may fix the key or the destination: keep trying, say why.
                connectionFailed(ex.getMessage(), nowNs);
            }
            else
            {
                fail(ex.code(), ex.getMessage());
            }
        }
        catch (final IOException ex)
        {
            connectionFailed(peer + " at " + conductor.peerConfig(peer).address() + ": " + ex.getMessage(), nowNs);
        }
        return 1;
    }

    private void onOpened(final Map<String, Object> opened) throws IOException
    {
        final int credits = ((Number)opened.get("credits")).intValue();
        final int flushChunks = ((Number)opened.get("flush_chunks")).intValue();
        if (!isPersisted())
        {
            bitmap = DirtyBitmap.createAllDirty(conductor.jobStore().bitmapPath(id), chunkCount(), chunkLength);
            startedMs = System.currentTimeMillis();
        }
        slotBase = conductor.slab().lease(conductor.ctx().sessionSlots());
        if (slotBase < 0)
        {
            throw new PeerRefusal(ErrorCode.BUSY, "no free slots for another session (slab.slots " +
                conductor.ctx().slabSlots() + "): wait for a job to finish or raise slab.slots");
        }
        if (bytesRemaining == null)
        {
            bytesRemaining = conductor.cnc().newCounter("job " + id + " bytes remaining", Conductor.JOB_COUNTER_TYPE);
            bytesCopied = conductor.cnc().newCounter("job " + id + " bytes copied", Conductor.JOB_COUNTER_TYPE);
        }
        final int sessionId = dialer.sessionId();
        connection = dialer.takeConnection();
        transport = connection.transportName();
        session = new SourceSession(
            sessionId, volume, bitmap.bits(), chunkLength, conductor.slab(), slotBase, conductor.ctx().sessionSlots(),
            connection, credits, flushChunks, seeded && !seedDone, verify, conductor.ctx().verifyRounds(),
            conductor.ctx().digestBatch(), conductor.ctx().heartbeatIntervalNs(), conductor.ctx().peerTimeoutNs(),
            conductor.cnc(), bytesRemaining, bytesCopied);
        session.rateLimit(conductor.peerRates().bucket(peer));
        if (Boolean.TRUE.equals(opened.get("zero_chunks")))
        {
            session.sendZeroChunks();
        }
        readerRunner = conductor.newDataRunner(new Reader(session), null);
        senderRunner = conductor.newDataRunner(new Sender(session, conductor.clock()), session.connection());
        AgentRunner.startOnThread(readerRunner);
        AgentRunner.startOnThread(senderRunner);
        state = JobState.RUNNING;
        // The backoff is reset only by progress (see checkSession): a session that fails at once, on a peer whose
        // disk is full say, must not be retried twice a second.
        bytesCopiedAtSessionStart = bytesCopied.get();
        lastError = null;
        phase = phaseName(session.phase());
        conductor.log("job " + id + " running: " + source + " -> " + peer + ":" + target + " over " + transport);
        if (!isPersisted())
        {
            final ControlServer.Client client = pendingClient;
            pendingClient = null;
            save();
            client.reply(pendingRequestId, conductor.describe(this));
        }
        else
        {
            save();
        }
    }

    private int checkSession()
    {
        final String newPhase = phaseName(session.phase());
        if (!newPhase.equals(phase))
        {
            if ("seeding".equals(phase))
            {
                seedDone = true;
                regionsDifferent = session.regionsDifferent();
                save();
            }
            phase = newPhase;
        }
        final SessionStatus status = session.status();
        if (status.isRunning())
        {
            return 0;
        }
        verified = session.verified();
        verifyMismatches = session.verifyMismatches();
        if (seeded && !seedDone && session.phase() != SourceSession.PHASE_SEED)
        {
            seedDone = true;
            regionsDifferent = session.regionsDifferent();
        }
        closeSession();
        if (status.state() == SessionStatus.COMPLETED)
        {
            state = JobState.COMPLETED;
            phase = "done";
            finishedMs = System.currentTimeMillis();
            conductor.jobEnded(this, true);
            conductor.log("job " + id + " completed" + (verify ? (verified ? ", verified" : ", NOT verified") : ""));
            releaseResources();
            save();
        }
        else if (status.isRetryable())
        {
            if (bytesCopied.get() > bytesCopiedAtSessionStart)
            {
                backoffNs = FIRST_RETRY_NS;
            }
            connectionFailed(status.message(), conductor.clock().nanoTime());
        }
        else
        {
            fail(status.code(), status.message());
        }
        return 1;
    }

    static String phaseName(final int phase)
    {
        return switch (phase)
        {
            case SourceSession.PHASE_SEED -> "seeding";
            case SourceSession.PHASE_COPY -> "copying";
            case SourceSession.PHASE_VERIFY -> "verifying";
            case SourceSession.PHASE_FINISH -> "finishing";
            default -> "unknown";
        };
    }

    private void connectionFailed(final String message, final long nowNs)
    {
        closeConnection();
        if (!isPersisted())
        {
            fail(ErrorCode.PEER_UNREACHABLE, message + " (is blockmoverd running on " + peer + ", and does peer." +
                peer + ".address point at its listener?)");
            return;
        }
        lastError = message;
        state = JobState.WAITING;
        phase = "waiting";
        retryAtNs = nowNs + backoffNs;
        backoffNs = Math.min(backoffNs * 2, conductor.ctx().reconnectMaxIntervalNs());
        conductor.log("job " + id + " waiting to resume: " + message);
    }

    /**
     * Ends the job for good, with an error the operator sees in 'blockmover jobs'.
     */
    void fail(final ErrorCode code, final String message)
    {
        closeSession();
        closeConnection();
        errorCode = code;
        errorMessage = message;
        if (!isPersisted())
        {
            releaseResources();
            final ControlServer.Client client = pendingClient;
            pendingClient = null;
            state = JobState.FAILED;
            conductor.discard(this);
            client.error(pendingRequestId, code, message);
            return;
        }
        state = JobState.FAILED;
        phase = "failed";
        finishedMs = System.currentTimeMillis();
        conductor.jobEnded(this, false);
        conductor.log("job " + id + " failed: " + code + " " + message);
        releaseResources();
        save();
    }

    /**
     * Stops the job at the operator's request; what was copied stays copied.
     */
    void cancel()
    {
        closeSession();
        closeConnection();
        state = JobState.CANCELLED;
        phase = "cancelled";
        finishedMs = System.currentTimeMillis();
        releaseResources();
        save();
    }

    /**
     * Stops the session and closes files at daemon shutdown, keeping the persisted state so the job resumes.
     */
    void suspendForShutdown()
    {
        closeSession();
        closeConnection();
        releaseResources();
    }

    private void closeSession()
    {
        if (session != null)
        {
            session.status().fail(ErrorCode.CANCELLED, "session closed", true);
            CloseHelper.closeAll(readerRunner, senderRunner);
            zeroBytesOfEndedSessions += session.zeroBytesSent(); // Its sender has stopped.
            conductor.slab().release(slotBase, conductor.ctx().sessionSlots());
            slotBase = -1;
            session = null;
            readerRunner = null;
            senderRunner = null;
        }
    }

    private void closeConnection()
    {
        dialer.close();
        CloseHelper.quietClose(connection);
        connection = null;
    }

    private void releaseResources()
    {
        if (bitmap != null)
        {
            bitmap.close();
            bitmap = null;
        }
        if (volume != null)
        {
            volume.close();
            volume = null;
        }
        CloseHelper.closeAll(bytesRemaining, bytesCopied);
        bytesRemaining = null;
        bytesCopied = null;
    }

    /**
     * @return regions compared so far in a seeding or verify pass.
     */
    long regionsChecked()
    {
        return session != null ? session.regionsChecked() : 0;
    }

    /**
     * @return bytes of chunks of zeros sent as a header alone over every session of the job, the running one
     *     included: of a thin or sparse source, most of it.
     */
    long zeroBytes()
    {
        final SourceSession s = session;
        return zeroBytesOfEndedSessions + (s != null ? s.zeroBytesSent() : 0);
    }

    void forceBitmap()
    {
        if (bitmap != null)
        {
            bitmap.force();
        }
    }

    /**
     * @return bytes not yet durable on the destination.
     */
    long bytesRemaining()
    {
        if (state == JobState.COMPLETED)
        {
            return 0;
        }
        if (bytesRemaining != null && session != null)
        {
            return bytesRemaining.get();
        }
        if (bitmap != null)
        {
            return DirtyBitmap.dirtyBytes(bitmap.bits(), chunkLength, size);
        }
        return size;
    }

    void save()
    {
        conductor.jobStore().save(id, record());
    }

    Map<String, Object> record()
    {
        final Map<String, Object> r = new LinkedHashMap<>();
        r.put("id", id);
        r.put("source", source.toString());
        r.put("peer", peer);
        r.put("target", target);
        r.put("size", size);
        r.put("chunk_length", chunkLength);
        r.put("verify", verify);
        r.put("seeded", seeded);
        r.put("state", state.name());
        r.put("created_ms", createdMs);
        r.put("started_ms", startedMs);
        r.put("finished_ms", finishedMs);
        r.put("seed_done", seedDone);
        r.put("verified", verified);
        r.put("regions_different", regionsDifferent);
        r.put("verify_mismatches", verifyMismatches);
        r.put("zero_bytes", zeroBytes());
        if (errorCode != null)
        {
            r.put("error_code", errorCode.name());
            r.put("error_message", errorMessage);
        }
        return r;
    }

    static CopyJob fromRecord(final Conductor conductor, final Map<String, Object> r)
    {
        final CopyJob job = new CopyJob(conductor, num(r, "id"), Path.of((String)r.get("source")),
            (String)r.get("peer"), (String)r.get("target"), Boolean.TRUE.equals(r.get("verify")),
            Boolean.TRUE.equals(r.get("seeded")), num(r, "created_ms"));
        job.size = num(r, "size");
        job.chunkLength = (int)num(r, "chunk_length");
        job.state = JobState.valueOf((String)r.get("state"));
        job.startedMs = num(r, "started_ms");
        job.finishedMs = num(r, "finished_ms");
        job.seedDone = Boolean.TRUE.equals(r.get("seed_done"));
        job.verified = Boolean.TRUE.equals(r.get("verified"));
        job.regionsDifferent = num(r, "regions_different");
        job.verifyMismatches = num(r, "verify_mismatches");
        job.zeroBytesOfEndedSessions = num(r, "zero_bytes"); // 0 in a record of an older version.
        if (r.get("error_code") != null)
        {
            job.errorCode = ErrorCode.parse((String)r.get("error_code"));
            job.errorMessage = (String)r.get("error_message");
        }
        job.phase = job.state.isTerminal() ? job.state.name().toLowerCase(java.util.Locale.ROOT) : "connecting";
        if (!job.state.isTerminal())
        {
            job.state = JobState.CONNECTING;
        }
        return job;
    }

    private static long num(final Map<String, Object> r, final String key)
    {
        final Object v = r.get(key);
        return v == null ? 0 : ((Number)v).longValue();
    }
}
