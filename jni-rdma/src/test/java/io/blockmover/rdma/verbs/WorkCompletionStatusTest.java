package io.blockmover.rdma.verbs;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

class WorkCompletionStatusTest
{
    @Test
    void shouldMapEveryCodeToItsConstant()
    {
        for (final WorkCompletionStatus status : WorkCompletionStatus.values())
        {
            if (WorkCompletionStatus.UNKNOWN != status)
            {
                assertSame(status, WorkCompletionStatus.get(status.code()));
            }
        }
        assertSame(WorkCompletionStatus.SUCCESS, WorkCompletionStatus.get(0));
        assertSame(WorkCompletionStatus.WR_FLUSH_ERR, WorkCompletionStatus.get(5));
        assertSame(WorkCompletionStatus.RETRY_EXC_ERR, WorkCompletionStatus.get(12));
    }

    @Test
    void shouldMapOutOfRangeCodesToUnknown()
    {
        assertSame(WorkCompletionStatus.UNKNOWN, WorkCompletionStatus.get(-1));
        assertSame(WorkCompletionStatus.UNKNOWN, WorkCompletionStatus.get(24));
        assertSame(WorkCompletionStatus.UNKNOWN, WorkCompletionStatus.get(Integer.MAX_VALUE));
    }

    @Test
    void shouldUseTheSameWordsAsLibibverbs()
    {
        for (final WorkCompletionStatus status : WorkCompletionStatus.values())
        {
            if (WorkCompletionStatus.UNKNOWN != status)
            {
                assertEquals(IbVerbs.ibv_wc_status_str(status.code()), status.message(), status.cName());
            }
        }
    }

    @Test
    void shouldDescribeWithCNameCodeAndMeaning()
    {
        assertEquals("IBV_WC_RETRY_EXC_ERR (12) transport retry counter exceeded: the peer stopped answering: " +
            "dead or unreachable", WorkCompletionStatus.RETRY_EXC_ERR.describe());
        assertEquals("IBV_WC_SUCCESS (0) success", WorkCompletionStatus.SUCCESS.describe());
        assertNotNull(WorkCompletionStatus.WR_FLUSH_ERR.meaning());
    }

    @Test
    void shouldNotAllocateOnLookup()
    {
        final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean)java.lang.management.ManagementFactory.getThreadMXBean();
        final long threadId = Thread.currentThread().getId();
        int sum = 0;
        for (int i = 0; i < 100_000; i++)
        {
            sum += WorkCompletionStatus.get(i & 31).ordinal();
        }
        final long before = threads.getThreadAllocatedBytes(threadId);
        for (int i = 0; i < 1_000_000; i++)
        {
            sum += WorkCompletionStatus.get(i & 31).ordinal();
        }
        final long allocated = threads.getThreadAllocatedBytes(threadId) - before;
        assertTrue(sum > 0);
        assertTrue(allocated < 1024, "lookup allocated " + allocated + " bytes");
    }

    @Test
    void shouldNameCmEventsLikeLibrdmacm()
    {
        for (final RdmaCmEventType type : RdmaCmEventType.values())
        {
            if (RdmaCmEventType.UNKNOWN != type)
            {
                assertSame(type, RdmaCmEventType.get(type.code()));
                assertEquals(RdmaCm.rdma_event_str(type.code()), type.cName());
            }
        }
        assertSame(RdmaCmEventType.UNKNOWN, RdmaCmEventType.get(99));
    }
}
