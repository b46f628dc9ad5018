package io.blockmover.replication.verify;

import java.nio.ByteBuffer;
import java.util.zip.CRC32C;

import org.agrona.BufferUtil;
import org.junit.jupiter.api.Test;

import io.blockmover.buffer.Slab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * The VERIFY payload: its layout, the per-sub-block digests, the comparison that locates a difference, and the
 * checks that keep a malformed record from being trusted.
 */
class VerifyRecordTest
{
    private static final int REGION = 1024 * 1024;

    private static ByteBuffer region(final int length, final int seed)
    {
        final ByteBuffer b = BufferUtil.allocateDirectAligned(REGION, Slab.ALIGNMENT);
        for (int i = 0; i < length; i++)
        {
            b.put(i, (byte)(seed + i * 7 + (i >> 12)));
        }
        return b.clear().limit(length);
    }

    @Test
    void shouldUseARecordFlagNoOtherRecordFlagUses()
    {
        // RECORD_UNCLEAN once had the value 4 too: every record sent during a resync then read as a VERIFY.
        final int[] others = {io.blockmover.replication.group.SourceGroup.RECORD_RESYNC,
            io.blockmover.replication.group.GroupReceiver.RECORD_RESTART,
            io.blockmover.replication.group.GroupReceiver.RECORD_UNCLEAN,
            io.blockmover.replication.group.SourceGroup.RECORD_WRITTEN};
        int seen = VerifyRecord.RECORD_VERIFY;
        for (final int flag : others)
        {
            assertEquals(0, seen & flag, "record flag " + flag + " is taken twice");
            seen |= flag;
        }
    }

    @Test
    void shouldUse64KiBSubBlocksAndNeverMoreThan64APerRegion()
    {
        assertEquals(65536, VerifyRecord.subBlockLength(1 << 20));
        assertEquals(65536, VerifyRecord.subBlockLength(4 << 20));
        assertEquals(131072, VerifyRecord.subBlockLength(8 << 20));
        assertEquals(32768, VerifyRecord.subBlockLength(32768), "a region smaller than a sub-block is one");
    }

    @Test
    void shouldLayOutTheDigestsAsDocumented()
    {
        final VerifyRecord record = new VerifyRecord();
        final ByteBuffer data = region(REGION, 3);
        final ByteBuffer payload = ByteBuffer.allocate(VerifyRecord.MAX_LENGTH).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        final int length = record.encode(42, data, REGION, 65536, payload);
        assertEquals(24 + 16 * 4, length);
        assertEquals(42, payload.getLong(0));
        assertEquals(REGION, payload.getInt(8));
        assertEquals(65536, payload.getInt(12));
        assertEquals(16, payload.getInt(16));
        final CRC32C crc = new CRC32C();
        final byte[] bytes = new byte[65536];
        data.duplicate().position(5 * 65536).get(bytes);
        crc.update(bytes);
        assertEquals((int)crc.getValue(), payload.getInt(24 + 5 * 4), "digest 5 is CRC32C of sub-block 5");
        assertEquals(0, data.position(), "the data buffer is left as it was");
        assertEquals(REGION, data.limit());
        payload.limit(length);
        assertNull(record.check(payload, REGION));
        assertEquals(42, record.jobId(payload));
    }

    @Test
    void shouldLocateADifferenceToItsSubBlock()
    {
        final VerifyRecord record = new VerifyRecord();
        final ByteBuffer source = region(REGION, 9);
        final ByteBuffer payload = ByteBuffer.allocate(VerifyRecord.MAX_LENGTH);
        payload.limit(record.encode(7, source, REGION, 65536, payload));
        final ByteBuffer destination = region(REGION, 9);
        assertEquals(0, record.compare(payload, destination));
        destination.put(2 * 65536 + 100, (byte)~destination.get(2 * 65536 + 100));
        destination.put(15 * 65536 + 65535, (byte)~destination.get(15 * 65536 + 65535));
        assertEquals((1L << 2) | (1L << 15), record.compare(payload, destination));
    }

    @Test
    void shouldCoverTheShortLastRegionOfAVolume()
    {
        final VerifyRecord record = new VerifyRecord();
        final int covered = 3 * 65536 + 4096;
        final ByteBuffer source = region(covered, 1);
        final ByteBuffer payload = ByteBuffer.allocate(VerifyRecord.MAX_LENGTH);
        payload.limit(record.encode(1, source, covered, 65536, payload));
        assertEquals(4, record.count(payload));
        assertNull(record.check(payload, REGION));
        final ByteBuffer destination = region(REGION, 1);
        destination.put(covered, (byte)0x55);
        assertEquals(0, record.compare(payload, destination), "bytes past the covered length do not count");
        destination.put(covered - 1, (byte)~destination.get(covered - 1));
        assertEquals(1L << 3, record.compare(payload, destination));
    }

    @Test
    void shouldRejectMalformedPayloads()
    {
        final VerifyRecord record = new VerifyRecord();
        final ByteBuffer payload = ByteBuffer.allocate(VerifyRecord.MAX_LENGTH);
        final int length = record.encode(1, region(REGION, 0), REGION, 65536, payload);
        assertNotNull(record.check(payload.duplicate().limit(10), REGION), "too short");
        assertNotNull(record.check(payload.duplicate().limit(length - 4), REGION), "a digest missing");
        assertNotNull(record.check(payload.duplicate().limit(length), REGION / 2), "covers more than a region");
        final ByteBuffer lying = ByteBuffer.allocate(VerifyRecord.MAX_LENGTH).put(payload.array());
        lying.order(java.nio.ByteOrder.LITTLE_ENDIAN).putInt(16, 65);
        assertNotNull(record.check(lying.clear().limit(length), REGION), "more digests than fit a mask");
    }

    @Test
    void shouldParseIntervalsAsAnAdminWritesThem()
    {
        assertEquals(7L * 86_400_000, VerifyInterval.parseMs("7d"));
        assertEquals(12L * 3_600_000, VerifyInterval.parseMs("12h"));
        assertEquals(90_000, VerifyInterval.parseMs("90s"));
        assertEquals(14L * 86_400_000, VerifyInterval.parseMs("2w"));
        assertEquals(0, VerifyInterval.parseMs("off"));
        assertEquals("7d", VerifyInterval.format(7L * 86_400_000));
        assertEquals("90s", VerifyInterval.format(90_000));
        assertEquals("off", VerifyInterval.format(0));
        assertThrows(IllegalArgumentException.class, () -> VerifyInterval.parseMs("weekly"));
        assertThrows(IllegalArgumentException.class, () -> VerifyInterval.parseMs("-1d"));
        assertThrows(IllegalArgumentException.class, () -> VerifyInterval.parseMs("d"));
    }
}
