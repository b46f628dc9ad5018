package io.blockmover.pipeline;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import io.blockmover.ErrorCode;
import io.blockmover.protocol.ErrorPayload;
import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;

/**
 * Builds the frames a peer would send, for feeding a {@link CapturingFrameConnection}. Tests only: allocates.
 */
final class Frames
{
    private Frames()
    {
    }

    static int crc32c(final byte[] bytes, final int offset, final int length)
    {
        final CRC32C crc = new CRC32C();
        crc.update(bytes, offset, length);
        return (int)crc.getValue();
    }

    static FrameHeader header(final FrameType type, final int sessionId)
    {
        return new FrameHeader().reset(type).sessionId(sessionId);
    }

    static void deliver(final CapturingFrameConnection connection, final FrameType type, final int sessionId,
        final long sequence)
    {
        connection.deliver(header(type, sessionId).sequence(sequence).seal(), null);
    }

    static void deliverChunk(final CapturingFrameConnection connection, final int sessionId, final long index,
        final long offset, final byte[] data, final int crc)
    {
        final ByteBuffer payload = ByteBuffer.allocateDirect(data.length);
        payload.put(data).flip();
        connection.deliver(header(FrameType.CHUNK, sessionId).sequence(index).offset(offset)
            .payloadLength(data.length).payloadCrc(crc).seal(), payload);
    }

    static void deliverDigests(final CapturingFrameConnection connection, final int sessionId, final long first,
        final int[] crcs)
    {
        final ByteBuffer payload = ByteBuffer.allocateDirect(crcs.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (final int crc : crcs)
        {
            payload.putInt(crc);
        }
        payload.flip();
        final byte[] bytes = new byte[payload.remaining()];
        payload.duplicate().get(bytes);
        connection.deliver(header(FrameType.DIGEST, sessionId).sequence(first).aux(crcs.length)
            .payloadLength(bytes.length).payloadCrc(crc32c(bytes, 0, bytes.length)).seal(), payload);
    }

    static void deliverError(final CapturingFrameConnection connection, final int sessionId, final ErrorCode code,
        final String message)
    {
        final byte[] text = ErrorPayload.encode(code, message);
        final ByteBuffer payload = ByteBuffer.allocateDirect(text.length);
        payload.put(text).flip();
        connection.deliver(header(FrameType.ERROR, sessionId).aux(code.ordinal()).payloadLength(text.length)
            .payloadCrc(crc32c(text, 0, text.length)).seal(), payload);
    }
}
