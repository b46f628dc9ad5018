package io.blockmover.rdma.verbs;

import java.lang.management.ManagementFactory;

import com.sun.jna.Callback;
import com.sun.jna.CallbackReference;
import com.sun.jna.Function;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import org.agrona.BufferUtil;
import org.agrona.concurrent.UnsafeBuffer;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The C shim must dispatch each data-path verb through the right slot of the context's ops table with the
 * arguments unchanged, and cost little. Runs without RDMA hardware: a fake {@code ibv_context} whose ops point at
 * Java callbacks (for the arguments) or at libc's {@code getpagesize} (for the cost of the mechanism alone).
 */
class VerbsShimTest
{
    private static final int ITERATIONS = 2_000_000;

    interface ThreeArgumentOp extends Callback
    {
        int invoke(long first, long second, long third);
    }

    interface PollCqOp extends Callback
    {
        int invoke(long cq, int numEntries, long wc);
    }

    interface NotifyOp extends Callback
    {
        int invoke(long cq, int solicitedOnly);
    }

    private final long[] seen = new long[4];

    private final ThreeArgumentOp postSend = (qp, wr, bad) -> record(1, qp, wr, bad);
    private final ThreeArgumentOp postRecv = (qp, wr, bad) -> record(2, qp, wr, bad);
    private final PollCqOp pollCq = (cq, n, wc) -> record(3, cq, n, wc);
    private final NotifyOp notify = (cq, solicited) -> record(4, cq, solicited, 0);

    private int record(final int op, final long a, final long b, final long c)
    {
        seen[0] = op;
        seen[1] = a;
        seen[2] = b;
        seen[3] = c;
        return 100 + op;
    }

    @Test
    void shouldDispatchThroughTheContextOpsTable()
    {
        final FakeContext fake = new FakeContext();
        fake.setOp(IbvContextDescriptor.OPS_POST_SEND_OFFSET, address(postSend));
        fake.setOp(IbvContextDescriptor.OPS_POST_RECV_OFFSET, address(postRecv));
        fake.setOp(IbvContextDescriptor.OPS_POLL_CQ_OFFSET, address(pollCq));
        fake.setOp(IbvContextDescriptor.OPS_REQ_NOTIFY_CQ_OFFSET, address(notify));

        assertEquals(101, IbVerbs.ibv_post_send(fake.qp, 0x1111, 0x2222));
        assertArgs(1, fake.qp, 0x1111, 0x2222);
        assertEquals(102, IbVerbs.ibv_post_recv(fake.qp, 0x3333, 0x4444));
        assertArgs(2, fake.qp, 0x3333, 0x4444);
        assertEquals(103, IbVerbs.ibv_poll_cq(fake.cq, 16, 0x5555));
        assertArgs(3, fake.cq, 16, 0x5555);
        assertEquals(104, IbVerbs.ibv_req_notify_cq(fake.cq, 1));
        assertArgs(4, fake.cq, 1, 0);
    }

    @Test
    void shouldCostLittleAndAllocateNothingPerCall()
    {
        final long getpagesize = Pointer.nativeValue(NativeLibrary.getInstance("c").getFunction("getpagesize"));
        final FakeContext fake = new FakeContext();
        fake.setOp(IbvContextDescriptor.OPS_POST_SEND_OFFSET, getpagesize);
        fake.setOp(IbvContextDescriptor.OPS_POLL_CQ_OFFSET, getpagesize);

        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)ManagementFactory.getThreadMXBean();
        final long threadId = Thread.currentThread().getId();
        long sum = 0;
        double bestPostSendNs = Double.MAX_VALUE;
        double bestPollCqNs = Double.MAX_VALUE;
        long allocated = 0;
        for (int round = 0; round < 4; round++)
        {
            final long bytesBefore = threads.getThreadAllocatedBytes(threadId);
            final long start = System.nanoTime();
            for (int i = 0; i < ITERATIONS; i++)
            {
                sum += IbVerbs.ibv_post_send(fake.qp, 0, 0);
            }
            final long middle = System.nanoTime();
            for (int i = 0; i < ITERATIONS; i++)
            {
                sum += IbVerbs.ibv_poll_cq(fake.cq, 16, 0);
            }
            final long end = System.nanoTime();
            allocated = threads.getThreadAllocatedBytes(threadId) - bytesBefore;
            bestPostSendNs = Math.min(bestPostSendNs, (middle - start) / (double)ITERATIONS);
            bestPollCqNs = Math.min(bestPollCqNs, (end - middle) / (double)ITERATIONS);
        }

        // For comparison: JNA's generic Function.invoke through the same function pointer, the alternative to
        // the shim. It boxes and copies its argument array on every call.
        final Function function = Function.getFunction(new Pointer(getpagesize));
        final Object[] args = {new Pointer(fake.qp), Pointer.NULL, Pointer.NULL};
        final long functionBytesBefore = threads.getThreadAllocatedBytes(threadId);
        final long functionStart = System.nanoTime();
        for (int i = 0; i < ITERATIONS / 4; i++)
        {
            sum += function.invokeInt(args);
        }
        final double functionNs = (System.nanoTime() - functionStart) / (ITERATIONS / 4.0);
        final double functionBytes = (threads.getThreadAllocatedBytes(threadId) - functionBytesBefore) /
            (ITERATIONS / 4.0);

        System.out.printf("verbs shim per call: ibv_post_send %.1f ns, ibv_poll_cq %.1f ns, %d bytes allocated " +
            "in %d calls; JNA Function.invokeInt %.1f ns and %.1f bytes per call%n",
            bestPostSendNs, bestPollCqNs, allocated, 2 * ITERATIONS, functionNs, functionBytes);
        assertTrue(sum > 0);
        // No timed assertion (a noisy CI machine would make it flaky): that the shim calls allocate nothing shows
        // they take the direct path, not JNA's generic invoke, which boxes and copies its arguments on every call.
        assertTrue(allocated < 4096, "shim calls allocated " + allocated + " bytes");
    }

    private void assertArgs(final long op, final long a, final long b, final long c)
    {
        assertEquals(op, seen[0], "op");
        assertEquals(a, seen[1], "first argument");
        assertEquals(b, seen[2], "second argument");
        assertEquals(c, seen[3], "third argument");
    }

    private static long address(final Callback callback)
    {
        return Pointer.nativeValue(CallbackReference.getFunctionPointer(callback));
    }

    /**
     * A zeroed ibv_context plus a QP and a CQ whose first field points at it, as the inline verbs expect.
     */
    private static final class FakeContext
    {
        final UnsafeBuffer context =
            new UnsafeBuffer(BufferUtil.allocateDirectAligned(IbvContextDescriptor.LENGTH, 64));
        final UnsafeBuffer qpBuffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(IbvQpDescriptor.LENGTH, 64));
        final UnsafeBuffer cqBuffer = new UnsafeBuffer(BufferUtil.allocateDirectAligned(IbvCqDescriptor.LENGTH, 64));
        final long qp = qpBuffer.addressOffset();
        final long cq = cqBuffer.addressOffset();

        FakeContext()
        {
            qpBuffer.putLong(IbvQpDescriptor.CONTEXT_OFFSET, context.addressOffset());
            cqBuffer.putLong(IbvCqDescriptor.CONTEXT_OFFSET, context.addressOffset());
        }

        void setOp(final int offset, final long function)
        {
            context.putLong(offset, function);
        }
    }
}
