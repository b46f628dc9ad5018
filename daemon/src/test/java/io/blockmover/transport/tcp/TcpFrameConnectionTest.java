package io.blockmover.transport.tcp;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Random;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import io.blockmover.protocol.FrameHeader;
import io.blockmover.protocol.FrameType;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Frames over real loopback sockets: small frames that arrive many to a read and large ones read straight into
 * the caller's buffer, bytes that trickle in one at a time, in any mix, each frame whole and in order; the byte
 * count matches what was sent; a peer that closes is an EOF.
 */
@Timeout(60)
class TcpFrameConnectionTest
{
    private static final int[] LENGTHS = {0, 16, 4096, 4096, 100, 8192, 1 << 20, 0, 65536, 65535, 4096, 300_000, 7};

    private ServerSocketChannel server;
    private SocketChannel client;
    private TcpFrameConnection receiver;

    @BeforeEach
    void connect() throws IOException
    {
        server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        client = SocketChannel.open(server.getLocalAddress());
        receiver = new TcpFrameConnection(server.accept());
    }

    @AfterEach
    void disconnect() throws IOException
    {
        receiver.close();
        client.close();
        server.close();
    }

    @Test
    void shouldDeliverEveryFrameWholeAndInOrderWhateverTheSizesAndArrival() throws Exception
    {
        final AtomicReference<Throwable> failed = new AtomicReference<>();
        final int rounds = 40;
        final Thread sender = new Thread(() ->
        {
            try
            {
                send(client, rounds);
            }
            catch (final Throwable ex)
            {
                failed.set(ex);
            }
        });
        sender.start();

        final FrameHeader header = new FrameHeader();
        final ByteBuffer payload = ByteBuffer.allocateDirect(1 << 20);
        long expectedBytes = 0;
        for (int frame = 0; frame < rounds * LENGTHS.length; frame++)
        {
            while (!receiver.receiveHeader(header))
            {
                receiver.awaitIo(10);
            }
            assertNull(header.validate(1 << 20), "frame " + frame);
            assertEquals(frame, header.sequence(), "frames arrive in order");
            final int length = header.payloadLength();
            assertEquals(LENGTHS[frame % LENGTHS.length], length);
            payload.clear().limit(length);
            while (!receiver.receivePayload(payload))
            {
                receiver.awaitIo(10);
            }
            payload.flip();
            for (int i = 0; i < length; i++)
            {
                if (payload.get(i) != pattern(frame, i))
                {
                    throw new AssertionError("frame " + frame + " byte " + i + " of " + length);
                }
            }
            expectedBytes += io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH + length;
        }
        sender.join();
        assertNull(failed.get());
        assertEquals(expectedBytes, receiver.bytesReceived());
        client.close();
        assertThrows(EOFException.class, () ->
        {
            while (!receiver.receiveHeader(header))
            {
                receiver.awaitIo(10);
            }
        });
        receiver.close();
    }

    @Test
    void shouldReleaseAFrameOnlyOnceTheSocketTookAllOfIt() throws Exception
    {
        final TcpFrameConnection sender = new TcpFrameConnection(client);
        final ByteBuffer payload = ByteBuffer.allocateDirect(1 << 20);
        final FrameHeader header = new FrameHeader();
        long started = 0;
        // Nobody reads: frames fill both socket buffers until one is only partly taken.
        while (true)
        {
            header.reset(FrameType.CHUNK).sequence(started).payloadLength(payload.capacity()).seal();
            assertTrue(sender.startSend(header, payload.clear()));
            started++;
            if (!sender.flush())
            {
                break;
            }
            assertEquals(started, sender.framesReleased(), "a frame the socket took whole is released");
        }
        assertTrue(sender.isSendPending());
        assertEquals(started - 1, sender.framesReleased(), "the frame still being written is not");
        assertFalse(sender.startSend(header, payload), "one frame is handed over at a time");

        final ByteBuffer sink = ByteBuffer.allocateDirect(1 << 20);
        while (!sender.flush())
        {
            sink.clear();
            receiver.receivePayload(sink);
        }
        assertEquals(started, sender.framesReleased());
        sender.close();
    }

