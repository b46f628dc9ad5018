package io.blockmover.rdma;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import com.sun.jna.Native;
import io.blockmover.rdma.verbs.Errno;
import io.blockmover.rdma.verbs.IbVerbs;
import io.blockmover.rdma.verbs.IbvContextDescriptor;
import io.blockmover.rdma.verbs.IbvDeviceAttrDescriptor;
import io.blockmover.rdma.verbs.IbvMrDescriptor;
import io.blockmover.rdma.verbs.RdmaCm;
import io.blockmover.rdma.verbs.RdmaCmIdDescriptor;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.rdma.verbs.RdmaUnavailableException;
import io.blockmover.rdma.verbs.SockaddrDescriptor;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * The RDMA device that owns a local IP address, with one protection domain for all memory and queue pairs on it.
 * <p>
 * Opened by address because that is how rdma_cm routes: a cm id bound to the address yields the device context
 * librdmacm itself uses for every connection through that address. An anchor cm id stays bound for the life of
 * this object so that librdmacm keeps the device referenced.
 * <p>
 * Owns the {@link RegisteredMemory}, {@link RdmaListener} and {@link RdmaEndpoint} objects created on it and
 * releases any still open when closed, endpoints first, so that nothing leaks.
 * <p>
 * Threading: one thread at a time (the conductor): open, register, create listeners/endpoints and close.
 */
public final class RdmaDevice implements AutoCloseable
{
    /** Access for every registration: usable as source and sink of SEND/RECV, WRITE and READ. */
    public static final int REGISTRATION_ACCESS = IbvMrDescriptor.IBV_ACCESS_LOCAL_WRITE |
        IbvMrDescriptor.IBV_ACCESS_REMOTE_WRITE | IbvMrDescriptor.IBV_ACCESS_REMOTE_READ;

    private final InetAddress localAddress;
    private final String name;
    private final long context;
    private long protectionDomain;
    private CmEventChannel anchorChannel;
    private long anchorId;

    private final int maxQpWr;
    private final int maxSge;
    private final int maxCqe;
    private final int maxQpRdAtom;
    private final int maxQpInitRdAtom;
    private final long maxMrSize;

    private final List<RegisteredMemory> registrations = new ArrayList<>();
    private final List<AutoCloseable> connections = new ArrayList<>();

    private RdmaDevice(
        final InetAddress localAddress,
        final CmEventChannel anchorChannel,
        final long anchorId,
        final long context,
        final long protectionDomain,
        final UnsafeBuffer deviceAttr)
    {
        this.localAddress = localAddress;
        this.anchorChannel = anchorChannel;
        this.anchorId = anchorId;
        this.context = context;
        this.protectionDomain = protectionDomain;
        final long device = new UnsafeBuffer(context, IbvContextDescriptor.LENGTH)
            .getLong(IbvContextDescriptor.DEVICE_OFFSET);
        this.name = IbVerbs.ibv_get_device_name(device);
        this.maxQpWr = deviceAttr.getInt(IbvDeviceAttrDescriptor.MAX_QP_WR_OFFSET);
        this.maxSge = deviceAttr.getInt(IbvDeviceAttrDescriptor.MAX_SGE_OFFSET);
        this.maxCqe = deviceAttr.getInt(IbvDeviceAttrDescriptor.MAX_CQE_OFFSET);
        this.maxQpRdAtom = deviceAttr.getInt(IbvDeviceAttrDescriptor.MAX_QP_RD_ATOM_OFFSET);
        this.maxQpInitRdAtom = deviceAttr.getInt(IbvDeviceAttrDescriptor.MAX_QP_INIT_RD_ATOM_OFFSET);
        this.maxMrSize = deviceAttr.getLong(IbvDeviceAttrDescriptor.MAX_MR_SIZE_OFFSET);
    }

