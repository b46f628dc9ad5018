package io.blockmover.conductor;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import io.blockmover.BlockmoverException;
import io.blockmover.ErrorCode;
import io.blockmover.control.ControlServer;
import io.blockmover.rdma.verbs.RdmaException;

/**
 * A planned switch asked for on the destination ('blockmover group switch NAME' there, or a cluster promoting
 * it): the source drives every planned switch, because only it knows when the partner holds every write, so the
 * destination asks it over an authenticated peer session (OPEN with {@code switch_request}) and then waits until
 * the source's switch has turned this host's group into the source. Conductor thread only.
 */
final class SwitchRequest
{
    private final Conductor conductor;
    private final String name;
    private final String peer;
    private final ControlServer.Client client;
    private final Object id;
    /** Pushed ahead whenever this destination receives or applies more: the source's drain is moving. */
    private long deadlineNs;
    private long lastProgress = -1;
    private PeerDialer dialer;
    private boolean accepted;

    SwitchRequest(final Conductor conductor, final String name, final String peer, final ControlServer.Client client,
        final Object id, final long nowNs)
    {
        this.conductor = conductor;
        this.name = name;
        this.peer = peer;
        this.client = client;
        this.id = id;
        this.deadlineNs = nowNs + stallNs();
        final Map<String, Object> open = new LinkedHashMap<>();
        open.put("group", name);
        open.put("switch_request", true);
        dialer = new PeerDialer(conductor, peer);
        try
        {
            dialer.start(open, nowNs);
        }
        catch (final IOException | RdmaException ex)
        {
            dialer.close();
            throw new BlockmoverException(ErrorCode.PEER_UNREACHABLE, "cannot reach " + peer + " to ask for the " +
                "switch: " + ex.getMessage() + "; if " + peer + " is lost, 'blockmover group switch " + name +
                " --force' here is a failover", ex);
        }
    }

    /**
     * The source gives up its switch after six connect time-outs without progress; this side waits a little
     * longer, so that the source's outcome (success or abandon) is what decides.
     */
    private long stallNs()
    {
        return conductor.ctx().connectTimeoutNs() * 8;
    }

    /**
     * @param nowNs        conductor time.
     * @param isSourceHere whether this host's group has become the source.
     * @param destination  this host's side of the group while it is the destination, else null.
     * @return whether the request is over (answered).
     */
    boolean doWork(final long nowNs, final boolean isSourceHere, final DestinationGroupHandle destination)
    {
        if (accepted)
        {
            if (isSourceHere)
            {
                client.reply(id, conductor.groups().statusOf(name));
                return true;
            }
            // The source drains its backlog to us before it hands over, for as long as that takes over the link.
            final long progress = destination != null && destination.isOpen() ?
                destination.heldLsn() + destination.appliedLsn() : -1;
            if (progress > lastProgress)
            {
                lastProgress = progress;
                deadlineNs = nowNs + stallNs();
            }
            if (nowNs > deadlineNs)
            {
                fail(ErrorCode.PEER_UNREACHABLE, peer + " accepted the switch, then this host received and " +
                    "applied nothing more for " + TimeUnit.NANOSECONDS.toSeconds(stallNs()) + " s: see " +
                    "'blockmover group status " + name + "' on both hosts");
                return true;
            }
            return false;
        }
        try
        {
            dialer.doWork(nowNs);
            if (dialer.isOpened())
            {
                // The source only acknowledges the request; its switch session to us completes the switch.
                dialer.close();
                dialer = null;
                accepted = true;
                conductor.log("group " + name + ": " + peer + " accepted the switch request, waiting for the " +
                    "hand-over");
            }
            return false;
        }
        catch (final PeerRefusal ex)
        {
            fail(ex.code(), ex.getMessage());
        }
        catch (final IOException ex)
        {
            fail(ErrorCode.PEER_UNREACHABLE, peer + ": " + ex.getMessage());
        }
        return true;
    }

    private void fail(final ErrorCode code, final String message)
    {
        if (dialer != null)
        {
            dialer.close();
            dialer = null;
        }
        conductor.log("group " + name + ": switch request to " + peer + " failed: " + message);
        client.error(id, code, "switch not done, " + conductor.ctx().nodeName() + " is still the destination: " +
            message);
    }

    String name()
    {
        return name;
    }

    void close()
    {
        if (dialer != null)
        {
            dialer.close();
            dialer = null;
        }
    }
}
