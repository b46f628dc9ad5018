package io.blockmover.transport;

import java.nio.ByteBuffer;

import io.blockmover.protocol.FrameHeader;

/**
 * A connection that carries nothing: every send completes at once, nothing ever arrives. Tests extend it and
 * override what they observe (the frames sent, the waits asked for).
 */
public class NullFrameConnection implements FrameConnection
{
    private long framesStarted;

    @Override
    public String transportName()
    {
        return "test";
    }

    @Override
    public String remoteAddress()
    {
        return "test";
    }

    @Override
    public boolean startSend(final FrameHeader header, final ByteBuffer payload)
    {
        framesStarted++;
        return true;
    }

    @Override
    public boolean flush()
    {
        return true;
    }

    @Override
    public long framesStarted()
    {
        return framesStarted;
    }

    @Override
    public long framesReleased()
    {
        return framesStarted;
    }

    @Override
    public boolean isSendPending()
    {
        return false;
    }

    @Override
    public boolean receiveHeader(final FrameHeader header)
    {
        return false;
    }

    @Override
    public boolean receivePayload(final ByteBuffer dst)
    {
        return false;
    }

    @Override
    public long bytesSent()
    {
        return 0;
    }

    @Override
    public long bytesReceived()
    {
        return 0;
    }

    @Override
    public void close()
    {
    }
}