    /**
     * Open the RDMA device behind a local IP address and allocate its protection domain.
     *
     * @param localAddress an address configured on an RDMA-capable netdev (for rxe/siw: the netdev they are
     *                     linked to).
     * @return the device.
     * @throws RdmaUnavailableException if the host has no RDMA kernel support, device or libraries.
     * @throws RdmaException            if the address is not on an RDMA device or a verb fails.
     */
    public static RdmaDevice open(final InetAddress localAddress)
    {
        ensureLibrariesLoaded();
        final CmEventChannel channel = CmEventChannel.open("the device that owns " + localAddress.getHostAddress());
        long id = 0;
        long pd = 0;
        try
        {
            final UnsafeBuffer scratch = new UnsafeBuffer(BufferUtil.allocateDirectAligned(
                IbvDeviceAttrDescriptor.LENGTH + 64, 64));
            if (0 != RdmaCm.rdma_create_id(channel.address(), scratch.addressOffset(), 0, RdmaCm.RDMA_PS_TCP))
            {
                throw new RdmaException("rdma_create_id", Native.getLastError(), "anchor id for " + localAddress);
            }
            id = scratch.getLong(0);

            SockaddrDescriptor.write(scratch, 0, new InetSocketAddress(localAddress, 0));
            if (0 != RdmaCm.rdma_bind_addr(id, scratch.addressOffset()))
            {
                final int errno = Native.getLastError();
                throw new RdmaException("rdma_bind_addr", errno, bindFailureDetail(localAddress, errno));
            }

            final long context = new UnsafeBuffer(id, RdmaCmIdDescriptor.LENGTH)
                .getLong(RdmaCmIdDescriptor.VERBS_OFFSET);
            if (0 == context)
            {
                throw new RdmaException("rdma_bind_addr", Errno.ENODEV, bindFailureDetail(localAddress, Errno.ENODEV));
            }

            pd = IbVerbs.ibv_alloc_pd(context);
            if (0 == pd)
            {
                throw new RdmaException("ibv_alloc_pd", Native.getLastError(), "device of " + localAddress);
            }

            scratch.setMemory(0, IbvDeviceAttrDescriptor.LENGTH, (byte)0);
            final int result = IbVerbs.ibv_query_device(context, scratch.addressOffset());
            if (0 != result)
            {
                throw new RdmaException("ibv_query_device", result, "device of " + localAddress);
            }

            return new RdmaDevice(localAddress, channel, id, context, pd, scratch);
        }
        catch (final RuntimeException ex)
        {
            if (0 != pd)
            {
                IbVerbs.ibv_dealloc_pd(pd);
            }
            if (0 != id)
            {
                RdmaCm.rdma_destroy_id(id);
            }
            channel.close();
            throw ex;
        }
    }

    /**
     * Names of the RDMA devices the kernel offers, for diagnostics ({@code blockmover} status output, start-up logs).
     *
     * @return e.g. {@code [rxe0, siw0]}, empty if the kernel has RDMA support but no device.
     * @throws RdmaUnavailableException if the kernel has no RDMA support (ENOSYS) or the library is missing.
     */
    public static List<String> deviceNames()
    {
        ensureLibrariesLoaded();
        final UnsafeBuffer count = new UnsafeBuffer(BufferUtil.allocateDirectAligned(8, 8));
        final long list = IbVerbs.ibv_get_device_list(count.addressOffset());
        if (0 == list)
        {
            throw RdmaException.of("ibv_get_device_list", Native.getLastError(), "listing RDMA devices");
        }

        try
        {
            final int devices = count.getInt(0);
            final UnsafeBuffer pointers = new UnsafeBuffer(list, (devices + 1) * 8);
            final List<String> names = new ArrayList<>(devices);
            for (int i = 0; i < devices; i++)
            {
                names.add(IbVerbs.ibv_get_device_name(pointers.getLong(i * 8)));
            }
            return names;
        }
        finally
        {
            IbVerbs.ibv_free_device_list(list);
        }
    }

