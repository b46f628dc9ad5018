package io.blockmover.transport.rdma;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.DatagramChannel;
import java.util.HashMap;
import java.util.Map;

import org.agrona.concurrent.status.AtomicCounter;

import io.blockmover.rdma.MemlockLimitException;
import io.blockmover.rdma.RdmaDevice;
import io.blockmover.rdma.RdmaEndpoint;
import io.blockmover.rdma.RdmaEndpointContext;
import io.blockmover.rdma.RegisteredMemory;
import io.blockmover.rdma.verbs.RdmaUnavailableException;

/**
 * Finds and keeps the RDMA devices this daemon uses: the device that owns the local address a peer is reached
 * from. Opened once each (a device context and a protection domain), closed at shutdown. The daemon's slab is
 * registered with each device once, when it is opened, so that every connection on it sends payloads straight
 * from their slots. Conductor thread only.
 */
public final class RdmaDevices implements AutoCloseable
{
    /** iWARP connections live in the TCP port space, so RDMA listens one port above the TCP listener. */
    public static final int PORT_OFFSET = 1;

    private final Map<InetAddress, RdmaDevice> devices = new HashMap<>();
    private final Map<RdmaDevice, RegisteredMemory> slabRegistrations = new HashMap<>();
    private final Map<InetAddress, String> unavailable = new HashMap<>();
    private final ByteBuffer slabMemory;

    /**
     * No slab: connections copy every payload (tests of the choice alone).
     */
    public RdmaDevices()
    {
        this(null);
    }

    /**
     * @param slabMemory the daemon's slab, registered with each device as it is opened; or null.
     */
    public RdmaDevices(final ByteBuffer slabMemory)
    {
        this.slabMemory = slabMemory;
    }

    /**
     * What a peer will be reached over, and why.
     *
     * @param device the RDMA device to use, or null for TCP.
     * @param reason for the operator: which device owns which address, or why none does.
     */
    public record Choice(RdmaDevice device, String reason)
    {
        public boolean isRdma()
        {
            return device != null;
        }
    }

    /**
     * @param peer address of the peer's listener.
     * @return the device owning the local address that routes to the peer, or why there is none.
     */
    public Choice towards(final InetSocketAddress peer)
    {
        final InetAddress local;
        try
        {
            local = localAddressTowards(peer);
        }
        catch (final IOException ex)
        {
            return new Choice(null, "no route to " + peer.getAddress().getHostAddress() + ": " + ex.getMessage());
        }
        return on(local);
    }

    /**
     * @param local a local address.
     * @return the device owning it, or why there is none.
     * @throws MemlockLimitException when the device is there but RLIMIT_MEMLOCK is too low to register the slab.
     */
    public Choice on(final InetAddress local)
    {
        final RdmaDevice known = devices.get(local);
        if (known != null)
        {
            return new Choice(known, "RDMA device " + known.name() + " owns " + local.getHostAddress());
        }
        final String why = unavailable.get(local);
        if (why != null)
        {
            return new Choice(null, why);
        }
        try
        {
            final RdmaDevice device = RdmaDevice.open(local);
            try
            {
                if (slabMemory != null)
                {
                    slabRegistrations.put(device, device.register(slabMemory));
                }
            }
            catch (final RuntimeException ex)
            {
                device.close();
                throw ex;
            }
            devices.put(local, device);
            return new Choice(device, "RDMA device " + device.name() + " owns " + local.getHostAddress());
        }
        catch (final MemlockLimitException ex)
        {
            // Not a missing device but a limit to raise: the caller reports it, naming the fix (LimitMEMLOCK=).
            throw ex;
        }
        catch (final RuntimeException | LinkageError ex)
        {
            // A host with no RDMA at all says so in the exception's own words, not wrapped in the address's: the
            // address is beside the point there, and the nesting made the status line hard to read.
            final String reason = ex instanceof RdmaUnavailableException ? ex.getMessage() :
                "no RDMA device owns " + local.getHostAddress() + " (" + ex.getMessage() + ")";
            unavailable.put(local, reason);
            return new Choice(null, reason);
        }
    }

    /**
     * The local address the kernel would use to reach a peer: a connected UDP socket learns it without sending
     * a packet.
     */
    static InetAddress localAddressTowards(final InetSocketAddress peer) throws IOException
    {
        try (DatagramChannel probe = DatagramChannel.open())
        {
            probe.connect(peer);
            return ((InetSocketAddress)probe.getLocalAddress()).getAddress();
        }
    }

    /**
     * Endpoint settings for a connection that keeps {@code receiveDepth} receives posted.
     */
    public static RdmaEndpointContext context(final RdmaDevice device, final int receiveDepth)
    {
        return new RdmaEndpointContext()
            .sendQueueDepth(RdmaFrameConnection.SEND_BUFFERS + 4)
            .receiveQueueDepth(receiveDepth)
            .conclude(device);
    }

    /**
     * A frame connection on a new endpoint that sends from this daemon's slab without a copy: call right after
     * {@code RdmaEndpoint.connect} returns, or on a server before {@code accept}.
     *
     * @param endpoint     on one of these devices, its queue pair created.
     * @param maxPayload   the largest payload a frame may carry.
     * @param receiveDepth receives kept posted.
     * @param zeroCopySends counts frames sent without a copy; or null.
     * @return the connection; it owns the endpoint from now on.
     * @throws IOException when a receive cannot be posted.
     */
    public RdmaFrameConnection newConnection(final RdmaEndpoint endpoint, final int maxPayload,
        final int receiveDepth, final AtomicCounter zeroCopySends) throws IOException
    {
        return RdmaFrameConnection.create(endpoint, slabRegistrations.get(endpoint.device()), zeroCopySends,
            maxPayload, receiveDepth);
    }

    /**
     * @param device an open device.
     * @return the slab's registration on it, or null.
     */
    public RegisteredMemory slabRegistration(final RdmaDevice device)
    {
        return slabRegistrations.get(device);
    }

    /**
     * Closes each device: its connections first, then its registrations (the slab's among them).
     */
    @Override
    public void close()
    {
        for (final RdmaDevice device : devices.values())
        {
            device.close();
        }
        devices.clear();
        slabRegistrations.clear();
    }
}
