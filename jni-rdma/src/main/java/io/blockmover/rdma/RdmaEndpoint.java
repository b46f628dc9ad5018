package io.blockmover.rdma;

import java.net.InetSocketAddress;

import com.sun.jna.Native;
import io.blockmover.rdma.verbs.Errno;
import io.blockmover.rdma.verbs.IbVerbs;
import io.blockmover.rdma.verbs.IbvCompChannelDescriptor;
import io.blockmover.rdma.verbs.IbvQpAttrDescriptor;
import io.blockmover.rdma.verbs.IbvQpDescriptor;
import io.blockmover.rdma.verbs.IbvQpInitAttrDescriptor;
import io.blockmover.rdma.verbs.IbvRecvWrDescriptor;
import io.blockmover.rdma.verbs.IbvSendWrDescriptor;
import io.blockmover.rdma.verbs.IbvSgeDescriptor;
import io.blockmover.rdma.verbs.IbvWcDescriptor;
import io.blockmover.rdma.verbs.LibC;
import io.blockmover.rdma.verbs.RdmaCm;
import io.blockmover.rdma.verbs.RdmaCmEventType;
import io.blockmover.rdma.verbs.RdmaCmIdDescriptor;
import io.blockmover.rdma.verbs.RdmaConnParamDescriptor;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.rdma.verbs.SockaddrDescriptor;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * A reliable-connected RDMA endpoint, socket-like, that owns no thread: the caller drives connection set-up with
 * {@link #pollEvents(long)} and the data path with the post methods and {@link #pollCompletions}.
 * <p>
 * Life cycle, client side: {@link #connect} binds a cm id to the device address, creates the queues and starts
 * address resolution, so receives can be posted before the first {@link #pollEvents(long)}; polling then walks
 * RESOLVING_ADDRESS, RESOLVING_ROUTE, CONNECTING to ESTABLISHED, or to FAILED when the deadline passes or the
 * peer rejects. Server side: {@link RdmaListener#poll(long)} returns an endpoint in CONNECT_REQUESTED; post
 * receives, then {@link #accept(long, long)} (ACCEPTING, then ESTABLISHED) or {@link #reject()}.
 * Receives must be posted before the peer can send: iWARP has no receiver-not-ready retry.
 * <p>
 * Nothing here blocks, with one provider exception measured on Linux 6.1: soft-iWARP (siw) makes its TCP
 * connection synchronously inside {@code rdma_connect}, so towards an absent host the {@link #pollEvents(long)}
 * call that reaches ROUTE_RESOLVED blocks for the kernel's SYN timeout ({@code net.ipv4.tcp_syn_retries}, about
 * 127 s by default) before failing; a refused connection fails at once. rxe and hardware RNICs do not block.
 * <p>
 * Data path: every post is signaled and copies a pre-built work request and SGE in native memory, refilled in
 * place: no allocation per operation. SEND/WRITE/READ share the send queue; a post that would exceed its depth
 * returns false (back-pressure) without calling into the library. Sends and receives complete on separate
 * completion queues so that even flushed completions (whose opcode is undefined) are accounted to the right
 * queue. No write-with-immediate: iWARP lacks it.
 * <p>
 * Waiting: both completion queues report to one completion channel. An owner with nothing to do calls
 * {@link #armCompletionEvents()}, polls once more (a completion that came before the arming raises no event), then
 * blocks in {@link #awaitEvents(int)} until a completion, a connection event, {@link #wakeup()} or the time-out:
 * an interrupt wakes it, not a timer, so it learns of a completion at once and costs nothing while idle.
 * <p>
 * Shutdown: {@link #disconnect()} starts an orderly disconnect; {@link #close()} releases QP, CQs, cm id and
 * event channel in that order, never waits for the peer, and is safe in every state, including after the peer
 * died mid-transfer. When the connection goes down the endpoint moves the QP to the error state so that posted
 * work comes back as IBV_WC_WR_FLUSH_ERR completions, but a provider may lose requests posted in the window
 * between the QP failing and the DISCONNECTED event being polled (siw does: its QP flushes only what was queued
 * when it entered the error state). So once the endpoint has left ESTABLISHED, drain completions for as long as
 * suits, then close: every request not completed by then is void and its buffer belongs to the caller again.
 * Send-queue posts need ESTABLISHED; receives may also be posted while connecting.
 * <p>
 * Threading: one thread at a time. The owner may hand the endpoint to another thread with a happens-before
 * edge (e.g. through a queue) but must not use it from two threads at once.
 * <p>
 * Native scratch layout, one 64-byte-aligned block per endpoint:
 * <pre>
 *  +----------------------------+ 0
 *  | send ibv_send_wr     (128) |  wr_id, opcode, rdma.remote_addr/rkey refilled per post
 *  +----------------------------+ 128
 *  | send ibv_sge[2]       (32) |  a frame's header and its payload, each from its own registration
 *  +----------------------------+ 160
 *  | recv ibv_recv_wr      (32) |
 *  +----------------------------+ 192
 *  | recv ibv_sge          (16) |
 *  +----------------------------+ 208
 *  | bad_wr out pointer     (8) |
 *  +----------------------------+ 216
 *  | cm id out pointer      (8) |
 *  +----------------------------+ 224
 *  | rdma_conn_param       (24) |
 *  +----------------------------+ 248
 *  | ibv_qp_init_attr      (64) |
 *  +----------------------------+ 312
 *  | sockaddr              (32) |
 *  +----------------------------+ 344
 *  | ibv_qp_attr          (144) |
 *  +----------------------------+ 512 (rounded to 64)
 *  | send ibv_wc[batch]         |
 *  +----------------------------+
 *  | recv ibv_wc[batch]         |
 *  +----------------------------+
 * </pre>
 */
public final class RdmaEndpoint implements AutoCloseable
{
    /**
     * Connection state. Transitions happen only inside calls on the endpoint.
     */
    public enum State
    {
        /** Client: waiting for RDMA_CM_EVENT_ADDR_RESOLVED. */
        RESOLVING_ADDRESS,
        /** Client: waiting for RDMA_CM_EVENT_ROUTE_RESOLVED. */
        RESOLVING_ROUTE,
        /** Client: rdma_connect sent, waiting for ESTABLISHED. */
        CONNECTING,
        /** Server: a connect request awaits {@link #accept(long, long)} or {@link #reject()}. */
        CONNECT_REQUESTED,
        /** Server: rdma_accept sent, waiting for ESTABLISHED. */
        ACCEPTING,
        /** Connected: data may flow. */
        ESTABLISHED,
        /** We called {@link #disconnect()}; waiting for RDMA_CM_EVENT_DISCONNECTED. */
        DISCONNECTING,
        /** The connection is down (either side disconnected or the peer died); posted work is flushed. */
        DISCONNECTED,
        /** Connection set-up failed or the device went away; see {@link #failure()}. */
        FAILED,
        /** {@link #close()} has released every resource. */
        CLOSED;

        /**
         * Whether the endpoint is still being connected.
         *
         * @return true for states that have a deadline.
         */
        public boolean isConnecting()
        {
            return this == RESOLVING_ADDRESS || this == RESOLVING_ROUTE || this == CONNECTING ||
                this == CONNECT_REQUESTED || this == ACCEPTING;
        }
    }

    /** Scatter-gather elements a send may gather: a frame header and a payload from another registration. */
    public static final int MAX_SEND_SGES = 2;
    private static final int SEND_WR_OFFSET = 0;
    private static final int SEND_SGE_OFFSET = SEND_WR_OFFSET + IbvSendWrDescriptor.LENGTH;
    private static final int RECV_WR_OFFSET = SEND_SGE_OFFSET + MAX_SEND_SGES * IbvSgeDescriptor.LENGTH;
    private static final int RECV_SGE_OFFSET = RECV_WR_OFFSET + IbvRecvWrDescriptor.LENGTH;
    private static final int BAD_WR_OFFSET = RECV_SGE_OFFSET + IbvSgeDescriptor.LENGTH;
    private static final int ID_OUT_OFFSET = BAD_WR_OFFSET + 8;
    private static final int CONN_PARAM_OFFSET = ID_OUT_OFFSET + 8;
    private static final int QP_INIT_ATTR_OFFSET = CONN_PARAM_OFFSET + RdmaConnParamDescriptor.LENGTH;
    private static final int SOCKADDR_OFFSET = QP_INIT_ATTR_OFFSET + IbvQpInitAttrDescriptor.LENGTH;
    private static final int QP_ATTR_OFFSET = SOCKADDR_OFFSET + 32;
    private static final int SEND_WC_OFFSET = align64(QP_ATTR_OFFSET + IbvQpAttrDescriptor.LENGTH);

    private static final int MAX_EVENTS_PER_POLL = 8;
    private static final int WAIT_POLLFDS = 3;
    private static final int WAIT_COUNTER_OFFSET = WAIT_POLLFDS * LibC.POLLFD_LENGTH;
    private static final int WAIT_CQ_OUT_OFFSET = WAIT_COUNTER_OFFSET + 8;
    private static final int WAIT_CONTEXT_OUT_OFFSET = WAIT_CQ_OUT_OFFSET + 8;
    private static final int WAIT_SCRATCH_LENGTH = WAIT_CONTEXT_OUT_OFFSET + 8;

    private final RdmaDevice device;
    private final CmEventChannel channel;
    private final UnsafeBuffer scratch;
    private final long scratchAddress;
    private final WorkCompletion completion;
    private final int sendQueueDepth;
    private final int receiveQueueDepth;
    private final int completionBatchLength;
    private final int recvWcOffset;
    private final int readDepth;
    private final int retryCount;
    private final int rnrRetryCount;
    private final int resolveTimeoutMs;
    private final InetSocketAddress remoteAddress;

    private long cmId;
    private long qp;
    private long sendCq;
    private long recvCq;
    private long completionChannel;
    private int completionFd = -1;
    private boolean sendCqArmed;
    private boolean recvCqArmed;
    /** pollfd[3] (completion channel, cm event channel, wake-up eventfd), the eventfd counter, get_cq_event outs. */
    private final UnsafeBuffer waitScratch =
        new UnsafeBuffer(BufferUtil.allocateDirectAligned(64, 64), 0, WAIT_SCRATCH_LENGTH);
    /** Guards the wake-up eventfd against a close racing a {@link #wakeup()} from another thread. */
    private final Object wakeLock = new Object();
    /** The eventfd increment, 1 in native order, set once: wakeup() runs on other threads, so it has its own buffer. */
    private final UnsafeBuffer wakeIncrement = new UnsafeBuffer(BufferUtil.allocateDirectAligned(64, 64), 0, 8);
    private int wakeFd = -1;
    private int localQpNumber;
    private int outstandingSends;
    private int outstandingReceives;
    private State state;
    private RdmaException failure;
    private long deadlineNs;
    private long connectTimeoutNs;
    private int peerInitiatorDepth;
    private int peerResponderResources;

    private RdmaEndpoint(
        final RdmaDevice device,
        final RdmaEndpointContext context,
        final CmEventChannel channel,
        final InetSocketAddress remoteAddress)
    {
        this.device = device;
        this.channel = channel;
        this.remoteAddress = remoteAddress;
        this.sendQueueDepth = context.sendQueueDepth();
        this.receiveQueueDepth = context.receiveQueueDepth();
        this.completionBatchLength = context.completionBatchLength();
        this.readDepth = context.readDepth();
        this.retryCount = context.retryCount();
        this.rnrRetryCount = context.rnrRetryCount();
        this.resolveTimeoutMs = context.resolveTimeoutMs();
        this.recvWcOffset = SEND_WC_OFFSET + completionBatchLength * IbvWcDescriptor.LENGTH;
        final int scratchLength = recvWcOffset + completionBatchLength * IbvWcDescriptor.LENGTH;
        this.scratch = new UnsafeBuffer(BufferUtil.allocateDirectAligned(align64(scratchLength), 64));
        this.scratchAddress = scratch.addressOffset();
        this.completion = new WorkCompletion(scratch);
        this.state = State.RESOLVING_ADDRESS;
        this.wakeIncrement.putLong(0, 1);
        prebuildWorkRequests();
    }

    /**
     * Start connecting to a listening peer. Returns at once with the queues created, so receives can be posted
     * before the connection can be established; drive it with {@link #pollEvents(long)}.
     *
     * @param device    local device; the connection originates from its address.
     * @param remote    peer address and port.
     * @param context   concluded settings.
     * @param nowNs     current time of the caller's nano clock.
     * @param timeoutNs time allowed until ESTABLISHED; after it the endpoint turns FAILED with ETIMEDOUT.
     * @return endpoint in state RESOLVING_ADDRESS.
     * @throws RdmaException if a verb fails at once; nothing is left allocated.
     */
    public static RdmaEndpoint connect(
        final RdmaDevice device,
        final InetSocketAddress remote,
        final RdmaEndpointContext context,
        final long nowNs,
        final long timeoutNs)
    {
        device.ensureOpen();
        final CmEventChannel channel = CmEventChannel.open("connection to " + remote);
        final RdmaEndpoint endpoint;
        try
        {
            endpoint = new RdmaEndpoint(device, context, channel, remote);
        }
        catch (final RuntimeException ex)
        {
            channel.close();
            throw ex;
        }

        try
        {
            endpoint.startConnect(remote, nowNs, timeoutNs);
        }
        catch (final RuntimeException ex)
        {
            RdmaDevice.closeQuietly(endpoint, ex);
            throw ex;
        }
        device.onOpened(endpoint);

        return endpoint;
    }

    /**
     * Take over the cm id of a connect request (called by {@link RdmaListener}). The id's events move to a
     * channel of its own so that endpoint and listener can be polled and closed independently.
     */
    static RdmaEndpoint accepted(
        final RdmaDevice device,
        final RdmaEndpointContext context,
        final long cmId,
        final int peerInitiatorDepth,
        final int peerResponderResources)
    {
        final InetSocketAddress remote = SockaddrDescriptor.read(cmId + RdmaCmIdDescriptor.ROUTE_ADDR_DST_ADDR_OFFSET);
        CmEventChannel channel = null;
        RdmaEndpoint endpoint = null;
        try
        {
            channel = CmEventChannel.open("connection from " + remote);
            endpoint = new RdmaEndpoint(device, context, channel, remote);
            if (0 != RdmaCm.rdma_migrate_id(cmId, channel.address()))
            {
                throw new RdmaException("rdma_migrate_id", Native.getLastError(), "connection from " + remote);
            }
            endpoint.cmId = cmId;
            endpoint.peerInitiatorDepth = peerInitiatorDepth;
            endpoint.peerResponderResources = peerResponderResources;
            endpoint.createQueues();
            // No deadline until accept(): how long a request may wait is the owner's decision.
            endpoint.state = State.CONNECT_REQUESTED;
        }
        catch (final RuntimeException ex)
        {
            // The request's id is ours whatever failed: reject it, so the requester fails at once instead of at
            // its connect timeout, and release it with whatever the endpoint had created.
            RdmaCm.rdma_reject(cmId, 0, (byte)0);
            if (null == endpoint || 0 == endpoint.cmId)
            {
                RdmaCm.rdma_destroy_id(cmId);
            }
            if (null != endpoint)
            {
                RdmaDevice.closeQuietly(endpoint, ex);
            }
            else if (null != channel)
            {
                channel.close();
            }
            throw ex;
        }
        device.onOpened(endpoint);

        return endpoint;
    }

    private void prebuildWorkRequests()
    {
        scratch.setMemory(0, SEND_WC_OFFSET, (byte)0);
        scratch.putLong(SEND_WR_OFFSET + IbvSendWrDescriptor.NEXT_OFFSET, 0);
        scratch.putLong(SEND_WR_OFFSET + IbvSendWrDescriptor.SG_LIST_OFFSET, scratchAddress + SEND_SGE_OFFSET);
        scratch.putInt(SEND_WR_OFFSET + IbvSendWrDescriptor.NUM_SGE_OFFSET, 1);
        scratch.putInt(SEND_WR_OFFSET + IbvSendWrDescriptor.SEND_FLAGS_OFFSET, IbVerbs.IBV_SEND_SIGNALED);
        scratch.putLong(RECV_WR_OFFSET + IbvRecvWrDescriptor.NEXT_OFFSET, 0);
        scratch.putLong(RECV_WR_OFFSET + IbvRecvWrDescriptor.SG_LIST_OFFSET, scratchAddress + RECV_SGE_OFFSET);
        scratch.putInt(RECV_WR_OFFSET + IbvRecvWrDescriptor.NUM_SGE_OFFSET, 1);
    }

    private void startConnect(final InetSocketAddress remote, final long nowNs, final long timeoutNs)
    {
        if (0 != RdmaCm.rdma_create_id(channel.address(), scratchAddress + ID_OUT_OFFSET, 0, RdmaCm.RDMA_PS_TCP))
        {
            throw new RdmaException("rdma_create_id", Native.getLastError(), "connection to " + remote);
        }
        cmId = scratch.getLong(ID_OUT_OFFSET);

        // Binding first ties the id to our device now, so the QP exists before the peer can be reached and the
        // caller can post receives right after connect() returns.
        SockaddrDescriptor.write(scratch, SOCKADDR_OFFSET, new InetSocketAddress(device.localAddress(), 0));
        if (0 != RdmaCm.rdma_bind_addr(cmId, scratchAddress + SOCKADDR_OFFSET))
        {
            throw new RdmaException("rdma_bind_addr", Native.getLastError(),
                "source " + device.localAddress().getHostAddress() + " for connection to " + remote);
        }
        createQueues();

        SockaddrDescriptor.write(scratch, SOCKADDR_OFFSET, remote);
        if (0 != RdmaCm.rdma_resolve_addr(cmId, 0, scratchAddress + SOCKADDR_OFFSET, resolveTimeoutMs))
        {
            throw new RdmaException("rdma_resolve_addr", Native.getLastError(), "connection to " + remote);
        }
        state = State.RESOLVING_ADDRESS;
        connectTimeoutNs = timeoutNs;
        deadlineNs = nowNs + timeoutNs;
    }

    private void createQueues()
    {
        final long verbs = cmIdVerbs();
        if (verbs != device.context())
        {
            throw new RdmaException("rdma_create_qp", Errno.EINVAL, "connection " + remoteAddress +
                " is on another RDMA device than " + device.name() + " (context 0x" + Long.toHexString(verbs) + ")");
        }

        completionChannel = IbVerbs.ibv_create_comp_channel(verbs);
        if (0 == completionChannel)
        {
            throw new RdmaException("ibv_create_comp_channel", Native.getLastError(), "for " + remoteAddress);
        }
        completionFd = new UnsafeBuffer(completionChannel, IbvCompChannelDescriptor.LENGTH)
            .getInt(IbvCompChannelDescriptor.FD_OFFSET);
        LibC.setNonBlocking(completionFd, "completion channel for " + remoteAddress);
        final int eventFd = LibC.eventfd(0, LibC.EFD_NONBLOCK | LibC.EFD_CLOEXEC);
        if (eventFd < 0)
        {
            throw new RdmaException("eventfd", Native.getLastError(), "wake-up of the connection to " + remoteAddress);
        }
        synchronized (wakeLock)
        {
            wakeFd = eventFd;
        }
        sendCq = IbVerbs.ibv_create_cq(verbs, sendQueueDepth, 0, completionChannel, 0);
        if (0 == sendCq)
        {
            throw new RdmaException("ibv_create_cq", Native.getLastError(), sendQueueDepth + " send entries");
        }
        recvCq = IbVerbs.ibv_create_cq(verbs, receiveQueueDepth, 0, completionChannel, 0);
        if (0 == recvCq)
        {
            throw new RdmaException("ibv_create_cq", Native.getLastError(), receiveQueueDepth + " receive entries");
        }

        final int attr = QP_INIT_ATTR_OFFSET;
        scratch.setMemory(attr, IbvQpInitAttrDescriptor.LENGTH, (byte)0);
        scratch.putLong(attr + IbvQpInitAttrDescriptor.SEND_CQ_OFFSET, sendCq);
        scratch.putLong(attr + IbvQpInitAttrDescriptor.RECV_CQ_OFFSET, recvCq);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.CAP_MAX_SEND_WR_OFFSET, sendQueueDepth);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.CAP_MAX_RECV_WR_OFFSET, receiveQueueDepth);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.CAP_MAX_SEND_SGE_OFFSET, MAX_SEND_SGES);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.CAP_MAX_RECV_SGE_OFFSET, 1);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.QP_TYPE_OFFSET, IbvQpInitAttrDescriptor.IBV_QPT_RC);
        scratch.putInt(attr + IbvQpInitAttrDescriptor.SQ_SIG_ALL_OFFSET, 0);
        if (0 != RdmaCm.rdma_create_qp(cmId, device.protectionDomain(), scratchAddress + attr))
        {
            throw new RdmaException("rdma_create_qp", Native.getLastError(), "RC QP with " + sendQueueDepth +
                " send and " + receiveQueueDepth + " receive work requests on " + device.name());
        }
        qp = new UnsafeBuffer(cmId, RdmaCmIdDescriptor.LENGTH).getLong(RdmaCmIdDescriptor.QP_OFFSET);
        localQpNumber = new UnsafeBuffer(qp, IbvQpDescriptor.LENGTH).getInt(IbvQpDescriptor.QP_NUM_OFFSET);
    }

    private long cmIdVerbs()
    {
        return new UnsafeBuffer(cmId, RdmaCmIdDescriptor.LENGTH).getLong(RdmaCmIdDescriptor.VERBS_OFFSET);
    }

    private void fillConnParam()
    {
        final int param = CONN_PARAM_OFFSET;
        scratch.setMemory(param, RdmaConnParamDescriptor.LENGTH, (byte)0);
        int responderResources = Math.min(readDepth, device.maxReadResponderResources());
        int initiatorDepth = Math.min(readDepth, device.maxReadInitiatorDepth());
        if (State.CONNECT_REQUESTED == state)
        {
            // Never promise more than the requester asked for: its initiator depth bounds our responder resources.
            responderResources = Math.min(responderResources, peerInitiatorDepth);
            initiatorDepth = Math.min(initiatorDepth, peerResponderResources);
        }
        scratch.putByte(param + RdmaConnParamDescriptor.RESPONDER_RESOURCES_OFFSET, (byte)responderResources);
        scratch.putByte(param + RdmaConnParamDescriptor.INITIATOR_DEPTH_OFFSET, (byte)initiatorDepth);
        scratch.putByte(param + RdmaConnParamDescriptor.RETRY_COUNT_OFFSET, (byte)retryCount);
        scratch.putByte(param + RdmaConnParamDescriptor.RNR_RETRY_COUNT_OFFSET, (byte)rnrRetryCount);
    }

    /**
     * Accept a connect request after the initial receives have been posted.
     *
     * @param nowNs     current time of the caller's nano clock.
     * @param timeoutNs time allowed until ESTABLISHED.
     * @throws IllegalStateException unless in CONNECT_REQUESTED.
     * @throws RdmaException         if rdma_accept fails; the endpoint is then FAILED.
     */
    public void accept(final long nowNs, final long timeoutNs)
    {
        requireState(State.CONNECT_REQUESTED, "accept");
        fillConnParam();
        if (0 != RdmaCm.rdma_accept(cmId, scratchAddress + CONN_PARAM_OFFSET))
        {
            throw fail(new RdmaException("rdma_accept", Native.getLastError(), "connection from " + remoteAddress));
        }
        state = State.ACCEPTING;
        connectTimeoutNs = timeoutNs;
        deadlineNs = nowNs + timeoutNs;
    }

    /**
     * Reject a connect request; the endpoint turns FAILED and should be closed.
     *
     * @throws IllegalStateException unless in CONNECT_REQUESTED.
     */
    public void reject()
    {
        requireState(State.CONNECT_REQUESTED, "reject");
        final int result = RdmaCm.rdma_reject(cmId, 0, (byte)0);
        final int errno = 0 != result ? Native.getLastError() : Errno.ECONNREFUSED;
        fail(new RdmaException("rdma_reject", errno, "rejected connection from " + remoteAddress));
    }

    private void requireState(final State required, final String operation)
    {
        if (required != state)
        {
            throw new IllegalStateException(operation + " needs state " + required + " but endpoint is " + state);
        }
    }

    /**
     * Process pending rdma_cm events (at most a few per call) and enforce the connect deadline. Costs one system
     * call when nothing is pending; call it from the duty cycle at a rate that suits connection management.
     *
     * @param nowNs current time of the caller's nano clock.
     * @return number of events processed.
     */
    public int pollEvents(final long nowNs)
    {
        if (State.CLOSED == state)
        {
            return 0;
        }

        int events = 0;
        while (events < MAX_EVENTS_PER_POLL && channel.poll())
        {
            events++;
            onEvent(channel.eventType(), channel.eventStatus());
        }

        if (state.isConnecting() && State.CONNECT_REQUESTED != state && nowNs - deadlineNs > 0)
        {
            fail(new RdmaException("rdma_cm", Errno.ETIMEDOUT, "connection " + remoteAddress + " not established " +
                "within " + connectTimeoutNs / 1_000_000 + " ms (state " + state + ")"));
        }

        return events;
    }

    private void onEvent(final RdmaCmEventType type, final int status)
    {
        switch (type)
        {
            case ADDR_RESOLVED:
                if (State.RESOLVING_ADDRESS == state)
                {
                    if (0 != RdmaCm.rdma_resolve_route(cmId, resolveTimeoutMs))
                    {
                        fail(new RdmaException("rdma_resolve_route", Native.getLastError(), "to " + remoteAddress));
                    }
                    else
                    {
                        state = State.RESOLVING_ROUTE;
                    }
                }
                break;

            case ROUTE_RESOLVED:
                if (State.RESOLVING_ROUTE == state)
                {
                    fillConnParam();
                    if (0 != RdmaCm.rdma_connect(cmId, scratchAddress + CONN_PARAM_OFFSET))
                    {
                        fail(new RdmaException("rdma_connect", Native.getLastError(), "to " + remoteAddress));
                    }
                    else
                    {
                        state = State.CONNECTING;
                    }
                }
                break;

            case ESTABLISHED:
                if (State.CONNECTING == state || State.ACCEPTING == state)
                {
                    state = State.ESTABLISHED;
                }
                break;

            case DISCONNECTED:
                // Acknowledge the peer's disconnect (sends the DREP on IB), then force the QP into the error
                // state: a graceful iWARP close leaves it idle with requests in flight that would never complete,
                // and the owner needs every buffer back as a (flushed) completion. Also after a failure.
                RdmaCm.rdma_disconnect(cmId);
                flushQueuePair();
                if (State.FAILED != state)
                {
                    state = State.DISCONNECTED;
                }
                break;

            case ADDR_ERROR:
            case ROUTE_ERROR:
            case CONNECT_ERROR:
            case UNREACHABLE:
            case REJECTED:
            case DEVICE_REMOVAL:
                fail(eventFailure(type, status));
                // Return posted receives (and anything else outstanding) as flushed completions.
                flushQueuePair();
                break;

            default:
                // CONNECT_RESPONSE (only for ids without a QP), TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do.
                break;
        }
    }

    private void flushQueuePair()
    {
        if (0 != qp)
        {
            scratch.setMemory(QP_ATTR_OFFSET, IbvQpAttrDescriptor.LENGTH, (byte)0);
            scratch.putInt(QP_ATTR_OFFSET + IbvQpAttrDescriptor.QP_STATE_OFFSET, IbvQpAttrDescriptor.IBV_QPS_ERR);
            final int result = IbVerbs.ibv_modify_qp(qp, scratchAddress + QP_ATTR_OFFSET,
                IbvQpAttrDescriptor.IBV_QP_STATE);
            if (0 != result)
            {
                fail(new RdmaException("ibv_modify_qp", result, "IBV_QPS_ERR to flush endpoint " + remoteAddress));
            }
        }
    }

    private RdmaException eventFailure(final RdmaCmEventType type, final int status)
    {
        // Negative statuses are -errno; positive ones are transport reasons (e.g. IB CM reject reason 8 = no
        // listener on that port, 28 = consumer reject).
        final int errno = status < 0 ? -status : 0;
        final String reason = status < 0 ? "" : " (transport status " + status + ")";
        return new RdmaException(type.cName(), errno, "connection " + remoteAddress + " in state " + state + reason);
    }

    private RdmaException fail(final RdmaException ex)
    {
        if (null == failure)
        {
            failure = ex;
        }
        state = State.FAILED;
        return ex;
    }

    /**
     * Start an orderly disconnect: posted work is flushed and completes with IBV_WC_WR_FLUSH_ERR; the state
     * becomes DISCONNECTED when rdma_cm confirms. Does not wait. A no-op unless connecting or connected.
     */
    public void disconnect()
    {
        if (State.ESTABLISHED == state || State.CONNECTING == state || State.ACCEPTING == state)
        {
            if (0 == RdmaCm.rdma_disconnect(cmId))
            {
                state = State.DISCONNECTING;
            }
            else
            {
                // Not connected after all (e.g. the peer just went away): no event will come, flush now.
                flushQueuePair();
                state = State.FAILED == state ? State.FAILED : State.DISCONNECTED;
            }
        }
    }

    /**
     * Post a receive into {@code memory[offset, offset + length)}.
     *
     * @param memory registered memory on this endpoint's device.
     * @param offset from the start of the memory.
     * @param length capacity for the incoming message.
     * @param wrId   returned in the completion.
     * @return false if {@code receiveQueueDepth} receives are already posted.
     * @throws IllegalStateException unless connecting or ESTABLISHED.
     * @throws RdmaException         if ibv_post_recv fails; the endpoint is then FAILED.
     */
    public boolean postReceive(final RegisteredMemory memory, final int offset, final int length, final long wrId)
    {
        ensureQueuePair();
        if (!state.isConnecting() && State.ESTABLISHED != state)
        {
            throw new IllegalStateException("cannot post a receive on endpoint " + remoteAddress + " in state " +
                state);
        }
        if (outstandingReceives >= receiveQueueDepth)
        {
            return false;
        }
        checkBounds(memory, offset, length);

        scratch.putLong(RECV_WR_OFFSET + IbvRecvWrDescriptor.WR_ID_OFFSET, wrId);
        scratch.putLong(RECV_SGE_OFFSET + IbvSgeDescriptor.ADDR_OFFSET, memory.address() + offset);
        scratch.putInt(RECV_SGE_OFFSET + IbvSgeDescriptor.LENGTH_OFFSET, length);
        scratch.putInt(RECV_SGE_OFFSET + IbvSgeDescriptor.LKEY_OFFSET, memory.lkey());
        final int result = IbVerbs.ibv_post_recv(qp, scratchAddress + RECV_WR_OFFSET, scratchAddress + BAD_WR_OFFSET);
        if (0 != result)
        {
            throw fail(new RdmaException("ibv_post_recv", result, "endpoint " + remoteAddress + " state " + state));
        }
        outstandingReceives++;

        return true;
    }

    /**
     * Post a SEND of {@code memory[offset, offset + length)}; it consumes one receive at the peer.
     *
     * @param memory registered memory on this endpoint's device.
     * @param offset from the start of the memory.
     * @param length bytes to send.
     * @param wrId   returned in the completion.
     * @return false if the send queue is full.
     * @throws IllegalStateException unless ESTABLISHED.
     * @throws RdmaException         if ibv_post_send fails; the endpoint is then FAILED and should be closed (the
     *                               request may still complete, flushed: siw queues before it rings the doorbell).
     */
    public boolean postSend(final RegisteredMemory memory, final int offset, final int length, final long wrId)
    {
        return postSendQueue(IbvSendWrDescriptor.IBV_WR_SEND, memory, offset, length, 0, 0, wrId, 1);
    }

    /**
     * Post a SEND that gathers {@code first[firstOffset, +firstLength)} and then
     * {@code second[secondOffset, +secondLength)} into one message: a frame header from a small buffer and its
     * payload straight from where it lies (a slab slot), with no copy. It consumes one receive at the peer.
     *
     * @param first        registered memory of the first part.
     * @param firstOffset  from the start of that memory.
     * @param firstLength  bytes of the first part.
     * @param second       registered memory of the second part (may be the same registration).
     * @param secondOffset from the start of that memory.
     * @param secondLength bytes of the second part; 0 sends the first part alone.
     * @param wrId         returned in the completion.
     * @return false if the send queue is full.
     * @throws IllegalStateException unless ESTABLISHED.
     * @throws RdmaException         if ibv_post_send fails; the endpoint is then FAILED.
     */
    public boolean postSend(
        final RegisteredMemory first,
        final int firstOffset,
        final int firstLength,
        final RegisteredMemory second,
        final int secondOffset,
        final int secondLength,
        final long wrId)
    {
        if (0 == secondLength)
        {
            return postSend(first, firstOffset, firstLength, wrId);
        }
        checkBounds(second, secondOffset, secondLength);
        final int sge = SEND_SGE_OFFSET + IbvSgeDescriptor.LENGTH;
        scratch.putLong(sge + IbvSgeDescriptor.ADDR_OFFSET, second.address() + secondOffset);
        scratch.putInt(sge + IbvSgeDescriptor.LENGTH_OFFSET, secondLength);
        scratch.putInt(sge + IbvSgeDescriptor.LKEY_OFFSET, second.lkey());
        return postSendQueue(IbvSendWrDescriptor.IBV_WR_SEND, first, firstOffset, firstLength, 0, 0, wrId,
            MAX_SEND_SGES);
    }

    /**
     * Post an RDMA WRITE of {@code memory[offset, offset + length)} to the peer's {@code remoteAddress} under
     * {@code remoteKey}. The peer sees no completion: follow it with a SEND to tell it (RC keeps the order).
     *
     * @param memory        registered local source.
     * @param offset        from the start of the memory.
     * @param length        bytes.
     * @param remoteAddress peer virtual address, as advertised by the peer.
     * @param remoteKey     peer rkey of that memory.
     * @param wrId          returned in the completion.
     * @return false if the send queue is full.
     * @throws RdmaException if ibv_post_send fails.
     */
    public boolean postWrite(
        final RegisteredMemory memory,
        final int offset,
        final int length,
        final long remoteAddress,
        final int remoteKey,
        final long wrId)
    {
        return postSendQueue(IbvSendWrDescriptor.IBV_WR_RDMA_WRITE, memory, offset, length, remoteAddress, remoteKey,
            wrId, 1);
    }

    /**
     * Post an RDMA READ from the peer's {@code remoteAddress} into {@code memory[offset, offset + length)}. Needs
     * a non-zero {@link RdmaEndpointContext#readDepth()}.
     *
     * @param memory        registered local sink (registered with REMOTE_WRITE, as iWARP requires).
     * @param offset        from the start of the memory.
     * @param length        bytes.
     * @param remoteAddress peer virtual address, as advertised by the peer.
     * @param remoteKey     peer rkey of that memory.
     * @param wrId          returned in the completion.
     * @return false if the send queue is full.
     * @throws RdmaException if ibv_post_send fails.
     */
    public boolean postRead(
        final RegisteredMemory memory,
        final int offset,
        final int length,
        final long remoteAddress,
        final int remoteKey,
        final long wrId)
    {
        return postSendQueue(IbvSendWrDescriptor.IBV_WR_RDMA_READ, memory, offset, length, remoteAddress, remoteKey,
            wrId, 1);
    }

    private boolean postSendQueue(
        final int opcode,
        final RegisteredMemory memory,
        final int offset,
        final int length,
        final long remoteAddress,
        final int remoteKey,
        final long wrId,
        final int sgeCount)
    {
        ensureQueuePair();
        if (State.ESTABLISHED != state)
        {
            throw new IllegalStateException("cannot post to the send queue of endpoint " + this.remoteAddress +
                " in state " + state);
        }
        if (outstandingSends >= sendQueueDepth)
        {
            return false;
        }
        checkBounds(memory, offset, length);

        scratch.putLong(SEND_WR_OFFSET + IbvSendWrDescriptor.WR_ID_OFFSET, wrId);
        scratch.putInt(SEND_WR_OFFSET + IbvSendWrDescriptor.OPCODE_OFFSET, opcode);
        scratch.putInt(SEND_WR_OFFSET + IbvSendWrDescriptor.NUM_SGE_OFFSET, sgeCount);
        scratch.putLong(SEND_WR_OFFSET + IbvSendWrDescriptor.RDMA_REMOTE_ADDR_OFFSET, remoteAddress);
        scratch.putInt(SEND_WR_OFFSET + IbvSendWrDescriptor.RDMA_RKEY_OFFSET, remoteKey);
        scratch.putLong(SEND_SGE_OFFSET + IbvSgeDescriptor.ADDR_OFFSET, memory.address() + offset);
        scratch.putInt(SEND_SGE_OFFSET + IbvSgeDescriptor.LENGTH_OFFSET, length);
        scratch.putInt(SEND_SGE_OFFSET + IbvSgeDescriptor.LKEY_OFFSET, memory.lkey());
        final int result = IbVerbs.ibv_post_send(qp, scratchAddress + SEND_WR_OFFSET, scratchAddress + BAD_WR_OFFSET);
        if (0 != result)
        {
            throw fail(new RdmaException("ibv_post_send", result, "endpoint " + this.remoteAddress + " state " +
                state));
        }
        outstandingSends++;

        return true;
    }

    private void ensureQueuePair()
    {
        if (0 == qp)
        {
            throw new IllegalStateException("endpoint " + remoteAddress + " has no queue pair (state " + state + ")");
        }
    }

    private void checkBounds(final RegisteredMemory memory, final int offset, final int length)
    {
        if (offset < 0 || length < 0 || offset > memory.length() - length)
        {
            throw new IndexOutOfBoundsException("offset=" + offset + " length=" + length + " outside " + memory);
        }
        if (memory.isClosed() || memory.device() != device)
        {
            throw new IllegalArgumentException("memory not registered on " + device.name() + ": " + memory);
        }
    }

    /**
     * Take up to {@link RdmaEndpointContext#completionBatchLength()} completions from each of the send and the
     * receive completion queue and hand them to {@code handler}. Busy-poll from the duty cycle: one call into
     * the provider per queue, no system call on rxe/siw/mlx5, no allocation.
     *
     * @param handler receives each completion.
     * @return completions handled.
     * @throws RdmaException if ibv_poll_cq fails.
     */
    public int pollCompletions(final CompletionHandler handler)
    {
        ensureQueuePair();
        final int sends = IbVerbs.ibv_poll_cq(sendCq, completionBatchLength, scratchAddress + SEND_WC_OFFSET);
        if (sends < 0)
        {
            throw new RdmaException("ibv_poll_cq", -sends, "send completion queue of " + remoteAddress);
        }
        // Clamped: a provider may complete a request whose post reported an error (siw rings the doorbell after
        // queueing), so the counts must never go negative and let the queues overflow.
        outstandingSends = Math.max(0, outstandingSends - sends);
        for (int i = 0; i < sends; i++)
        {
            handler.onCompletion(completion.wrap(SEND_WC_OFFSET + i * IbvWcDescriptor.LENGTH, false));
        }

        final int receives = IbVerbs.ibv_poll_cq(recvCq, completionBatchLength, scratchAddress + recvWcOffset);
        if (receives < 0)
        {
            throw new RdmaException("ibv_poll_cq", -receives, "receive completion queue of " + remoteAddress);
        }
        outstandingReceives = Math.max(0, outstandingReceives - receives);
        for (int i = 0; i < receives; i++)
        {
            handler.onCompletion(completion.wrap(recvWcOffset + i * IbvWcDescriptor.LENGTH, true));
        }

        return sends + receives;
    }

    /**
     * Asks both completion queues to signal their next completion on the completion channel (each once per event
     * taken by {@link #awaitEvents(int)}). Completions already queued raise no event: poll once more after this,
     * and wait only if that found nothing.
     *
     * @throws RdmaException if the provider refuses.
     */
    public void armCompletionEvents()
    {
        ensureQueuePair();
        if (!sendCqArmed)
        {
            final int result = IbVerbs.ibv_req_notify_cq(sendCq, 0);
            if (0 != result)
            {
                throw new RdmaException("ibv_req_notify_cq", result, "send completion queue of " + remoteAddress);
            }
            sendCqArmed = true;
        }
        if (!recvCqArmed)
        {
            final int result = IbVerbs.ibv_req_notify_cq(recvCq, 0);
            if (0 != result)
            {
                throw new RdmaException("ibv_req_notify_cq", result, "receive completion queue of " + remoteAddress);
            }
            recvCqArmed = true;
        }
    }

    /**
     * @return whether both completion queues are armed (tests: an event taken disarms its queue).
     */
    boolean completionEventsArmed()
    {
        return sendCqArmed && recvCqArmed;
    }

    /**
     * Blocks until an armed completion queue signals, a connection event is pending, {@link #wakeup()} is called,
     * or {@code timeoutMs} passes; then takes (and acknowledges) the completion events, so the queues that
     * signalled need arming again. Completions themselves are still taken with {@link #pollCompletions}.
     * Allocates nothing.
     *
     * @param timeoutMs longest wait; 0 only takes what is pending.
     * @throws RdmaException if poll or ibv_get_cq_event fails.
     */
    public void awaitEvents(final int timeoutMs)
    {
        ensureQueuePair();
        final long fds = waitScratch.addressOffset();
        putPollFd(0, completionFd);
        putPollFd(1, channel.fd());
        putPollFd(2, wakeFd);
        final int ready = LibC.poll(fds, WAIT_POLLFDS, timeoutMs);
        if (ready < 0)
        {
            final int errno = Native.getLastError();
            if (Errno.EINTR != errno)
            {
                throw new RdmaException("poll", errno, "completion channel of " + remoteAddress);
            }
            return;
        }
        if (0 != (waitScratch.getShort(2 * LibC.POLLFD_LENGTH + LibC.POLLFD_REVENTS_OFFSET) & LibC.POLLIN))
        {
            LibC.read(wakeFd, fds + WAIT_COUNTER_OFFSET, 8); // Resets the counter; EAGAIN if another took it.
        }
        takeCompletionEvents();
    }

    private void putPollFd(final int index, final int fd)
    {
        final int offset = index * LibC.POLLFD_LENGTH;
        waitScratch.putInt(offset, fd);
        waitScratch.putShort(offset + LibC.POLLFD_EVENTS_OFFSET, (short)LibC.POLLIN);
        waitScratch.putShort(offset + LibC.POLLFD_REVENTS_OFFSET, (short)0);
    }

    private void takeCompletionEvents()
    {
        final long cqOut = waitScratch.addressOffset() + WAIT_CQ_OUT_OFFSET;
        final long contextOut = waitScratch.addressOffset() + WAIT_CONTEXT_OUT_OFFSET;
        while (0 == IbVerbs.ibv_get_cq_event(completionChannel, cqOut, contextOut))
        {
            final long cq = waitScratch.getLong(WAIT_CQ_OUT_OFFSET);
            // Acknowledged at once: ibv_destroy_cq waits for every event taken to be acknowledged.
            IbVerbs.ibv_ack_cq_events(cq, 1);
            if (cq == sendCq)
            {
                sendCqArmed = false;
            }
            else if (cq == recvCq)
            {
                recvCqArmed = false;
            }
        }
        final int errno = Native.getLastError();
        if (Errno.EAGAIN != errno)
        {
            throw new RdmaException("ibv_get_cq_event", errno, "completion channel of " + remoteAddress);
        }
    }

    /**
     * Any thread: ends the owner's current or next {@link #awaitEvents(int)} at once. One system call.
     */
    public void wakeup()
    {
        synchronized (wakeLock)
        {
            if (wakeFd >= 0)
            {
                LibC.write(wakeFd, wakeIncrement.addressOffset(), 8);
            }
        }
    }

    /**
     * Release QP, completion queues, cm id and event channel, in that order, whatever the state. Never waits for
     * the peer: destroying a connected id makes the kernel abort the connection. Posted work is discarded
     * without completions. Idempotent.
     *
     * @throws RdmaException after releasing everything, if a destroy call reported an error.
     */
    public void close()
    {
        if (State.CLOSED == state)
        {
            return;
        }
        final State previous = state;
        state = State.CLOSED;

        RdmaException error = null;
        if (State.ESTABLISHED == previous || State.ACCEPTING == previous || State.CONNECTING == previous)
        {
            // Tell the peer before the QP goes away: otherwise, on iWARP, it only learns of the loss from TCP
            // timeouts. rdma_disconnect does not wait; its result does not matter as everything is released next.
            RdmaCm.rdma_disconnect(cmId);
        }
        if (0 != qp)
        {
            RdmaCm.rdma_destroy_qp(cmId);
            qp = 0;
        }
        if (0 != sendCq)
        {
            final int result = IbVerbs.ibv_destroy_cq(sendCq);
            sendCq = 0;
            error = firstError(error, result, "ibv_destroy_cq", "send completion queue");
        }
        if (0 != recvCq)
        {
            final int result = IbVerbs.ibv_destroy_cq(recvCq);
            recvCq = 0;
            error = firstError(error, result, "ibv_destroy_cq", "receive completion queue");
        }
        if (0 != completionChannel)
        {
            // After the queues that report to it; every event taken was acknowledged when taken.
            final int result = IbVerbs.ibv_destroy_comp_channel(completionChannel);
            completionChannel = 0;
            completionFd = -1;
            error = firstError(error, result, "ibv_destroy_comp_channel", "completion channel");
        }
        synchronized (wakeLock)
        {
            if (wakeFd >= 0)
            {
                LibC.close(wakeFd);
                wakeFd = -1;
            }
        }
        if (0 != cmId)
        {
            final int result = RdmaCm.rdma_destroy_id(cmId);
            cmId = 0;
            error = firstError(error, 0 != result ? Native.getLastError() : 0, "rdma_destroy_id", "connection id");
        }
        channel.close();
        outstandingSends = 0;
        outstandingReceives = 0;
        device.onClosed(this);

        if (null != error)
        {
            throw error;
        }
    }

    private RdmaException firstError(
        final RdmaException error, final int errno, final String function, final String what)
    {
        if (0 == errno || null != error)
        {
            return error;
        }

        return new RdmaException(function, errno, what + " of endpoint " + remoteAddress);
    }

    /**
     * Current state.
     *
     * @return state.
     */
    public State state()
    {
        return state;
    }

    /**
     * Whether data may flow.
     *
     * @return true in ESTABLISHED.
     */
    public boolean isEstablished()
    {
        return State.ESTABLISHED == state;
    }

    /**
     * Why the endpoint failed.
     *
     * @return the first failure, or null.
     */
    public RdmaException failure()
    {
        return failure;
    }

    /**
     * The peer: as given to {@link #connect}, or the requester's address for accepted endpoints.
     *
     * @return peer address.
     */
    public InetSocketAddress remoteAddress()
    {
        return remoteAddress;
    }

    /**
     * The device this endpoint's queues live on.
     *
     * @return device.
     */
    public RdmaDevice device()
    {
        return device;
    }

    /**
     * Local queue pair number, for logs.
     *
     * @return qp_num.
     */
    public int localQpNumber()
    {
        return localQpNumber;
    }

    /**
     * SEND/WRITE/READ requests posted and not yet completed.
     *
     * @return count.
     */
    public int outstandingSends()
    {
        return outstandingSends;
    }

    /**
     * Receives posted and not yet completed.
     *
     * @return count.
     */
    public int outstandingReceives()
    {
        return outstandingReceives;
    }

    /**
     * Capacity of the send queue.
     *
     * @return work requests.
     */
    public int sendQueueDepth()
    {
        return sendQueueDepth;
    }

    /**
     * Capacity of the receive queue.
     *
     * @return work requests.
     */
    public int receiveQueueDepth()
    {
        return receiveQueueDepth;
    }

    public String toString()
    {
        return "RdmaEndpoint{" + device.name() + " qp=" + localQpNumber + " peer=" + remoteAddress + " state=" +
            state + '}';
    }

    private static int align64(final int value)
    {
        return (value + 63) & ~63;
    }
}
