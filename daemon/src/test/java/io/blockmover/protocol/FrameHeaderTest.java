package io.blockmover.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import io.blockmover.ErrorCode;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FrameHeaderTest
{
    private static final int MAX_PAYLOAD = 1024 * 1024;

    private static FrameHeader fullHeader()
    {
        return new FrameHeader().reset(FrameType.CHUNK)
            .flags(0xBEEF)
            .sessionId(0x12345678)
            .volumeId(-7)
            .sequence(0x0102030405060708L)
            .offset(0x7FFF_0000_1234_5000L)
            .payloadLength(65536)
            .payloadCrc(0xCAFEBABE)
            .aux(-2L);
    }

    private static FrameHeader copyOf(final FrameHeader header)
    {
        final FrameHeader copy = new FrameHeader();
        copy.buffer().putBytes(0, header.buffer(), 0, FrameDescriptor.HEADER_LENGTH);
        return copy;
    }

    @Test
    void shouldRoundTripEveryField()
    {
        final FrameHeader header = fullHeader().seal();
        final FrameHeader read = copyOf(header);

        assertEquals(FrameDescriptor.MAGIC, read.magic());
        assertEquals(FrameDescriptor.VERSION, read.version());
        assertEquals(FrameType.CHUNK.code(), read.typeCode());
        assertSame(FrameType.CHUNK, read.type());
        assertEquals(0xBEEF, read.flags());
        assertEquals(0x12345678, read.sessionId());
        assertEquals(-7, read.volumeId());
        assertEquals(0x0102030405060708L, read.sequence());
        assertEquals(0x7FFF_0000_1234_5000L, read.offset());
        assertEquals(65536, read.payloadLength());
        assertEquals(0xCAFEBABE, read.payloadCrc());
        assertEquals(-2L, read.aux());
        assertNull(read.validate(MAX_PAYLOAD));
    }

    @Test
    void shouldLayOutFieldsLittleEndianAtDocumentedOffsets()
    {
        final FrameHeader header = fullHeader().seal();
        final ByteBuffer bytes = ByteBuffer.allocate(FrameDescriptor.HEADER_LENGTH).order(ByteOrder.LITTLE_ENDIAN);
        header.buffer().getBytes(0, bytes.array());

        assertEquals('B', bytes.get(0));
        assertEquals('K', bytes.get(1));
        assertEquals('M', bytes.get(2));
        assertEquals('R', bytes.get(3));
        assertEquals(FrameDescriptor.VERSION, bytes.get(FrameDescriptor.VERSION_OFFSET));
        assertEquals(FrameType.CHUNK.code(), bytes.get(FrameDescriptor.TYPE_OFFSET));
        assertEquals((short)0xBEEF, bytes.getShort(FrameDescriptor.FLAGS_OFFSET));
        assertEquals(0x12345678, bytes.getInt(FrameDescriptor.SESSION_ID_OFFSET));
        assertEquals(0x0102030405060708L, bytes.getLong(FrameDescriptor.SEQUENCE_OFFSET));
        assertEquals(65536, bytes.getInt(FrameDescriptor.LENGTH_OFFSET));
        for (int i = FrameDescriptor.RESERVED_OFFSET; i < FrameDescriptor.HEADER_CRC_OFFSET; i++)
        {
            assertEquals(0, bytes.get(i), "reserved byte " + i);
        }
    }

    @ParameterizedTest
    @EnumSource(FrameType.class)
    void shouldValidateSealedHeaderOfEveryType(final FrameType type)
    {
        final FrameHeader header = new FrameHeader().reset(type).sessionId(1).seal();

        assertNull(header.validate(FrameDescriptor.MAX_CONTROL_PAYLOAD));
        assertSame(type, copyOf(header).type());
    }

    @Test
    void shouldResetClearEarlierFields()
    {
        final FrameHeader header = fullHeader().seal();
        header.reset(FrameType.ACK).seal();

        assertEquals(0, header.sessionId());
        assertEquals(0, header.sequence());
        assertEquals(0, header.payloadLength());
        assertEquals(0, header.aux());
        assertEquals(0, header.flags());
        assertNull(header.validate(0));
    }

    @Test
    void shouldRejectBadMagic()
    {
        final FrameHeader header = fullHeader();
        header.buffer().putInt(FrameDescriptor.MAGIC_OFFSET, 0x50545448); // "HTTP"
        header.seal();

        final String problem = header.validate(MAX_PAYLOAD);

        assertNotNull(problem);
        assertTrue(problem.contains("magic"), problem);
    }

    @Test
    void shouldRejectFlippedBitAnywhereInHeader()
    {
        final FrameHeader sealed = fullHeader().seal();
        for (int bit = 0; bit < FrameDescriptor.HEADER_LENGTH * 8; bit++)
        {
            final FrameHeader damaged = copyOf(sealed);
            final int index = bit >>> 3;
            damaged.buffer().putByte(index, (byte)(damaged.buffer().getByte(index) ^ (1 << (bit & 7))));

            final String problem = damaged.validate(MAX_PAYLOAD);

            assertNotNull(problem, "flip of bit " + bit + " went unnoticed");
            if (index >= FrameDescriptor.VERSION_OFFSET)
            {
                assertEquals("header CRC mismatch", problem, "bit " + bit);
            }
        }
    }

    @Test
    void shouldRejectUnknownTypeEvenWhenSealed()
    {
        for (final int code : new int[] {0, 31, 99, 255})
        {
            final FrameHeader header = new FrameHeader().reset(FrameType.ACK);
            header.buffer().putByte(FrameDescriptor.TYPE_OFFSET, (byte)code);
            header.seal();

            final String problem = header.validate(MAX_PAYLOAD);

            assertNotNull(problem, "type " + code);
            assertTrue(problem.contains("unknown frame type " + code), problem);
            assertNull(header.type());
        }
    }

    @Test
    void shouldRejectWrongVersion()
    {
        final FrameHeader header = fullHeader();
        header.buffer().putByte(FrameDescriptor.VERSION_OFFSET, (byte)(FrameDescriptor.VERSION + 1));
        header.seal();

        final String problem = header.validate(MAX_PAYLOAD);

        assertNotNull(problem);
        assertTrue(problem.contains("version"), problem);
    }

    @Test
    void shouldRejectNonZeroReservedBytes()
    {
        for (int i = FrameDescriptor.RESERVED_OFFSET; i < FrameDescriptor.HEADER_CRC_OFFSET; i++)
        {
            final FrameHeader header = fullHeader();
            header.buffer().putByte(i, (byte)0x01);
            header.seal();

            final String problem = header.validate(MAX_PAYLOAD);

            assertNotNull(problem, "reserved byte " + i);
            assertTrue(problem.contains("reserved"), problem);
        }
    }

    @Test
    void shouldRejectPayloadLengthOutOfRange()
    {
        final FrameHeader tooLong = fullHeader().payloadLength(MAX_PAYLOAD + 1).seal();
        final FrameHeader negative = fullHeader().payloadLength(-1).seal();
        final FrameHeader atLimit = fullHeader().payloadLength(MAX_PAYLOAD).seal();
        final FrameHeader empty = fullHeader().payloadLength(0).seal();

        assertNotNull(tooLong.validate(MAX_PAYLOAD));
        assertTrue(tooLong.validate(MAX_PAYLOAD).contains("out of range"), tooLong.validate(MAX_PAYLOAD));
        assertNotNull(negative.validate(MAX_PAYLOAD));
        assertNull(atLimit.validate(MAX_PAYLOAD));
        assertNull(empty.validate(MAX_PAYLOAD));
    }

    @Test
    void shouldWorkOverCallersDirectBufferAtPositionZero()
    {
        final ByteBuffer memory = ByteBuffer.allocateDirect(128);
        final FrameHeader writer = new FrameHeader(memory).reset(FrameType.DIGEST).sequence(42).aux(3).seal();
        final FrameHeader reader = new FrameHeader(memory);

        assertEquals(42, reader.sequence());
        assertEquals(3, reader.aux());
        assertNull(reader.validate(0));
        assertEquals(FrameDescriptor.HEADER_LENGTH, writer.byteBuffer().limit());
    }

    @Test
    void shouldRoundTripErrorPayload()
    {
        final byte[] payload = ErrorPayload.encode(ErrorCode.VOLUME_TOO_SMALL, "target is 1 GiB\nsource 2 GiB: ü");

        assertEquals(ErrorCode.VOLUME_TOO_SMALL, ErrorPayload.code(payload));
        assertEquals("target is 1 GiB\nsource 2 GiB: ü", ErrorPayload.message(payload));
    }

    @Test
    void shouldDecodeErrorPayloadWithoutMessageOrWithUnknownCode()
    {
        final byte[] bare = "BUSY".getBytes(StandardCharsets.UTF_8);
        final byte[] future = "SOMETHING_NEW\nfrom a newer peer".getBytes(StandardCharsets.UTF_8);

        assertEquals(ErrorCode.BUSY, ErrorPayload.code(bare));
        assertEquals("", ErrorPayload.message(bare));
        assertEquals(ErrorCode.INTERNAL, ErrorPayload.code(future));
        assertEquals("from a newer peer", ErrorPayload.message(future));
        assertArrayEquals("IO_ERROR\n".getBytes(StandardCharsets.UTF_8),
            ErrorPayload.encode(ErrorCode.IO_ERROR, ""));
    }
}
