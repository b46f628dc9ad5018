package io.blockmover.rdma.verbs;

import java.net.InetAddress;
import java.net.InetSocketAddress;

import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

class SockaddrDescriptorTest
{
    private final UnsafeBuffer buffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(64, 8));

    @Test
    void shouldWriteIpv4InNetworkByteOrder() throws Exception
    {
        final int length = SockaddrDescriptor.write(buffer, 0,
            new InetSocketAddress(InetAddress.getByName("10.98.1.2"), 0x1234));

        assertEquals(SockaddrDescriptor.IN_LENGTH, length);
        assertEquals(SockaddrDescriptor.AF_INET, buffer.getShort(SockaddrDescriptor.FAMILY_OFFSET));
        assertEquals(0x12, buffer.getByte(SockaddrDescriptor.PORT_OFFSET));
        assertEquals(0x34, buffer.getByte(SockaddrDescriptor.PORT_OFFSET + 1));
        assertEquals(10, buffer.getByte(SockaddrDescriptor.IN_ADDR_OFFSET));
        assertEquals(2, buffer.getByte(SockaddrDescriptor.IN_ADDR_OFFSET + 3));
    }

    @Test
    void shouldRoundTripIpv4AndIpv6() throws Exception
    {
        final InetSocketAddress ipv4 = new InetSocketAddress(InetAddress.getByName("10.98.2.1"), 18515);
        SockaddrDescriptor.write(buffer, 0, ipv4);
        assertEquals(ipv4, SockaddrDescriptor.read(buffer.addressOffset()));

        final InetSocketAddress ipv6 = new InetSocketAddress(InetAddress.getByName("fd00::1:2"), 65535);
        assertEquals(SockaddrDescriptor.IN6_LENGTH, SockaddrDescriptor.write(buffer, 0, ipv6));
        assertEquals(ipv6, SockaddrDescriptor.read(buffer.addressOffset()));
    }

    @Test
    void shouldReadNothingFromNullOrUnknownFamily()
    {
        assertNull(SockaddrDescriptor.read(0));
        buffer.setMemory(0, 32, (byte)0);
        assertNull(SockaddrDescriptor.read(buffer.addressOffset()));
    }
}
