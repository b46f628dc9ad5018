package io.blockmover.conductor;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;

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
    private final long deadlineNs;
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
        // The source gives its own switch six connect time-outs to drain and hand over; wait a little longer, so
        // that its answer (success or abandon) is what decides.
        this.deadlineNs = nowNs + conductor.ctx().connectTimeoutNs() * 8;
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
     * @param nowNs conductor time.
     * @param isSourceHere whether this host's group has become the source.
     * @return whether the request is over (answered).
     */
    boolean doWork(final long nowNs, final boolean isSourceHere)
    {
        if (accepted)
        {
            if (isSourceHere)
            {
                client.reply(id, conductor.groups().statusOf(name));
                return true;
            }
            if (nowNs > deadlineNs)
            {
                fail(ErrorCode.PEER_UNREACHABLE, peer + " accepted the switch but did not complete it in time: see " +
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