    /**
     * While corked, small frames are copied behind each other and go out together: at uncork, or when the room to
     * hold them fills, or ahead of a large frame, in the one write that carries it. Each arrives whole and in
     * order, and a held frame counts as released only once written.
     */
    @Test
    void shouldSendSmallFramesStartedWhileCorkedTogetherWholeAndInOrder() throws Exception
    {
        final int[] lengths = {0, 16, 4096, 8192, TcpFrameConnection.COALESCE_PAYLOAD_BYTES, 100, 4096, 4096};
        final int frames = 200;
        final int largeFrame = 150; // Not held: it takes the frames held before it along.
        final AtomicReference<Throwable> failed = new AtomicReference<>();
        final Thread reader = new Thread(() ->
        {
            try
            {
                final FrameHeader header = new FrameHeader();
                final ByteBuffer payload = ByteBuffer.allocateDirect(1 << 20);
                for (int frame = 0; frame < frames; frame++)
                {
                    while (!receiver.receiveHeader(header))
                    {
                        receiver.awaitIo(10);
                    }
                    assertNull(header.validate(1 << 20), "frame " + frame);
                    assertEquals(frame, header.sequence(), "frames arrive in order");
                    assertEquals(frame == largeFrame ? 300_000 : lengths[frame % lengths.length],
                        header.payloadLength());
                    payload.clear().limit(header.payloadLength());
                    while (!receiver.receivePayload(payload))
                    {
                        receiver.awaitIo(10);
                    }
                    for (int i = 0; i < header.payloadLength(); i++)
                    {
                        assertEquals(pattern(frame, i), payload.get(i), "frame " + frame + " byte " + i);
                    }
                }
            }
            catch (final Throwable ex)
            {
                failed.set(ex);
            }
        });
        reader.start();

        final TcpFrameConnection sender = new TcpFrameConnection(client);
        final FrameHeader header = new FrameHeader();
        final ByteBuffer payload = ByteBuffer.allocateDirect(1 << 20);
        long held = 0;
        sender.cork();
        for (int frame = 0; frame < frames; frame++)
        {
            // The last frame's payload buffer, written straight from if it was not held, is free again.
            while (!sender.flush())
            {
                sender.awaitIo(10);
            }
            final int length = frame == largeFrame ? 300_000 : lengths[frame % lengths.length];
            payload.clear().limit(length);
            for (int i = 0; i < length; i++)
            {
                payload.put(i, pattern(frame, i));
            }
            header.reset(FrameType.RECORD).sequence(frame).payloadLength(length).seal();
            assertTrue(sender.startSend(header, payload));
            assertEquals(0, payload.position(), "frame " + frame + ": a payload is copied or written later");
            held = Math.max(held, sender.framesStarted() - sender.framesReleased());
        }
        assertTrue(held > 10, "frames were held back: at most " + held);
        assertTrue(sender.isSendPending(), "the last frames wait for uncork");
        boolean sent = sender.uncork();
        while (!sent)
        {
            sender.awaitIo(10);
            sent = sender.flush();
        }
        assertEquals(frames, sender.framesReleased());
        assertFalse(sender.isSendPending());
        reader.join(30_000);
        assertNull(failed.get());
        sender.close();
    }

    @Test
    void shouldTakeInABurstOfSmallFramesWithOneRead() throws Exception
    {
        final int frames = 8;
        final int length = 4096;
        final int frameBytes = io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH + length;
        final ByteBuffer burst = ByteBuffer.allocateDirect(frames * frameBytes);
        final FrameHeader header = new FrameHeader();
        for (int frame = 0; frame < frames; frame++)
        {
            header.reset(FrameType.RECORD).sequence(frame).payloadLength(length).seal();
            burst.put(header.byteBuffer().clear().limit(io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH));
            for (int i = 0; i < length; i++)
            {
                burst.put(pattern(frame, i));
            }
        }
        burst.flip();
        while (burst.hasRemaining())
        {
            client.write(burst);
        }
        client.shutdownOutput();

        final ByteBuffer payload = ByteBuffer.allocateDirect(length);
        for (int frame = 0; frame < frames; frame++)
        {
            while (!receiver.receiveHeader(header))
            {
                receiver.awaitIo(10);
            }
            assertEquals(frame, header.sequence());
            payload.clear().limit(header.payloadLength());
            while (!receiver.receivePayload(payload))
            {
                receiver.awaitIo(10);
            }
            assertEquals(pattern(frame, length - 1), payload.get(length - 1));
        }
        // The whole burst was in the socket before the first read: one read (two if the kernel split it),
        // where reading header and payload separately took sixteen.
        assertTrue(receiver.socketReads() <= 2, "reads: " + receiver.socketReads());
        assertEquals((long)frames * frameBytes, receiver.bytesReceived());
        receiver.close();
        client.close();
    }

    /**
     * Sends the frames: most rounds as fast as the socket takes them, every fourth one byte at a time, so that
     * headers and payloads are split at every possible place.
     */
    private static void send(final SocketChannel client, final int rounds) throws IOException
    {
        final FrameHeader header = new FrameHeader();
        final ByteBuffer payload = ByteBuffer.allocateDirect(1 << 20);
        final Random random = new Random(7);
        int frame = 0;
        for (int round = 0; round < rounds; round++)
        {
            for (final int length : LENGTHS)
            {
                payload.clear();
                for (int i = 0; i < length; i++)
                {
                    payload.put(i, pattern(frame, i));
                }
                payload.limit(length);
                header.reset(FrameType.RECORD).sequence(frame).payloadLength(length).seal();
                final ByteBuffer h = header.byteBuffer().clear()
                    .limit(io.blockmover.protocol.FrameDescriptor.HEADER_LENGTH);
                if (round % 4 == 3 && length < 10_000)
                {
                    trickle(client, h, random);
                    trickle(client, payload, random);
                }
                else
                {
                    while (h.hasRemaining() || payload.hasRemaining())
                    {
                        client.write(new ByteBuffer[] {h, payload});
                    }
                }
                frame++;
            }
        }
        assertTrue(client.isConnected());
    }

    private static void trickle(final SocketChannel client, final ByteBuffer data, final Random random)
        throws IOException
    {
        while (data.hasRemaining())
        {
            final int end = data.limit();
            data.limit(Math.min(end, data.position() + 1 + random.nextInt(3)));
            while (data.hasRemaining())
            {
                client.write(data);
            }
            data.limit(end);
            Thread.yield();
        }
    }

    private static byte pattern(final int frame, final int index)
    {
        return (byte)(frame * 31 + index * 7 + (index >> 8));
    }
}
