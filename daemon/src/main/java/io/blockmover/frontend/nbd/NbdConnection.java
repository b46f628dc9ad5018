package io.blockmover.frontend.nbd;

import java.io.EOFException;
import java.io.IOException;
import java.net.ProtocolException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

import org.agrona.BufferUtil;
import org.agrona.concurrent.ManyToOneConcurrentArrayQueue;

import io.blockmover.buffer.Slab;
import io.blockmover.io.LinuxAio;

import static io.blockmover.frontend.nbd.NbdProtocol.CMD_BLOCK_STATUS;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_DISC;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLAG_FUA;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_FLUSH;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_READ;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_TRIM;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE;
import static io.blockmover.frontend.nbd.NbdProtocol.CMD_WRITE_ZEROES;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_EINVAL;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_ENOSPC;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_EIO;
import static io.blockmover.frontend.nbd.NbdProtocol.NBD_EPERM;

/**
 * One client connection: its reader thread runs the handshake, then reads requests in bulk (as many as the socket
 * holds per read), parses them into a fixed set of {@link NbdRequest} slots (WRITE payloads larger than the inbound
 * buffer are read straight into the slot's aligned buffer) and queues them to the connection's worker threads, which
 * execute them concurrently and queue their replies. Whoever finds the reply lock free writes every queued reply in
 * one gathering write and sends the slots home; a thread that finds it taken leaves its reply to the holder and
 * goes on, so no thread ever waits for another's socket write. Replies may therefore leave out of order,
 * which NBD allows: the client matches them by cookie. A request that arrives alone, with the socket drained and no
 * worker busy, is executed by the reader itself: at queue depth 1 the hand-over would cost more than the I/O.
 * <pre>
 *   reader --free ring--&lt; slot &lt;--+
 *     | parse, read payload        | reply, release
 *     +--work ring--&gt; worker 0..n-1 +
 * </pre>
 * With every slot busy the reader stops reading, so the socket's buffer and the client's queue depth carry the
 * back-pressure. Slots are as many as workers, each with a buffer of maxPayload bytes, allocated when
 * transmission starts and freed when the connection ends.
 * <p>
 * Where the export offers an O_DIRECT descriptor ({@link NbdExport#directFd()}), READs and WRITEs skip the workers:
 * the reader queues them as Linux AIO operations and submits them together before it would next wait (for the
 * socket or for a free slot), and the connection's reaper thread collects their completions, many per system call,
 * and queues their replies. On a virtual machine every submission that reaches the disk rings its doorbell, a trap
 * to the hypervisor, and every worker blocked in its own pwrite is a wake-up: batched, one of each serves a whole
 * socket read's worth of requests. FLUSH, TRIM and WRITE_ZEROES still go to the workers; NBD orders nothing
 * between requests in flight, and a FLUSH covers only writes already answered, which the reaper answers only once
 * the kernel says they are done.
 * <p>
 * A worker's WRITE may be deferred by the export ({@link NbdExport#writeDeferrable}): a sync group's write then
 * waits for the partner's ACK in the group, not on the worker, which takes its next request. The thread that
 * completes it queues its reply and wakes the connection's replier, which writes the queued replies as above. One
 * wake-up per ACK instead of a parked worker per write, woken each.
 * <p>
 * Nothing on the request path allocates: header fields are read with absolute gets from a direct buffer, the
 * rings wait on monitors, and replies are gathering writes of preallocated buffers. A client that stalls in the
 * handshake, in the middle of a payload, or stops reading replies is closed by the server's watchdog when
 * {@link #deadlineExpired(long)} says so; any fault ends this connection only.
 */
final class NbdConnection implements Runnable
{
    /** Longest option data accepted in the handshake; a longer option ends the connection. */
    static final int MAX_OPTION_LENGTH = 16 * 1024;
    /**
     * A WRITE longer than the maximum payload is read and discarded up to this length, so the stream stays in
     * step and the client gets EINVAL; beyond it the connection is closed after the reply, as reading gigabytes
     * to skip them would hand a broken client a free denial of service.
     */
    static final long MAX_DISCARD_LENGTH = 32L * 1024 * 1024;
    /**
     * Room for several requests with small payloads per read. A payload up to this size is read through it too;
     * larger ones go straight into their slot.
     */
    static final int INBOUND_CAPACITY = 64 * 1024;
    /** The most extents one BLOCK_STATUS reply describes; a client asks again from where it ends. */
    static final int MAX_EXTENTS = 4096;
    /** How long the reaper waits in one io_getevents: only a bound, as completions end the wait. */
    static final long REAP_TIMEOUT_NS = 1_000_000_000L;

    private static final int TRANSMISSION_FLAGS_WRITABLE = NbdProtocol.FLAG_HAS_FLAGS | NbdProtocol.FLAG_SEND_FLUSH |
        NbdProtocol.FLAG_SEND_FUA | NbdProtocol.FLAG_SEND_TRIM | NbdProtocol.FLAG_SEND_WRITE_ZEROES |
        NbdProtocol.FLAG_CAN_MULTI_CONN;
    private static final int TRANSMISSION_FLAGS_READ_ONLY = NbdProtocol.FLAG_HAS_FLAGS |
        NbdProtocol.FLAG_READ_ONLY | NbdProtocol.FLAG_SEND_FLUSH | NbdProtocol.FLAG_CAN_MULTI_CONN;

    private final NbdServer server;
    private final SocketChannel channel;
    private final String name;
    private final Thread reader;
    /**
     * Held by whoever writes replies to the socket. Never waited for: a thread that finds it taken leaves its reply
     * in {@link #replies} for the holder, which writes every queued reply before it lets go (see drainReplies).
     */
    private final ReentrantLock replyLock = new ReentrantLock();
    /**
     * What the reader has received and not yet parsed, in read mode. One read takes as many requests as the
     * client has queued (with their small payloads), instead of two system calls per request.
     */
    private final ByteBuffer inbound = ByteBuffer.allocateDirect(INBOUND_CAPACITY).flip();
    /** Requests handed to workers and not yet back in the free ring. */
    private final AtomicInteger queued = new AtomicInteger();
    /** True when the last read left the socket drained: it returned less than there was room for. */
    private boolean drained;

    private volatile boolean closed;
    private volatile long readDeadlineNs = Long.MAX_VALUE;
    private volatile long writeDeadlineNs = Long.MAX_VALUE;

