package io.blockmover.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;

import static io.blockmover.protocol.FrameDescriptor.AUX_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.FLAGS_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.HEADER_CRC_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH;
import static io.blockmover.protocol.FrameDescriptor.LENGTH_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.MAGIC;
import static io.blockmover.protocol.FrameDescriptor.MAGIC_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.OFFSET_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.PAYLOAD_CRC_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.RESERVED_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.SEQUENCE_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.SESSION_ID_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.TYPE_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.VERSION;
import static io.blockmover.protocol.FrameDescriptor.VERSION_OFFSET;
import static io.blockmover.protocol.FrameDescriptor.VOLUME_ID_OFFSET;

/**
 * Flyweight over one {@link FrameDescriptor} header held in a direct buffer of its own, so that it can be handed
 * to a gathering write or an RDMA SGE as it is. Not thread safe: one owner thread, one instance per stage.
 */
public final class FrameHeader
{
    private final ByteBuffer byteBuffer;
    private final ByteBuffer crcView;
    private final UnsafeBuffer buffer;
    private final CRC32C crc32c = new CRC32C();

    /**
     * A header in a fresh aligned direct buffer of its own.
     */
    public FrameHeader()
    {
        this(BufferUtil.allocateDirectAligned(HEADER_LENGTH, 64));
    }

    /**
     * A header over the first {@link FrameDescriptor#HEADER_LENGTH} bytes of a direct buffer.
     *
     * @param byteBuffer direct buffer, position 0, at least HEADER_LENGTH bytes.
     */
    public FrameHeader(final ByteBuffer byteBuffer)
    {
        this.byteBuffer = byteBuffer.duplicate().order(ByteOrder.LITTLE_ENDIAN).clear().limit(HEADER_LENGTH);
        this.crcView = this.byteBuffer.duplicate();
        this.buffer = new UnsafeBuffer(this.byteBuffer, 0, HEADER_LENGTH);
    }

    /**
     * @return the buffer holding the header bytes; position and limit belong to the caller's I/O.
     */
    public ByteBuffer byteBuffer()
    {
        return byteBuffer;
    }

    /**
     * @return the header as an Agrona buffer.
     */
    public UnsafeBuffer buffer()
    {
        return buffer;
    }

    /**
     * Clears the header and sets magic, version and type.
     *
     * @param type of the frame.
     * @return this.
     */
    public FrameHeader reset(final FrameType type)
    {
        buffer.setMemory(0, HEADER_LENGTH, (byte)0);
        buffer.putInt(MAGIC_OFFSET, MAGIC);
        buffer.putByte(VERSION_OFFSET, (byte)VERSION);
        buffer.putByte(TYPE_OFFSET, (byte)type.code());
        return this;
    }

    public FrameHeader sessionId(final int sessionId)
    {
        buffer.putInt(SESSION_ID_OFFSET, sessionId);
        return this;
    }

    public FrameHeader volumeId(final int volumeId)
    {
        buffer.putInt(VOLUME_ID_OFFSET, volumeId);
        return this;
    }

    public FrameHeader sequence(final long sequence)
    {
        buffer.putLong(SEQUENCE_OFFSET, sequence);
        return this;
    }

    public FrameHeader offset(final long offset)
    {
        buffer.putLong(OFFSET_OFFSET, offset);
        return this;
    }

    public FrameHeader payloadLength(final int length)
    {
        buffer.putInt(LENGTH_OFFSET, length);
        return this;
    }

    public FrameHeader payloadCrc(final int crc)
    {
        buffer.putInt(PAYLOAD_CRC_OFFSET, crc);
        return this;
    }

    /**
     * Sets the length and CRC32C of a small control payload (its position..limit), which is left as it was.
     *
     * @param payload the payload to send.
     * @return this.
     */
    public FrameHeader controlPayload(final ByteBuffer payload)
    {
        crc32c.reset();
        crc32c.update(payload.duplicate());
        return payloadLength(payload.remaining()).payloadCrc((int)crc32c.getValue());
    }

    /**
     * @param payload a received payload (its position..limit), left as it was.
     * @return whether its CRC32C is the one this header carries.
     */
    public boolean payloadMatches(final ByteBuffer payload)
    {
        crc32c.reset();
        crc32c.update(payload.duplicate());
        return (int)crc32c.getValue() == payloadCrc();
    }

    public FrameHeader aux(final long aux)
    {
        buffer.putLong(AUX_OFFSET, aux);
        return this;
    }

    public FrameHeader flags(final int flags)
    {
        buffer.putShort(FLAGS_OFFSET, (short)flags);
        return this;
    }

    /**
     * Computes the header CRC over bytes 0..59 and stores it; call last, after every field is set.
     *
     * @return this.
     */
    public FrameHeader seal()
    {
        buffer.putInt(HEADER_CRC_OFFSET, computeHeaderCrc());
        return this;
    }

    public int magic()
    {
        return buffer.getInt(MAGIC_OFFSET);
    }

    public int version()
    {
        return buffer.getByte(VERSION_OFFSET) & 0xFF;
    }

    public int typeCode()
    {
        return buffer.getByte(TYPE_OFFSET) & 0xFF;
    }

    /**
     * @return the type or null when the code is unknown.
     */
    public FrameType type()
    {
        return FrameType.fromCode(typeCode());
    }

    public int flags()
    {
        return buffer.getShort(FLAGS_OFFSET) & 0xFFFF;
    }

    public int sessionId()
    {
        return buffer.getInt(SESSION_ID_OFFSET);
    }

    public int volumeId()
    {
        return buffer.getInt(VOLUME_ID_OFFSET);
    }

    public long sequence()
    {
        return buffer.getLong(SEQUENCE_OFFSET);
    }

    public long offset()
    {
        return buffer.getLong(OFFSET_OFFSET);
    }

    public int payloadLength()
    {
        return buffer.getInt(LENGTH_OFFSET);
    }

    public int payloadCrc()
    {
        return buffer.getInt(PAYLOAD_CRC_OFFSET);
    }

    public long aux()
    {
        return buffer.getLong(AUX_OFFSET);
    }

    /**
     * Checks magic, version, header CRC, a known type, zero reserved bytes and a payload length within bounds.
     *
     * @param maxPayloadLength the largest payload this receiver accepts.
     * @return null when the header is sound, otherwise why it is not.
     */
    public String validate(final int maxPayloadLength)
    {
        if (magic() != MAGIC)
        {
            return "bad magic 0x" + Integer.toHexString(magic()) + " (not a blockmover peer?)";
        }
        if (buffer.getInt(HEADER_CRC_OFFSET) != computeHeaderCrc())
        {
            return "header CRC mismatch";
        }
        if (version() != VERSION)
        {
            return "protocol version " + version() + " not supported (this build speaks " + VERSION + ")";
        }
        if (type() == null)
        {
            return "unknown frame type " + typeCode();
        }
        for (int i = RESERVED_OFFSET; i < HEADER_CRC_OFFSET; i += 4)
        {
            if (buffer.getInt(i) != 0)
            {
                return "reserved header bytes are not zero";
            }
        }
        final int length = payloadLength();
        if (length < 0 || length > maxPayloadLength)
        {
            return "payload length " + length + " out of range 0.." + maxPayloadLength;
        }
        return null;
    }

    private int computeHeaderCrc()
    {
        crcView.clear().limit(HEADER_CRC_OFFSET);
        crc32c.reset();
        crc32c.update(crcView);
        return (int)crc32c.getValue();
    }
}
