package io.blockmover.rdma.verbs;

import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.ByteOrder;

import org.agrona.MutableDirectBuffer;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Layouts of {@code struct sockaddr_in} and {@code struct sockaddr_in6}, the addresses rdma_cm binds, resolves and
 * reports. Port and address are in network byte order, the family in host order.
 * <pre>
 *  sockaddr_in (16 bytes)                    sockaddr_in6 (28 bytes)
 *  +-------------------------------+         +-------------------------------+
 *  | sin_family u16 | sin_port be16|  0      | sin6_family u16|sin6_port be16|  0
 *  +-------------------------------+         +-------------------------------+
 *  |      sin_addr (4 bytes, be)   |  4      |    sin6_flowinfo (u32, be)    |  4
 *  +-------------------------------+         +-------------------------------+
 *  |       sin_zero (8 bytes)      |  8      |   sin6_addr (16 bytes, be)    |  8
 *  |                               |         ...                           ...
 *  +-------------------------------+ 16      +-------------------------------+
 *                                            |   sin6_scope_id (u32)         | 24
 *                                            +-------------------------------+ 28
 * </pre>
 */
public final class SockaddrDescriptor
{
    public static final int AF_INET = 2;
    public static final int AF_INET6 = 10;

    public static final int FAMILY_OFFSET = 0;
    public static final int PORT_OFFSET = 2;
    public static final int IN_ADDR_OFFSET = 4;
    /** {@code sizeof(struct sockaddr_in)}. */
    public static final int IN_LENGTH = 16;
    public static final int IN6_FLOWINFO_OFFSET = 4;
    public static final int IN6_ADDR_OFFSET = 8;
    public static final int IN6_SCOPE_ID_OFFSET = 24;
    /** {@code sizeof(struct sockaddr_in6)}. */
    public static final int IN6_LENGTH = 28;

    private SockaddrDescriptor()
    {
    }

    /**
     * Write an IPv4 or IPv6 socket address in C layout.
     *
     * @param buffer  destination, with at least {@link #IN6_LENGTH} bytes from {@code offset}.
     * @param offset  where the sockaddr starts.
     * @param address resolved address and port.
     * @return bytes written.
     */
    public static int write(final MutableDirectBuffer buffer, final int offset, final InetSocketAddress address)
    {
        final InetAddress inetAddress = address.getAddress();
        if (null == inetAddress)
        {
            throw new IllegalArgumentException("unresolved address: " + address);
        }

        buffer.setMemory(offset, IN6_LENGTH, (byte)0);
        final byte[] bytes = inetAddress.getAddress();
        buffer.putShort(offset + PORT_OFFSET, (short)address.getPort(), ByteOrder.BIG_ENDIAN);
        if (inetAddress instanceof Inet4Address)
        {
            buffer.putShort(offset + FAMILY_OFFSET, (short)AF_INET);
            buffer.putBytes(offset + IN_ADDR_OFFSET, bytes);
            return IN_LENGTH;
        }

        buffer.putShort(offset + FAMILY_OFFSET, (short)AF_INET6);
        buffer.putBytes(offset + IN6_ADDR_OFFSET, bytes);
        buffer.putInt(offset + IN6_SCOPE_ID_OFFSET, ((Inet6Address)inetAddress).getScopeId());
        return IN6_LENGTH;
    }

    /**
     * Read a socket address in C layout at a native address.
     *
     * @param address native address of a sockaddr_in or sockaddr_in6, or 0.
     * @return the address, or null if {@code address} is 0 or the family is neither IPv4 nor IPv6.
     */
    public static InetSocketAddress read(final long address)
    {
        if (0 == address)
        {
            return null;
        }

        final UnsafeBuffer buffer = new UnsafeBuffer(address, IN6_LENGTH);
        final int family = buffer.getShort(FAMILY_OFFSET) & 0xFFFF;
        final int port = buffer.getShort(PORT_OFFSET, ByteOrder.BIG_ENDIAN) & 0xFFFF;
        final byte[] bytes;
        if (AF_INET == family)
        {
            bytes = new byte[4];
            buffer.getBytes(IN_ADDR_OFFSET, bytes);
        }
        else if (AF_INET6 == family)
        {
            bytes = new byte[16];
            buffer.getBytes(IN6_ADDR_OFFSET, bytes);
        }
        else
        {
            return null;
        }

        try
        {
            return new InetSocketAddress(InetAddress.getByAddress(bytes), port);
        }
        catch (final UnknownHostException ex)
        {
            throw new IllegalStateException("impossible: address of length " + bytes.length, ex);
        }
    }
}