    private NbdExport export;
    private boolean noZeroes;
    /** NBD_OPT_STRUCTURED_REPLY was agreed: READ and BLOCK_STATUS replies are structured reply chunks. */
    private boolean structuredReplies;
    /** The export that NBD_OPT_SET_META_CONTEXT selected base:allocation for, or null. */
    private String allocationSelectedFor;
    /** BLOCK_STATUS is served: base:allocation was selected for the export this connection serves. */
    private boolean allocationContext;
    // Set by whichever of the reader, the reaper and the workers fails first.
    private final AtomicBoolean ioErrorLogged = new AtomicBoolean();
    private ByteBuffer memory;
    private Thread[] workers;
    private Thread replier;
    /** Requests whose replies are ready, for whoever holds {@link #replyLock} to write and send home. */
    private ManyToOneConcurrentArrayQueue<NbdRequest> replies;
    // The reply lock holder's: the requests it writes replies for at once, and their header and READ data buffers.
    private NbdRequest[] replyBatch;
    private ByteBuffer[] replyBuffers;
    /** Deferred writes not yet answered; the replier ends once the workers have and this is zero. */
    private final AtomicInteger deferred = new AtomicInteger();
    private volatile boolean workersDone;
    private volatile RequestRing free;
    private RequestRing work;
    /** Every slot by its number: the reaper finds a completed operation's request here. */
    private NbdRequest[] slots;
    /** Linux AIO for the export's direct descriptor, or null when requests go to the workers only. */
    private LinuxAio aio;
    private int directFd = -1;
    // A slot's export hooks whose writes this reader has begun and not yet submitted (beforeSubmit). Reader only.
    private DirectIo begunWrites;
    private Thread reaper;
    /** AIO operations queued by the reader and not yet reaped; the reaper sleeps while there are none. */
    private final AtomicInteger aioOutstanding = new AtomicInteger();
    /** The reader queues no more AIO operations: the reaper ends once the last one is reaped. */
    private volatile boolean readerDone;
    /** Told of operations the kernel refused at submission; a field, so that submitting allocates nothing. */
    private final LinuxAio.Refused aioRefused = this::aioRefused;

    NbdConnection(final NbdServer server, final long id, final SocketChannel channel, final String peer)
    {
        this.server = server;
        this.channel = channel;
        this.name = "nbd-conn-" + id;
        this.reader = new Thread(this, name + "-reader");
        reader.setDaemon(true);
        server.logger().log(System.Logger.Level.DEBUG, "{0}: accepted from {1}", name, peer);
    }

    void start()
    {
        readDeadlineNs = System.nanoTime() + server.ioTimeoutNs();
        reader.start();
    }

    /**
     * Closes the socket, which ends the reader's and workers' blocking calls; the reader then releases the rest.
     * Any thread.
     */
    void close()
    {
        closed = true;
        try
        {
            channel.close();
        }
        catch (final IOException ex)
        {
            server.logger().log(System.Logger.Level.DEBUG, "{0}: close failed: {1}", name, ex);
        }
        final RequestRing freeRing = free;
        if (freeRing != null)
        {
            freeRing.close();
        }
    }

    /**
     * Waits for the reader, which waits for the workers.
     *
     * @param timeoutMs longest wait.
     * @throws InterruptedException when interrupted.
     */
    void join(final long timeoutMs) throws InterruptedException
    {
        reader.join(timeoutMs);
    }

    /**
     * For the watchdog.
     *
     * @param nowNs the time now (System.nanoTime).
     * @return true when the client has held up a handshake, a payload or a reply longer than the I/O timeout.
     */
    boolean deadlineExpired(final long nowNs)
    {
        return !closed && (nowNs - readDeadlineNs > 0 || nowNs - writeDeadlineNs > 0);
    }

    String name()
    {
        return name;
    }

    @Override
    public void run()
    {
        try
        {
            export = handshake();
            readDeadlineNs = Long.MAX_VALUE;
            if (export != null)
            {
                server.logger().log(System.Logger.Level.DEBUG, "{0}: serving {1}", name, export.name());
                transmission();
            }
        }
        catch (final ProtocolException ex)
        {
            server.protocolError();
            server.logger().log(System.Logger.Level.WARNING, "{0}: protocol error, closing: {1}", name,
                ex.getMessage());
        }
        catch (final EOFException | ClosedChannelException ex)
        {
            server.logger().log(System.Logger.Level.DEBUG, "{0}: closed by the peer or the server", name);
        }
        catch (final IOException ex)
        {
            server.logger().log(System.Logger.Level.DEBUG, "{0}: connection failed: {1}", name, ex);
        }
        finally
        {
            shutdown();
        }
    }

    private void shutdown()
    {
        boolean joined = true;
        if (aio != null)
        {
            // Received whole, so executed as a worker would have: answered if the client is still there.
            submitDirect();
            readerDone = true;
            LockSupport.unpark(reaper);
        }
        if (work != null)
        {
            // Workers finish what was queued (a DISC waits for in-flight requests), then find the ring empty.
            work.close();
            for (int i = 0; workers != null && i < workers.length; i++)
            {
                joined &= joinUninterruptedly(workers[i]);
            }
            // Before the replier's last look: the reaper's replies are queued by the time it ends.
            final boolean reaped = joinUninterruptedly(reaper);
            if (reaped && aio != null)
            {
                aio.close();
            }
            joined &= reaped;
            // Deferred writes are answered (or, once closed, just released) as their group completes them: the
            // group completes every one, when the partner acknowledges it, goes away, or the group closes.
            workersDone = true;
            if (replier != null)
            {
                LockSupport.unpark(replier);
            }
            joined &= joinUninterruptedly(replier);
        }
        close();
        if (memory != null && joined)
        {
            BufferUtil.free(memory);
        }
        server.connectionClosed(this);
        server.logger().log(System.Logger.Level.DEBUG, "{0}: closed", name);
    }

