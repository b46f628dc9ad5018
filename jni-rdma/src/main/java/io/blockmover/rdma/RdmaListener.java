package io.blockmover.rdma;

import java.net.InetSocketAddress;

import com.sun.jna.Native;
import io.blockmover.rdma.verbs.RdmaCm;
import io.blockmover.rdma.verbs.RdmaCmEventType;
import io.blockmover.rdma.verbs.RdmaException;
import io.blockmover.rdma.verbs.SockaddrDescriptor;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Listens on the device address and a port for RDMA connect requests, like a server socket that owns no thread:
 * {@link #poll(long)} hands out one {@link RdmaEndpoint} per request, with its queues already created, in state
 * CONNECT_REQUESTED; the caller posts receives and calls {@link RdmaEndpoint#accept(long, long)}.
 * <p>
 * A request that cannot be set up (e.g. queue creation fails) is rejected at once and counted in
 * {@link #rejectedCount()}, with the failure kept in {@link #lastRejectCause()}.
 * <p>
 * Threading: one thread at a time. Endpoints handed out are independent of the listener: closing the listener
 * leaves them connected.
 */
public final class RdmaListener implements AutoCloseable
{
    private final RdmaDevice device;
    private final RdmaEndpointContext context;
    private final InetSocketAddress localAddress;
    private CmEventChannel channel;
    private long listenId;
    private long rejectedCount;
    private RdmaException lastRejectCause;
    private boolean deviceRemoved;

    private RdmaListener(
        final RdmaDevice device,
        final RdmaEndpointContext context,
        final InetSocketAddress localAddress,
        final CmEventChannel channel)
    {
        this.device = device;
        this.context = context;
        this.localAddress = localAddress;
        this.channel = channel;
    }

    /**
     * Bind to the device's address and {@code port} and listen.
     *
     * @param device  device whose address to bind.
     * @param port    TCP-style port number in the RDMA_PS_TCP space.
     * @param backlog connect requests the kernel queues before rejecting.
     * @param context concluded settings for the accepted endpoints.
     * @return the listener.
     * @throws RdmaException if binding or listening fails (EADDRINUSE if the port is taken).
     */
    public static RdmaListener listen(
        final RdmaDevice device, final int port, final int backlog, final RdmaEndpointContext context)
    {
        device.ensureOpen();
        final InetSocketAddress address = new InetSocketAddress(device.localAddress(), port);
        final RdmaListener listener = new RdmaListener(device, context, address, CmEventChannel.open(
            "listener " + address));
        try
        {
            final UnsafeBuffer scratch = new UnsafeBuffer(BufferUtil.allocateDirectAligned(64, 64));
            if (0 != RdmaCm.rdma_create_id(listener.channel.address(), scratch.addressOffset(), 0, RdmaCm.RDMA_PS_TCP))
            {
                throw new RdmaException("rdma_create_id", Native.getLastError(), "listener " + address);
            }
            listener.listenId = scratch.getLong(0);

            SockaddrDescriptor.write(scratch, 0, address);
            if (0 != RdmaCm.rdma_bind_addr(listener.listenId, scratch.addressOffset()))
            {
                throw new RdmaException("rdma_bind_addr", Native.getLastError(), "listener " + address);
            }
            if (0 != RdmaCm.rdma_listen(listener.listenId, backlog))
            {
                throw new RdmaException("rdma_listen", Native.getLastError(), "listener " + address);
            }
        }
        catch (final RuntimeException ex)
        {
            RdmaDevice.closeQuietly(listener, ex);
            throw ex;
        }
        device.onOpened(listener);

        return listener;
    }

    /**
     * Take the next connect request, if any.
     *
     * @return a new endpoint in CONNECT_REQUESTED that the caller now owns, or null if no request is pending. It has
     *         no deadline until {@link RdmaEndpoint#accept(long, long)}.
     * @throws RdmaException if the event channel fails or the device was removed.
     */
    public RdmaEndpoint poll()
    {
        if (null == channel)
        {
            throw new IllegalStateException("listener " + localAddress + " is closed");
        }

        while (channel.poll())
        {
            final RdmaCmEventType type = channel.eventType();
            if (RdmaCmEventType.CONNECT_REQUEST == type)
            {
                try
                {
                    return RdmaEndpoint.accepted(device, context, channel.eventId(), channel.eventInitiatorDepth(),
                        channel.eventResponderResources());
                }
                catch (final RdmaException ex)
                {
                    rejectedCount++;
                    lastRejectCause = ex;
                }
            }
            else if (RdmaCmEventType.DEVICE_REMOVAL == type)
            {
                deviceRemoved = true;
                throw new RdmaException(type.cName(), 0, "listener " + localAddress + " lost device " + device.name());
            }
        }

        return null;
    }

    /**
     * The bound address.
     *
     * @return device address and port.
     */
    public InetSocketAddress localAddress()
    {
        return localAddress;
    }

    /**
     * Connect requests rejected because they could not be set up.
     *
     * @return count.
     */
    public long rejectedCount()
    {
        return rejectedCount;
    }

    /**
     * Why the most recent request was rejected.
     *
     * @return cause, or null.
     */
    public RdmaException lastRejectCause()
    {
        return lastRejectCause;
    }

    /**
     * Whether rdma_cm reported RDMA_CM_EVENT_DEVICE_REMOVAL.
     *
     * @return true once the device is gone.
     */
    public boolean isDeviceRemoved()
    {
        return deviceRemoved;
    }

    /**
     * Stop listening; pending requests are rejected by the kernel. Endpoints already handed out are unaffected.
     * Idempotent.
     */
    public void close()
    {
        if (null == channel)
        {
            return;
        }

        RdmaException error = null;
        if (0 != listenId)
        {
            if (0 != RdmaCm.rdma_destroy_id(listenId))
            {
                error = new RdmaException("rdma_destroy_id", Native.getLastError(), "listener " + localAddress);
            }
            listenId = 0;
        }
        channel.close();
        channel = null;
        device.onClosed(this);

        if (null != error)
        {
            throw error;
        }
    }

    public String toString()
    {
        return "RdmaListener{" + device.name() + " " + localAddress + '}';
    }
}
