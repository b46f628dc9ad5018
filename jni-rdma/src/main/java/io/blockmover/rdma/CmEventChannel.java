package io.blockmover.rdma;

import com.sun.jna.Native;
import io.blockmover.rdma.verbs.Errno;
import io.blockmover.rdma.verbs.LibC;
import io.blockmover.rdma.verbs.RdmaCm;
import io.blockmover.rdma.verbs.RdmaCmEventDescriptor;
import io.blockmover.rdma.verbs.RdmaCmEventType;
import io.blockmover.rdma.verbs.RdmaEventChannelDescriptor;
import io.blockmover.rdma.verbs.RdmaException;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * A non-blocking rdma_cm event channel polled one event at a time.
 * <p>
 * {@link #poll()} copies the fields of interest out of the event and acknowledges it at once. Prompt
 * acknowledgement matters: {@code rdma_destroy_id} and {@code rdma_migrate_id} wait until every event reported
 * for the id has been acknowledged, so an event held across calls is how close() hangs.
 * <p>
 * One thread at a time. Polling allocates nothing when no event is pending (one system call).
 */
final class CmEventChannel implements AutoCloseable
{
    private static final int EVENT_OUT_OFFSET = 0;

    private final UnsafeBuffer scratch = new UnsafeBuffer(BufferUtil.allocateDirectAligned(64, 64));
    private final UnsafeBuffer eventView = new UnsafeBuffer(0, 0);
    private long channel;
    private final int fd;

    private RdmaCmEventType eventType = RdmaCmEventType.UNKNOWN;
    private int eventStatus;
    private long eventId;
    private int eventInitiatorDepth;
    private int eventResponderResources;

    private CmEventChannel(final long channel)
    {
        this.channel = channel;
        this.fd = new UnsafeBuffer(channel, RdmaEventChannelDescriptor.LENGTH)
            .getInt(RdmaEventChannelDescriptor.FD_OFFSET);
    }

    /**
     * @return the channel's file descriptor, readable while an event waits (for {@code poll}).
     */
    int fd()
    {
        return fd;
    }

    /**
     * Create a channel and make its fd non-blocking.
     *
     * @param forWhat names the owner in error messages.
     * @return the channel.
     * @throws io.blockmover.rdma.verbs.RdmaUnavailableException if the host has no RDMA support.
     */
    static CmEventChannel open(final String forWhat)
    {
        final long channel = RdmaCm.rdma_create_event_channel();
        if (0 == channel)
        {
            throw RdmaException.of("rdma_create_event_channel", Native.getLastError(), "event channel for " + forWhat);
        }

        final CmEventChannel eventChannel = new CmEventChannel(channel);
        try
        {
            LibC.setNonBlocking(eventChannel.fd, "rdma_cm event channel for " + forWhat);
        }
        catch (final RuntimeException ex)
        {
            eventChannel.close();
            throw ex;
        }

        return eventChannel;
    }

    long address()
    {
        return channel;
    }

    /**
     * Take one pending event, if any, copy its fields into this object and acknowledge it.
     *
     * @return true if an event was taken; its fields are available until the next call.
     */
    boolean poll()
    {
        if (0 == channel)
        {
            throw new IllegalStateException("event channel closed");
        }

        if (0 != RdmaCm.rdma_get_cm_event(channel, scratch.addressOffset() + EVENT_OUT_OFFSET))
        {
            final int errno = Native.getLastError();
            if (Errno.EAGAIN == errno || Errno.EINTR == errno)
            {
                return false;
            }

            throw new RdmaException("rdma_get_cm_event", errno, "polling event channel fd " + fd);
        }

        final long event = scratch.getLong(EVENT_OUT_OFFSET);
        eventView.wrap(event, RdmaCmEventDescriptor.LENGTH);
        eventType = RdmaCmEventType.get(eventView.getInt(RdmaCmEventDescriptor.EVENT_OFFSET));
        eventStatus = eventView.getInt(RdmaCmEventDescriptor.STATUS_OFFSET);
        eventId = eventView.getLong(RdmaCmEventDescriptor.ID_OFFSET);
        eventInitiatorDepth = eventView.getByte(RdmaCmEventDescriptor.CONN_INITIATOR_DEPTH_OFFSET) & 0xFF;
        eventResponderResources = eventView.getByte(RdmaCmEventDescriptor.CONN_RESPONDER_RESOURCES_OFFSET) & 0xFF;
        eventView.wrap(0, 0);

        if (0 != RdmaCm.rdma_ack_cm_event(event))
        {
            throw new RdmaException("rdma_ack_cm_event", Native.getLastError(), eventType.cName());
        }

        return true;
    }

    RdmaCmEventType eventType()
    {
        return eventType;
    }

    int eventStatus()
    {
        return eventStatus;
    }

    long eventId()
    {
        return eventId;
    }

    int eventInitiatorDepth()
    {
        return eventInitiatorDepth;
    }

    int eventResponderResources()
    {
        return eventResponderResources;
    }

    public void close()
    {
        if (0 != channel)
        {
            RdmaCm.rdma_destroy_event_channel(channel);
            channel = 0;
        }
    }
}