    private static String bindFailureDetail(final InetAddress localAddress, final int errno)
    {
        final String address = localAddress.getHostAddress();
        if (Errno.EADDRNOTAVAIL == errno)
        {
            return "address " + address + " is not configured on any interface of this host";
        }
        if (Errno.ENODEV == errno)
        {
            return "address " + address + " is not on an RDMA-capable netdev (see `rdma link`; for soft-RoCE or " +
                "soft-iWARP: rdma link add rxe0 type rxe netdev IF)";
        }

        return "binding to " + address;
    }

    private static void ensureLibrariesLoaded()
    {
        try
        {
            Class.forName(IbVerbs.class.getName(), true, RdmaDevice.class.getClassLoader());
        }
        catch (final ClassNotFoundException | LinkageError ex)
        {
            throw new RdmaUnavailableException(IbVerbs.LIBRARY_NAME, "libibverbs1 ibverbs-providers", ex);
        }
        try
        {
            Class.forName(RdmaCm.class.getName(), true, RdmaDevice.class.getClassLoader());
        }
        catch (final ClassNotFoundException | LinkageError ex)
        {
            throw new RdmaUnavailableException(RdmaCm.LIBRARY_NAME, "librdmacm1", ex);
        }
    }

    /**
     * Register a direct buffer, all of it (index 0 to capacity), after checking {@code RLIMIT_MEMLOCK}.
     *
     * @param buffer direct buffer the caller keeps for the life of the registration.
     * @return the registration.
     * @throws MemlockLimitException if the memory lock limit is too low, naming the fix.
     * @throws RdmaException         if {@code ibv_reg_mr} fails.
     */
    public RegisteredMemory register(final ByteBuffer buffer)
    {
        ensureOpen();
        if (!buffer.isDirect())
        {
            throw new IllegalArgumentException("only direct buffers can be registered: " + buffer);
        }

        final long address = BufferUtil.address(buffer);
        final int length = buffer.capacity();
        if (length <= 0)
        {
            throw new IllegalArgumentException("cannot register an empty buffer");
        }
        if (Long.compareUnsigned(length, maxMrSize) > 0)
        {
            throw new IllegalArgumentException("buffer of " + length + " bytes exceeds max_mr_size " +
                Long.toUnsignedString(maxMrSize) +
                " of " + name);
        }

        final long pinned = MemlockLimit.pinnedBytes(address, length);
        MemlockLimit.checkAndReserve(pinned);
        final long mr = IbVerbs.ibv_reg_mr(protectionDomain, address, length, REGISTRATION_ACCESS);
        if (0 == mr)
        {
            final int errno = Native.getLastError();
            MemlockLimit.release(pinned);
            throw new RdmaException("ibv_reg_mr", errno, length + " bytes at 0x" + Long.toHexString(address) +
                " on " + name + (Errno.ENOMEM == errno || Errno.EPERM == errno ?
                " (RLIMIT_MEMLOCK " + MemlockLimit.softLimitBytes() + ": set LimitMEMLOCK= in the unit or ulimit -l)" :
                ""));
        }

        final UnsafeBuffer region = new UnsafeBuffer(mr, IbvMrDescriptor.LENGTH);
        final RegisteredMemory memory = new RegisteredMemory(
            this,
            buffer,
            address,
            length,
            mr,
            region.getInt(IbvMrDescriptor.LKEY_OFFSET),
            region.getInt(IbvMrDescriptor.RKEY_OFFSET),
            pinned);
        registrations.add(memory);

        return memory;
    }

    void deregister(final RegisteredMemory memory, final long mr, final long pinnedBytes)
    {
        registrations.remove(memory);
        final int result = IbVerbs.ibv_dereg_mr(mr);
        MemlockLimit.release(pinnedBytes);
        if (0 != result)
        {
            throw new RdmaException("ibv_dereg_mr", result, memory.toString());
        }
    }

    void onOpened(final AutoCloseable connection)
    {
        connections.add(connection);
    }