    /**
     * @param thread a connection thread, or null if transmission ended before it was made.
     */
    private static boolean joinUninterruptedly(final Thread thread)
    {
        if (thread == null)
        {
            return true;
        }
        try
        {
            thread.join();
            return true;
        }
        catch (final InterruptedException ex)
        {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    private NbdExport handshake() throws IOException
    {
        final ByteBuffer hello = ByteBuffer.allocate(18);
        hello.putLong(NbdProtocol.NBDMAGIC).putLong(NbdProtocol.IHAVEOPT)
            .putShort((short)(NbdProtocol.FLAG_FIXED_NEWSTYLE | NbdProtocol.FLAG_NO_ZEROES)).flip();
        writeFully(hello);
        final ByteBuffer clientFlags = ByteBuffer.allocate(4);
        readFully(clientFlags);
        final int flags = clientFlags.getInt(0);
        if ((flags & ~(NbdProtocol.FLAG_C_FIXED_NEWSTYLE | NbdProtocol.FLAG_C_NO_ZEROES)) != 0)
        {
            throw new ProtocolException("unknown client flags 0x" + Integer.toHexString(flags));
        }
        noZeroes = (flags & NbdProtocol.FLAG_C_NO_ZEROES) != 0;

        final ByteBuffer optionHeader = ByteBuffer.allocate(16);
        while (true)
        {
            optionHeader.clear();
            readFully(optionHeader);
            if (optionHeader.getLong(0) != NbdProtocol.IHAVEOPT)
            {
                throw new ProtocolException("option without IHAVEOPT magic");
            }
            final int option = optionHeader.getInt(8);
            final long length = optionHeader.getInt(12) & 0xFFFF_FFFFL;
            if (length > MAX_OPTION_LENGTH)
            {
                throw new ProtocolException("option " + option + " of " + length + " bytes");
            }
            final ByteBuffer data = ByteBuffer.allocate((int)length);
            readFully(data);
            data.flip();
            switch (option)
            {
                case NbdProtocol.OPT_EXPORT_NAME:
                {
                    final NbdExport found = lookup(decode(data));
                    if (found == null)
                    {
                        // The old way has no error reply: the spec says to close.
                        throw new ProtocolException("NBD_OPT_EXPORT_NAME for an unknown export");
                    }
                    final ByteBuffer reply = ByteBuffer.allocate(noZeroes ? 10 : 134);
                    reply.putLong(found.size()).putShort((short)transmissionFlags(found));
                    reply.position(reply.limit()).flip();
                    writeFully(reply);
                    return serving(found);
                }
                case NbdProtocol.OPT_ABORT:
                    optionReply(option, NbdProtocol.REP_ACK, null);
                    return null;
                case NbdProtocol.OPT_LIST:
                    list(option, length);
                    break;
                case NbdProtocol.OPT_INFO:
                case NbdProtocol.OPT_GO:
                {
                    final NbdExport chosen = info(option, data);
                    if (chosen != null && option == NbdProtocol.OPT_GO)
                    {
                        return serving(chosen);
                    }
                    break;
                }
                case NbdProtocol.OPT_STRUCTURED_REPLY:
                    if (length != 0)
                    {
                        optionError(option, NbdProtocol.REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
                        break;
                    }
                    structuredReplies = true;
                    optionReply(option, NbdProtocol.REP_ACK, null);
                    break;
                case NbdProtocol.OPT_LIST_META_CONTEXT:
                case NbdProtocol.OPT_SET_META_CONTEXT:
                    metaContext(option, data);
                    break;
                default:
                    // Includes STARTTLS and EXTENDED_HEADERS: clients fall back to plain text and compact headers.
                    optionError(option, NbdProtocol.REP_ERR_UNSUP, "option " + option + " is not supported");
                    break;
            }
        }
    }

    /**
     * The export the client chose: BLOCK_STATUS is served only if base:allocation was selected for it.
     */
    private NbdExport serving(final NbdExport chosen)
    {
        allocationContext = allocationSelectedFor != null && lookup(allocationSelectedFor) == chosen;
        return chosen;
    }

    /**
     * NBD_OPT_LIST_META_CONTEXT and NBD_OPT_SET_META_CONTEXT: u32 name length, export name, u32 query count, per
     * query u32 length and the query. The one context served is base:allocation (which ranges are holes): a LIST
     * names it when asked for no query, "base:" or itself; a SET selects it for the export when asked for by its
     * name, and otherwise selects nothing. Only after NBD_OPT_STRUCTURED_REPLY, as its replies are structured.
     */
    private void metaContext(final int option, final ByteBuffer data) throws IOException
    {
        final boolean set = option == NbdProtocol.OPT_SET_META_CONTEXT;
        if (set)
        {
            allocationSelectedFor = null; // A SET replaces what an earlier one selected, a failed one included.
        }
        if (!structuredReplies)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "metadata contexts need NBD_OPT_STRUCTURED_REPLY first");
            return;
        }
        final int length = data.remaining();
        final long nameLength = length < 8 ? -1 : data.getInt(0) & 0xFFFF_FFFFL;
        if (nameLength < 0 || nameLength > length - 8)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "option data too short for its export name");
            return;
        }
        final long count = data.getInt(4 + (int)nameLength) & 0xFFFF_FFFFL;
        boolean allocation = !set && count == 0;
        int at = 8 + (int)nameLength;
        final String exportName;
        try
        {
            exportName = decode(data.duplicate().position(4).limit(4 + (int)nameLength));
            for (long i = 0; i < count; i++)
            {
                final long queryLength = at + 4 > length ? -1 : data.getInt(at) & 0xFFFF_FFFFL;
                if (queryLength < 0 || queryLength > length - at - 4)
                {
                    optionError(option, NbdProtocol.REP_ERR_INVALID, "query " + i + " runs past the option");
                    return;
                }
                final String query = decode(data.duplicate().position(at + 4).limit(at + 4 + (int)queryLength));
                allocation |= NbdProtocol.CONTEXT_ALLOCATION.equals(query) || !set && "base:".equals(query);
                at += 4 + (int)queryLength;
            }
        }
        catch (final ProtocolException ex)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "export name or query is not UTF-8");
            return;
        }
        if (at != length)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "option length does not match its queries");
            return;
        }
        if (lookup(exportName) == null)
        {
            optionError(option, NbdProtocol.REP_ERR_UNKNOWN, "no export named '" + exportName + "'");
            return;
        }
        if (allocation)
        {
            final byte[] contextName = NbdProtocol.CONTEXT_ALLOCATION.getBytes(StandardCharsets.UTF_8);
            final ByteBuffer context = ByteBuffer.allocate(4 + contextName.length);
            context.putInt(set ? NbdProtocol.CONTEXT_ALLOCATION_ID : 0).put(contextName).flip();
            optionReply(option, NbdProtocol.REP_META_CONTEXT, context);
            if (set)
            {
                allocationSelectedFor = exportName;
            }
        }
        optionReply(option, NbdProtocol.REP_ACK, null);
    }

    private void list(final int option, final long length) throws IOException
    {
        if (length != 0)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
            return;
        }
        final List<String> names = server.exports().names();
        for (final String exportName : names)
        {
            final byte[] bytes = exportName.getBytes(StandardCharsets.UTF_8);
            final ByteBuffer data = ByteBuffer.allocate(4 + bytes.length);
            data.putInt(bytes.length).put(bytes).flip();
            optionReply(option, NbdProtocol.REP_SERVER, data);
        }
        optionReply(option, NbdProtocol.REP_ACK, null);
    }

    /**
     * NBD_OPT_INFO and NBD_OPT_GO: u32 name length, name, u16 count, count x u16 info type.
     */
    private NbdExport info(final int option, final ByteBuffer data) throws IOException
    {
        final int length = data.remaining();
        if (length < 6)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "option data too short");
            return null;
        }
        final long nameLength = data.getInt(0) & 0xFFFF_FFFFL;
        if (nameLength > length - 6)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "export name longer than the option");
            return null;
        }
        final int count = data.getShort(4 + (int)nameLength) & 0xFFFF;
        if (length != 4 + nameLength + 2 + 2L * count)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "option length does not match its info requests");
            return null;
        }
        final String exportName;
        try
        {
            exportName = decode(data.duplicate().position(4).limit(4 + (int)nameLength));
        }
        catch (final ProtocolException ex)
        {
            optionError(option, NbdProtocol.REP_ERR_INVALID, "export name is not UTF-8");
            return null;
        }
        boolean wantName = false;
        boolean wantDescription = false;
        for (int i = 0; i < count; i++)
        {
            final int type = data.getShort(4 + (int)nameLength + 2 + 2 * i) & 0xFFFF;
            wantName |= type == NbdProtocol.INFO_NAME;
            wantDescription |= type == NbdProtocol.INFO_DESCRIPTION;
        }
        final NbdExport found = lookup(exportName);
        if (found == null)
        {
            optionError(option, NbdProtocol.REP_ERR_UNKNOWN, "no export named '" + exportName + "'");
            return null;
        }

        final ByteBuffer exportInfo = ByteBuffer.allocate(12);
        exportInfo.putShort((short)NbdProtocol.INFO_EXPORT).putLong(found.size())
            .putShort((short)transmissionFlags(found)).flip();
        optionReply(option, NbdProtocol.REP_INFO, exportInfo);
        // Sent even when not asked for (the spec allows it): O_DIRECT needs 4096-byte alignment.
        final ByteBuffer blockSize = ByteBuffer.allocate(14);
        blockSize.putShort((short)NbdProtocol.INFO_BLOCK_SIZE).putInt(Slab.ALIGNMENT).putInt(Slab.ALIGNMENT)
            .putInt(server.maxPayload()).flip();
        optionReply(option, NbdProtocol.REP_INFO, blockSize);
        if (wantName)
        {
            optionReply(option, NbdProtocol.REP_INFO, infoString(NbdProtocol.INFO_NAME, found.name()));
        }
        if (wantDescription)
        {
            optionReply(option, NbdProtocol.REP_INFO, infoString(NbdProtocol.INFO_DESCRIPTION,
                "blockmover " + (found.isReadOnly() ? "read-only " : "") + "export " + found.name()));
        }
        optionReply(option, NbdProtocol.REP_ACK, null);
        return found;
    }

    private static ByteBuffer infoString(final int type, final String text)
    {
        final byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        final ByteBuffer data = ByteBuffer.allocate(2 + bytes.length);
        data.putShort((short)type).put(bytes).flip();
        return data;
    }

    /**
     * The empty name, which clients send when the user named no export, means the only export when there is
     * exactly one.
     */
    private NbdExport lookup(final String exportName)
    {
        final NbdExports exports = server.exports();
        final NbdExport found = exports.find(exportName);
        if (found == null && exportName.isEmpty())
        {
            final List<String> names = exports.names();
            if (names.size() == 1)
            {
                return exports.find(names.get(0));
            }
        }
        return found;
    }

    static int transmissionFlags(final NbdExport export)
    {
        // Multi-conn is safe: a flush on any connection is volume-wide (fdatasync) and covers every connection.
        return export.isReadOnly() ? TRANSMISSION_FLAGS_READ_ONLY : TRANSMISSION_FLAGS_WRITABLE;
    }

    private static String decode(final ByteBuffer bytes) throws ProtocolException
    {
        try
        {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(bytes).toString();
        }
        catch (final CharacterCodingException ex)
        {
            throw new ProtocolException("export name is not UTF-8");
        }
    }

    private void optionError(final int option, final int type, final String message) throws IOException
    {
        optionReply(option, type, ByteBuffer.wrap(message.getBytes(StandardCharsets.UTF_8)));
    }

    private void optionReply(final int option, final int type, final ByteBuffer data) throws IOException
    {
        final int length = data == null ? 0 : data.remaining();
        final ByteBuffer reply = ByteBuffer.allocate(20 + length);
        reply.putLong(NbdProtocol.OPTION_REPLY_MAGIC).putInt(option).putInt(type).putInt(length);
        if (data != null)
        {
            reply.put(data);
        }
        reply.flip();
        writeFully(reply);
    }

    private void transmission() throws IOException
    {
        final int slots = server.workersPerConnection();
        final int maxPayload = server.maxPayload();
        memory = ByteBuffer.allocateDirect(slots * maxPayload + Slab.ALIGNMENT);
        final ByteBuffer aligned = memory.alignedSlice(Slab.ALIGNMENT);
        free = new RequestRing(slots);
        work = new RequestRing(slots);
        this.slots = new NbdRequest[slots];
        for (int i = 0; i < slots; i++)
        {
            this.slots[i] = new NbdRequest(this, i, aligned.duplicate().position(i * maxPayload)
                .limit((i + 1) * maxPayload).slice());
            free.put(this.slots[i]);
        }
        if (closed)
        {
            free.close(); // close() may have run before the ring existed.
        }
        replies = new ManyToOneConcurrentArrayQueue<>(slots);
        replyBatch = new NbdRequest[slots];
        replyBuffers = new ByteBuffer[2 * slots];
        replier = new Thread(this::replyDeferred, name + "-replier");
        replier.setDaemon(true);
        replier.start();
        startAio(slots);
        workers = new Thread[slots];
        for (int i = 0; i < slots; i++)
        {
            workers[i] = new Thread(this::work, name + "-worker-" + i);
            workers[i].setDaemon(true);
            workers[i].start();
        }

        final long size = export.size();
        final boolean readOnly = export.isReadOnly();
        while (!closed)
        {
            if (!readHeader())
            {
                return;
            }
            final int at = inbound.position();
            if (inbound.getInt(at) != NbdProtocol.REQUEST_MAGIC)
            {
                throw new ProtocolException("bad request magic 0x" + Integer.toHexString(inbound.getInt(at)));
            }
            final int flags = inbound.getShort(at + 4) & 0xFFFF;
            final int type = inbound.getShort(at + 6) & 0xFFFF;
            final long cookie = inbound.getLong(at + 8);
            final long offset = inbound.getLong(at + 16);
            final long length = inbound.getInt(at + 24) & 0xFFFF_FFFFL;
            inbound.position(at + NbdProtocol.REQUEST_LENGTH);
            server.request();
            if (type == CMD_DISC)
            {
                return;
            }
            NbdRequest request = free.poll();
            if (request == null)
            {
                submitDirect(); // Every slot may be queued for AIO: what frees one must be on its way first.
                request = free.take();
            }
            if (request == null)
            {
                return;
            }
            request.type = type;
            request.flags = flags;
            request.cookie = cookie;
            request.offset = offset;
            request.length = length;
            request.error = validate(type, offset, length, size, readOnly, maxPayload, allocationContext);
            if (type == CMD_WRITE)
            {
                if (!readPayload(request))
                {
                    dispatch(request);
                    return;
                }
            }
            if (drained && !inbound.hasRemaining() && queued.get() == 0)
            {
                // Nothing else has arrived and no worker is busy: the client waits for this one reply (queue depth
                // 1, or the last of a burst), so the reader runs it itself and saves the hand-over to a worker,
                // 10 to 30 microseconds of wake-up on a small machine. Anything sent meanwhile waits in the socket.
                execute(request, false);
                reply(request);
            }
            else if (submitsDirectly(request))
            {
                queueDirect(request);
            }
            else
            {
                dispatch(request);
            }
        }
    }

    /**
     * Makes AIO ready for an export with a direct descriptor; without one, or when the kernel refuses a context,
     * the workers do everything.
     */
    private void startAio(final int slotCount)
    {
        final int fd = export.directFd();
        if (fd < 0 || !LinuxAio.isAvailable())
        {
            return;
        }
        try
        {
            aio = new LinuxAio(slotCount);
        }
        catch (final IOException ex)
        {
            server.logger().log(System.Logger.Level.WARNING, "{0}: requests go through worker threads: {1}", name,
                ex.getMessage());
            return;
        }
        directFd = fd;
        for (final NbdRequest slot : slots)
        {
            slot.directIo = export.newDirectIo();
        }
        reaper = new Thread(this::reap, name + "-reaper");
        reaper.setDaemon(true);
        reaper.start();
    }

    /**
     * @return whether the request goes to the kernel through AIO: on a plain volume READs and WRITEs; where the
     *     export runs something around them (a replicated volume), READs and WRITEs without FUA, as a FUA write
     *     ends in a device flush, which the reaper must not wait for.
     */
    private boolean submitsDirectly(final NbdRequest request)
    {
        if (aio == null || request.error != 0 || (request.length & (Slab.ALIGNMENT - 1)) != 0)
        {
            return false;
        }
        if (request.directIo == null)
        {
            return request.type == CMD_READ || request.type == CMD_WRITE;
        }
        return request.type == CMD_READ || (request.type == CMD_WRITE && (request.flags & CMD_FLAG_FUA) == 0);
    }

    /**
     * Queues a READ or WRITE for the next {@link #submitDirect()}. A FUA write is a write that is durable when it
     * completes (RWF_DSYNC), which on this descriptor is what FUA asks.
     */
    private void queueDirect(final NbdRequest request)
    {
        final DirectIo directIo = request.directIo;
        if (directIo != null && !beginDirect(request, directIo))
        {
            return; // Refused: answered already.
        }
        queued.incrementAndGet();
        if (aioOutstanding.getAndIncrement() == 0)
        {
            LockSupport.unpark(reaper); // It sleeps while nothing is outstanding; there is something now.
        }
        aio.prepare(request.slot, request.type == CMD_WRITE, directFd, request.buffer, (int)request.length,
            request.offset, (request.flags & CMD_FLAG_FUA) != 0);
        aio.queue(request.slot);
        if (directIo != null && request.type == CMD_WRITE && directIo.drainWanted())
        {
            submitDirect();
        }
    }

    /**
     * Runs what the export does before a direct READ or WRITE. Never waits with writes of this connection queued
     * and not submitted: those may be the very writes it would wait for.
     *
     * @return false when the export refused the request; it is answered.
     */
    private boolean beginDirect(final NbdRequest request, final DirectIo directIo)
    {
        try
        {
            if (request.type == CMD_READ)
            {
                directIo.beginRead();
            }
            else
            {
                if (!directIo.beginWrite(request.offset, request.buffer, (int)request.length, false))
                {
                    submitDirect();
                    directIo.beginWrite(request.offset, request.buffer, (int)request.length, true);
                }
                begunWrites = directIo;
            }
            return true;
        }
        catch (final IOException | RuntimeException ex)
        {
            request.error = errorCode(ex);
            server.error();
            ioFailed(request, ex);
            reply(request);
            return false;
        }
    }

    /**
     * Hands the queued AIO operations to the kernel, all in one system call. The reader calls it before anything
     * that may wait: a socket read, or a wait for a free slot.
     */
    private void submitDirect()
    {
        if (begunWrites != null)
        {
            begunWrites.beforeSubmit();
            begunWrites = null;
        }
        if (aio != null && aio.queued() > 0)
        {
            server.directSubmission(aio.queued());
            aio.submit(aioRefused);
        }
    }

    private void aioRefused(final int slot, final int errno)
    {
        directDone(slots[slot], -errno);
        drainReplies();
        aioOutstanding.decrementAndGet();
    }

    /**
     * A direct READ or WRITE has ended: its reply is queued, unless the export deferred the write (its completion
     * answers it then). Reaper, or the reader for an operation the kernel refused.
     *
     * @param result bytes transferred, or a negated errno.
     */
    private void directDone(final NbdRequest request, final long result)
    {
        final long length = request.length; // Read first: once deferred, the request may be answered and reused.
        final DirectIo directIo = request.directIo;
        if (directIo != null && request.type == CMD_READ)
        {
            directIo.endRead();
        }
        if (directIo != null && request.type == CMD_WRITE)
        {
            deferred.incrementAndGet();
            request.deferred = true; // Set before: its completion may come before end returns.
            boolean now = true;
            try
            {
                now = directIo.endWrite(result, request);
            }
            catch (final IOException | RuntimeException ex)
            {
                request.error = errorCode(ex);
                server.error();
                ioFailed(request, ex);
            }
            finally
            {
                if (now)
                {
                    request.deferred = false; // Not deferred: still this thread's.
                    deferred.decrementAndGet();
                }
            }
            if (!now)
            {
                server.bytesWritten(length);
                return;
            }
        }
        else if (result != length)
        {
            final IOException failure = LinuxAio.failure(result, length);
            request.error = errorCode(failure);
            server.error();
            ioFailed(request, failure);
        }
        if (request.error == 0)
        {
            if (request.type == CMD_READ)
            {
                server.bytesRead(length);
            }
            else
            {
                server.bytesWritten(length);
            }
        }
        queued.decrementAndGet(); // Before the reply, as in work().
        queueReply(request);
    }

    /**
     * The reaper: collects completed AIO operations, as many per system call as have completed, and queues their
     * replies; sleeps while none is outstanding; ends once the reader has stopped and the last one is reaped.
     */
    private void reap()
    {
        while (true)
        {
            if (aioOutstanding.get() == 0)
            {
                if (readerDone)
                {
                    return;
                }
                LockSupport.park(this);
                continue;
            }
            final int n = aio.reap(1, REAP_TIMEOUT_NS);
            for (int i = 0; i < n; i++)
            {
                directDone(slots[aio.completedSlot(i)], aio.result(i));
            }
            if (n > 0)
            {
                aioOutstanding.addAndGet(-n);
                drainReplies();
            }
        }
    }

    private void dispatch(final NbdRequest request)
    {
        queued.incrementAndGet();
        work.put(request);
    }

    /**
     * Checks a request against the export before any I/O; the rules are those advertised in the handshake
     * (minimum block 4096, maximum block maxPayload).
     *
     * @param blockStatus whether BLOCK_STATUS is served (base:allocation selected for this export).
     * @return 0 or the NBD error to reply with.
     */
    static int validate(
        final int type, final long offset, final long length, final long size, final boolean readOnly,
        final int maxPayload, final boolean blockStatus)
    {
        switch (type)
        {
            case CMD_FLUSH:
                return 0;
            case CMD_BLOCK_STATUS:
                if (!blockStatus)
                {
                    return NBD_EINVAL;
                }
                break;
            case CMD_READ:
            case CMD_WRITE:
                if (length > maxPayload)
                {
                    return NBD_EINVAL;
                }
                break;
            case CMD_TRIM:
            case CMD_WRITE_ZEROES:
                break;
            default:
                return NBD_EINVAL;
        }
        if (readOnly && type != CMD_READ && type != CMD_BLOCK_STATUS)
        {
            return NBD_EPERM;
        }
        if (length == 0 || offset < 0)
        {
            return NBD_EINVAL;
        }
        if (offset > size || length > size - offset)
        {
            // The protocol asks for ENOSPC on a write past the end, EINVAL on a read or trim past it.
            return type == CMD_WRITE || type == CMD_WRITE_ZEROES ? NBD_ENOSPC : NBD_EINVAL;
        }
        if ((offset & (Slab.ALIGNMENT - 1)) != 0 ||
            ((length & (Slab.ALIGNMENT - 1)) != 0 && offset + length != size))
        {
            return NBD_EINVAL;
        }
        return 0;
    }

    /**
     * Reads a WRITE's payload into the slot, or past it when the request is refused.
     *
     * @return false when the connection must close after replying.
     */
    private boolean readPayload(final NbdRequest request) throws IOException
    {
        final ByteBuffer buffer = request.buffer;
        final long length = request.length;
        if (request.error != 0 && length > MAX_DISCARD_LENGTH)
        {
            server.logger().log(System.Logger.Level.WARNING, "{0}: WRITE of {1} bytes refused, closing", name,
                length);
            return false;
        }
        readDeadlineNs = System.nanoTime() + server.ioTimeoutNs();
        try
        {
            if (inbound.remaining() < length && length <= INBOUND_CAPACITY && !fill((int)length))
            {
                // A payload that fits is read through inbound rather than straight into the slot: only a read
                // with room to spare tells whether anything followed it, and that decides whether the reader may
                // run the request itself. Copying 16 KiB costs about a microsecond, a hand-over 10 to 30.
                throw new EOFException("peer closed the connection");
            }
            long remaining = length;
            while (remaining > 0)
            {
                final int chunk = (int)Math.min(remaining, buffer.capacity());
                buffer.clear().limit(chunk);
                // What came with the header is copied; the rest is read straight into the slot.
                final int buffered = Math.min(chunk, inbound.remaining());
                if (buffered > 0)
                {
                    final int end = inbound.limit();
                    inbound.limit(inbound.position() + buffered);
                    buffer.put(inbound);
                    inbound.limit(end);
                }
                if (buffer.hasRemaining())
                {
                    readFully(buffer);
                    drained = false; // Unknown whether more followed the payload: hand the request over.
                }
                remaining -= chunk;
            }
        }
        catch (final IOException ex)
        {
            free.put(request); // The request dies with the connection; its slot goes home.
            throw ex;
        }
        finally
        {
            readDeadlineNs = Long.MAX_VALUE;
        }
        return true;
    }

    /**
     * Makes a whole request header available at {@code inbound.position()}, reading as much as the socket holds.
     *
     * @return false when the client closed the connection between requests.
     */
    private boolean readHeader() throws IOException
    {
        return inbound.remaining() >= NbdProtocol.REQUEST_LENGTH || fill(NbdProtocol.REQUEST_LENGTH);
    }

    /**
     * Reads until {@code inbound} holds {@code needed} bytes from its position, as much as the socket holds per
     * read, and notes whether the last read drained the socket.
     *
     * @param needed at most {@link #INBOUND_CAPACITY}.
     * @return false when the client closed the connection with nothing buffered (between requests).
     */
    private boolean fill(final int needed) throws IOException
    {
        submitDirect();
        final boolean between = !inbound.hasRemaining();
        inbound.compact();
        try
        {
            while (inbound.position() < needed)
            {
                final int room = inbound.remaining();
                final int read = channel.read(inbound);
                if (read < 0)
                {
                    if (between && inbound.position() == 0)
                    {
                        return false; // The client closed between requests without NBD_CMD_DISC: not an error.
                    }
                    throw new EOFException("peer closed the connection");
                }
                drained = read < room;
                if (inbound.position() < needed)
                {
                    readDeadlineNs = System.nanoTime() + server.ioTimeoutNs();
                }
            }
        }
        finally
        {
            readDeadlineNs = Long.MAX_VALUE;
            inbound.flip();
        }
        return true;
    }

    private void work()
    {
        while (true)
        {
            final NbdRequest request = work.take();
            if (request == null)
            {
                return;
            }
            if (!closed)
            {
                if (!execute(request, true))
                {
                    continue; // Deferred: its completion queues the reply, whose writer sends the slot home.
                }
                // Before the reply, not after: a client at queue depth 1 sends its next request once it has this
                // reply, and the reader must then find no worker busy and run it itself. Counted after, the first
                // request after a burst went to a worker whenever the reader was quicker than this thread
                // (NbdServerTest failed so under load).
                queued.decrementAndGet();
                reply(request); // Sends the slot home once written.
            }
            else
            {
                queued.decrementAndGet();
                free.put(request);
            }
        }
    }

    /**
     * A deferred write's outcome, from the thread that completed it: its reply is queued, never blocking. The
     * replier is woken by {@link #wakeReplier()}, once the completer has queued its whole batch.
     */
    void deferredDone(final NbdRequest request, final int error)
    {
        if (error != 0)
        {
            request.error = error;
            server.error();
        }
        fillReplyHeader(request);
        request.withData = false;
        replies.offer(request); // Never full: it has room for every slot.
    }

    void wakeReplier()
    {
        LockSupport.unpark(replier);
    }

    /**
     * The replier: writes the replies of completed deferred writes (with whatever else is queued), unless a worker
     * holding the reply lock does it first; ends once the workers have and no deferred write is left.
     */
    private void replyDeferred()
    {
        while (true)
        {
            drainReplies();
            if (workersDone && deferred.get() == 0)
            {
                return;
            }
            LockSupport.park(this);
        }
    }

    /**
     * Queues a request's reply and writes what is queued, unless another thread is writing replies: that one then
     * writes this one too, and this thread goes on to its next request instead of waiting for the lock. Every
     * contended wait on the reply lock was a context switch each way (with 16 workers at 4k QD16, JFR counted
     * about 1900 a second, 2.6 threads blocked on average).
     */
    private void reply(final NbdRequest request)
    {
        queueReply(request);
        drainReplies();
    }

    /**
     * Queues a request's reply for whoever next writes replies; the caller then calls {@link #drainReplies()}.
     */
    private void queueReply(final NbdRequest request)
    {
        fillReplyHeader(request);
        request.withData = request.error == 0 && (request.type == CMD_READ || request.type == CMD_BLOCK_STATUS);
        if (request.withData)
        {
            request.buffer.limit(request.type == CMD_READ ? (int)request.length : request.statusLength).position(0);
        }
        replies.offer(request); // Never full: it has room for every slot.
    }

    /**
     * Writes the queued replies, as many per system call as are queued, and sends their slots home, while the reply
     * lock is free. Nothing is left behind: a reply queued while the lock is held is either taken by the holder or
     * seen by the holder's check after it lets go (every thread that queues also tries the lock after it).
     */
    private void drainReplies()
    {
        while (!replies.isEmpty() && replyLock.tryLock())
        {
            int n = 0;
            try
            {
                int buffers = 0;
                NbdRequest request;
                while (n < replyBatch.length && (request = replies.poll()) != null)
                {
                    if (request.deferred)
                    {
                        queued.decrementAndGet(); // Before the reply, as in work().
                    }
                    replyBatch[n++] = request;
                    replyBuffers[buffers++] = request.replyHeader;
                    if (request.withData)
                    {
                        replyBuffers[buffers++] = request.buffer;
                    }
                }
                if (buffers > 0 && !closed)
                {
                    writeReplies(replyBuffers, buffers);
                }
                for (int i = 0; i < n; i++)
                {
                    final NbdRequest done = replyBatch[i];
                    replyBatch[i] = null;
                    final boolean wasDeferred = done.deferred;
                    done.deferred = false;
                    free.put(done);
                    if (wasDeferred)
                    {
                        deferred.decrementAndGet();
                    }
                }
                for (int i = 0; i < buffers; i++)
                {
                    replyBuffers[i] = null;
                }
            }
            finally
            {
                replyLock.unlock();
            }
            if (n == 0)
            {
                // A producer took its place in the queue and has not stored its request yet: let it run (on a
                // small host it may be the thread this one preempted).
                Thread.yield();
            }
        }
    }

    /**
     * @param mayDefer whether a WRITE may be left for the export to complete later.
     * @return false when the export deferred the write: its completion answers it.
     */
    private boolean execute(final NbdRequest request, final boolean mayDefer)
    {
        if (request.error == 0)
        {
            final boolean fua = (request.flags & CMD_FLAG_FUA) != 0;
            try
            {
                switch (request.type)
                {
                    case CMD_READ:
                        export.read(request.offset, request.buffer, (int)request.length);
                        server.bytesRead(request.length);
                        break;
                    case CMD_WRITE:
                        if (mayDefer)
                        {
                            // Read first: once deferred, the request may be answered and reused before this returns.
                            final long length = request.length;
                            deferred.incrementAndGet();
                            request.deferred = true; // Set before: its completion may come before this returns.
                            boolean now = true;
                            try
                            {
                                now = export.writeDeferrable(request.offset, request.buffer, (int)length, fua,
                                    request);
                            }
                            finally
                            {
                                if (now)
                                {
                                    request.deferred = false; // Not deferred: still this thread's.
                                    deferred.decrementAndGet();
                                }
                            }
                            server.bytesWritten(length);
                            if (!now)
                            {
                                return false;
                            }
                        }
                        else
                        {
                            export.write(request.offset, request.buffer, (int)request.length, fua);
                            server.bytesWritten(request.length);
                        }
                        break;
                    case CMD_FLUSH:
                        export.flush();
                        break;
                    case CMD_TRIM:
                        export.trim(request.offset, request.length);
                        if (fua)
                        {
                            export.flush();
                        }
                        break;
                    case CMD_WRITE_ZEROES:
                        export.writeZeroes(request.offset, request.length, fua,
                            (request.flags & NbdProtocol.CMD_FLAG_NO_HOLE) == 0);
                        break;
                    case CMD_BLOCK_STATUS:
                        request.statusLength = describeAllocation(request);
                        break;
                    default:
                        request.error = NBD_EINVAL;
                        break;
                }
            }
            catch (final IOException | RuntimeException ex)
            {
                request.error = errorCode(ex);
                ioFailed(request, ex);
            }
        }
        if (request.error != 0)
        {
            server.error();
        }
        return true;
    }

    /**
     * @param ex why a request failed.
     * @return the NBD error to reply with.
     */
    private static int errorCode(final Exception ex)
    {
        if (ex instanceof NbdErrorException)
        {
            final int code = ((NbdErrorException)ex).errorCode();
            return code == 0 ? NBD_EIO : code;
        }
        // Out of space is ENOSPC to the client, not EIO: qemu's default werror=enospc then pauses the guest until
        // the admin adds space, where EIO would reach the guest's file system as a failed disk.
        return io.blockmover.io.Volume.isOutOfSpace(ex) ? NBD_ENOSPC : NBD_EIO;
    }

    private void ioFailed(final NbdRequest request, final Exception ex)
    {
        // Counted always; logged once per connection, as a failing disk fails every request.
        if (!ioErrorLogged.get() && ioErrorLogged.compareAndSet(false, true))
        {
            server.logger().log(System.Logger.Level.WARNING, "{0}: {1} of {2} bytes at {3} failed: {4}", name,
                commandName(request.type), request.length, request.offset, ex.toString());
        }
    }

    private static String commandName(final int type)
    {
        switch (type)
        {
            case CMD_READ:
                return "READ";
            case CMD_WRITE:
                return "WRITE";
            case CMD_FLUSH:
                return "FLUSH";
            case CMD_TRIM:
                return "TRIM";
            case CMD_WRITE_ZEROES:
                return "WRITE_ZEROES";
            case CMD_BLOCK_STATUS:
                return "BLOCK_STATUS";
            default:
                return "command " + type;
        }
    }

    /**
     * A simple reply, or once structured replies are agreed for a READ or BLOCK_STATUS, the one chunk that answers
     * it whole (flag DONE): its data with their offset, its extents, or its error without a message. The spec
     * forbids a simple reply to a READ then; other commands keep theirs.
     */
    private void fillReplyHeader(final NbdRequest request)
    {
        final ByteBuffer header = request.replyHeader.clear();
        if (!structuredReplies || request.type != CMD_READ && request.type != CMD_BLOCK_STATUS)
        {
            header.putInt(0, NbdProtocol.SIMPLE_REPLY_MAGIC).putInt(4, request.error).putLong(8, request.cookie)
                .limit(NbdProtocol.SIMPLE_REPLY_LENGTH);
            return;
        }
        header.putInt(0, NbdProtocol.STRUCTURED_REPLY_MAGIC).putShort(4, (short)NbdProtocol.REPLY_FLAG_DONE)
            .putLong(8, request.cookie);
        final int at = NbdProtocol.STRUCTURED_REPLY_LENGTH;
        if (request.error != 0)
        {
            header.putShort(6, (short)NbdProtocol.REPLY_TYPE_ERROR).putInt(16, 6).putInt(at, request.error)
                .putShort(at + 4, (short)0).limit(at + 6);
        }
        else if (request.type == CMD_READ)
        {
            header.putShort(6, (short)NbdProtocol.REPLY_TYPE_OFFSET_DATA).putInt(16, 8 + (int)request.length)
                .putLong(at, request.offset).limit(at + 8);
        }
        else
        {
            header.putShort(6, (short)NbdProtocol.REPLY_TYPE_BLOCK_STATUS).putInt(16, request.statusLength)
                .limit(at);
        }
    }

    /**
     * Fills a BLOCK_STATUS reply's payload into the slot: the context id, then an extent (u32 length, u32 flags)
     * per run of holes or of data from the request's offset to its end, at most {@link #MAX_EXTENTS} (one for
     * REQ_ONE); a client asks again from where the last one ends.
     *
     * @return the payload's length.
     */
    private int describeAllocation(final NbdRequest request)
    {
        final ByteBuffer out = request.buffer;
        out.clear().putInt(0, NbdProtocol.CONTEXT_ALLOCATION_ID);
        final long end = request.offset + request.length;
        final int most = (request.flags & NbdProtocol.CMD_FLAG_REQ_ONE) != 0 ? 1 :
            Math.min(MAX_EXTENTS, (out.capacity() - 4) / 8);
        int at = 4;
        long position = request.offset;
        for (int n = 0; n < most && position < end; n++)
        {
            final long run = export.allocationRun(position, end);
            final long runEnd = Math.abs(run) > position ? Math.abs(run) : end; // One that cannot say: data.
            out.putInt(at, (int)(runEnd - position))
                .putInt(at + 4, run < 0 ? NbdProtocol.STATE_HOLE | NbdProtocol.STATE_ZERO : 0);
            at += 8;
            position = runEnd;
        }
        return at;
    }

    /**
     * Writes {@code count} buffers in one gathering write: the replies of that many requests, READ data (or
     * BLOCK_STATUS extents) after its header. The reply lock is held (drainReplies).
     */
    private void writeReplies(final ByteBuffer[] buffers, final int count)
    {
        writeDeadlineNs = System.nanoTime() + server.ioTimeoutNs();
        try
        {
            while (buffers[count - 1].hasRemaining())
            {
                channel.write(buffers, 0, count);
            }
        }
        catch (final IOException ex)
        {
            // The client is gone or was cut off by the watchdog: the reader sees the closed socket and ends.
            server.logger().log(System.Logger.Level.DEBUG, "{0}: reply failed: {1}", name, ex);
            close();
        }
        finally
        {
            writeDeadlineNs = Long.MAX_VALUE;
        }
    }

    private void readFully(final ByteBuffer buffer) throws IOException
    {
        submitDirect();
        while (buffer.hasRemaining())
        {
            if (channel.read(buffer) < 0)
            {
                throw new EOFException("peer closed the connection");
            }
        }
    }

    private void writeFully(final ByteBuffer buffer) throws IOException
    {
        while (buffer.hasRemaining())
        {
            channel.write(buffer);
        }
    }
}