    void onClosed(final AutoCloseable connection)
    {
        connections.remove(connection);
    }

    void ensureOpen()
    {
        if (0 == protectionDomain)
        {
            throw new IllegalStateException("device " + name + " is closed");
        }
    }

    /**
     * Kernel name of the device.
     *
     * @return e.g. {@code "siw0"} or {@code "rxe0"}.
     */
    public String name()
    {
        return name;
    }

    /**
     * The address the device was opened by; listeners bind to it and connections originate from it.
     *
     * @return local address.
     */
    public InetAddress localAddress()
    {
        return localAddress;
    }

    /**
     * {@code struct ibv_context *} shared with librdmacm.
     *
     * @return address.
     */
    public long context()
    {
        return context;
    }

    /**
     * {@code struct ibv_pd *} for all registrations and queue pairs on this device.
     *
     * @return address, 0 once closed.
     */
    public long protectionDomain()
    {
        return protectionDomain;
    }

    /**
     * Device limit on outstanding work requests per queue.
     *
     * @return max_qp_wr.
     */
    public int maxQueuePairWorkRequests()
    {
        return maxQpWr;
    }

    /**
     * Device limit on scatter/gather elements per work request.
     *
     * @return max_sge.
     */
    public int maxScatterGatherElements()
    {
        return maxSge;
    }

    /**
     * Device limit on completion queue entries.
     *
     * @return max_cqe.
     */
    public int maxCompletionQueueEntries()
    {
        return maxCqe;
    }

    /**
     * RDMA READs a peer may have outstanding against one of our queue pairs.
     *
     * @return max_qp_rd_atom.
     */
    public int maxReadResponderResources()
    {
        return maxQpRdAtom;
    }

    /**
     * RDMA READs one of our queue pairs may have outstanding.
     *
     * @return max_qp_init_rd_atom.
     */
    public int maxReadInitiatorDepth()
    {
        return maxQpInitRdAtom;
    }

    /**
     * Number of registrations still open.
     *
     * @return count.
     */
    public int registrationCount()
    {
        return registrations.size();
    }

    /**
     * Number of listeners and endpoints still open.
     *
     * @return count.
     */
    public int connectionCount()
    {
        return connections.size();
    }

    /**
     * Close every endpoint and listener still open, deregister all memory, free the protection domain and the
     * anchor id. Never blocks on the network. Idempotent.
     */
    public void close()
    {
        if (0 == protectionDomain)
        {
            return;
        }

        RuntimeException failure = null;
        for (final AutoCloseable connection : new ArrayList<>(connections))
        {
            failure = closeQuietly(connection, failure);
        }
        for (final RegisteredMemory memory : new ArrayList<>(registrations))
        {
            failure = closeQuietly(memory, failure);
        }

        final int result = IbVerbs.ibv_dealloc_pd(protectionDomain);
        protectionDomain = 0;
        if (0 != result && null == failure)
        {
            failure = new RdmaException("ibv_dealloc_pd", result, "device " + name);
        }
        if (0 != RdmaCm.rdma_destroy_id(anchorId) && null == failure)
        {
            failure = new RdmaException("rdma_destroy_id", Native.getLastError(), "anchor id of " + name);
        }
        anchorId = 0;
        anchorChannel.close();
        anchorChannel = null;

        if (null != failure)
        {
            throw failure;
        }
    }

    static RuntimeException closeQuietly(final AutoCloseable closeable, final RuntimeException failure)
    {
        try
        {
            closeable.close();
            return failure;
        }
        catch (final Exception ex)
        {
            if (null == failure)
            {
                return ex instanceof RuntimeException ? (RuntimeException)ex : new IllegalStateException(ex);
            }
            failure.addSuppressed(ex);
            return failure;
        }
    }

    public String toString()
    {
        return "RdmaDevice{" + name + " at " + localAddress.getHostAddress() + '}';
    }
}
