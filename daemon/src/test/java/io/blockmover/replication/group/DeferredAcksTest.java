package io.blockmover.replication.group;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;

import org.HdrHistogram.ConcurrentHistogram;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DeferredAcksTest
{
    @Test
    void shouldCompleteOnlyWritesTheProgressCoversAndEachOnce()
    {
        final DeferredAcks acks = new DeferredAcks(4);
        final int[] outcome = new int[8];
        final ConcurrentHistogram latency = new ConcurrentHistogram(TimeUnit.SECONDS.toNanos(60), 2);
        for (int lsn = 1; lsn <= 3; lsn++)
        {
            final int at = lsn;
            assertTrue(acks.defer(lsn, error -> outcome[at] = 100 + error, 1_000) >= 0);
        }
        assertEquals(3, acks.pending());
        assertEquals(2, acks.completeUpTo(2, 0, latency, 5_000));
        assertEquals(0, acks.completeUpTo(2, 0, latency, 5_000), "completed once");
        assertEquals(100, outcome[1]);
        assertEquals(100, outcome[2]);
        assertEquals(0, outcome[3]);
        assertEquals(2, latency.getTotalCount());
        assertEquals(4_000, latency.getValueAtPercentile(50), 40);
        assertEquals(1, acks.completeUpTo(Long.MAX_VALUE - 1, 58, null, 0));
        assertEquals(158, outcome[3], "failed with the error given");
        assertEquals(0, acks.pending());
    }

    /**
     * One ACK covers several writes: all of them are completed before any is dispatched, so their replies leave
     * together and the replier is woken once. Dispatching each as it was completed woke the replier per write,
     * and on a shared core each wake-up preempted the shipper.
     */
    @Test
    void shouldCompleteABatchBeforeDispatchingAny()
    {
        final DeferredAcks acks = new DeferredAcks(8);
        final java.util.List<String> events = new java.util.ArrayList<>();
        for (int lsn = 1; lsn <= 3; lsn++)
        {
            final int at = lsn;
            acks.defer(lsn, new io.blockmover.frontend.nbd.WriteCompletion()
            {
                @Override
                public void complete(final int error)
                {
                    events.add("complete " + at);
                }

                @Override
                public void dispatch()
                {
                    events.add("dispatch " + at);
                }
            }, 0);
        }
        assertEquals(3, acks.completeUpTo(3, 0, null, 0));
        assertEquals(java.util.List.of("complete", "complete", "complete", "dispatch", "dispatch", "dispatch"),
            events.stream().map(e -> e.substring(0, e.indexOf(' '))).collect(java.util.stream.Collectors.toList()),
            events.toString());
    }

    @Test
    void shouldLetTheWriterTakeBackOnlyWhatNobodyCompleted()
    {
        final DeferredAcks acks = new DeferredAcks(2);
        final int[] calls = new int[1];
        final int first = acks.defer(7, error -> calls[0]++, 0);
        final int second = acks.defer(8, error -> calls[0]++, 0);
        assertEquals(-1, acks.defer(9, error -> calls[0]++, 0), "every slot taken: the writer waits itself");
        assertTrue(acks.takeBack(first, 7));
        assertFalse(acks.takeBack(first, 7), "taken back once");
        assertEquals(1, acks.completeUpTo(8, 0, null, 0));
        assertFalse(acks.takeBack(second, 8), "already completed by the ACK");
        assertEquals(1, calls[0]);
        assertEquals(0, acks.pending());
    }

    /**
     * Writers defer and then re-check the progress as SourceGroup does, taking their write back when the ACK beat
     * them; a completer publishes progress and completes. Every write must be completed exactly once, by one side.
     */
    @Test
    @Timeout(60)
    void shouldCompleteEveryWriteExactlyOnceUnderRaces() throws InterruptedException
    {
        final int writes = 200_000;
        final DeferredAcks acks = new DeferredAcks(64);
        final AtomicIntegerArray completions = new AtomicIntegerArray(writes + 1);
        final AtomicLong nextLsn = new AtomicLong();
        final AtomicLong acked = new AtomicLong();
        final Thread[] writers = new Thread[3];
        for (int w = 0; w < writers.length; w++)
        {
            writers[w] = new Thread(() ->
            {
                long lsn;
                while ((lsn = nextLsn.incrementAndGet()) <= writes)
                {
                    final int at = (int)lsn;
                    final int slot = acks.defer(lsn, error -> completions.incrementAndGet(at), 0);
                    if (slot < 0 || (acked.get() >= lsn && acks.takeBack(slot, lsn)))
                    {
                        completions.incrementAndGet(at); // Answered by the writer itself.
                    }
                    while (acks.pending() > 48)
                    {
                        Thread.onSpinWait(); // Queue depth, as NBD slots bound it.
                    }
                }
            });
            writers[w].start();
        }
        final Thread completer = new Thread(() ->
        {
            while (acked.get() < writes)
            {
                final long progress = Math.min(nextLsn.get(), writes);
                acked.set(progress);
                acks.completeUpTo(progress, 0, null, 0);
            }
            acks.completeUpTo(writes, 0, null, 0);
        });
        completer.start();
        for (final Thread writer : writers)
        {
            writer.join();
        }
        completer.join();
        assertEquals(0, acks.pending());
        for (int lsn = 1; lsn <= writes; lsn++)
        {
            assertEquals(1, completions.get(lsn), "completions of LSN " + lsn);
        }
    }

    /**
     * A write's slot is its LSN modulo the slots: a few hundred connections' writes at queue depth 16 all defer
     * (with 256 slots found by probing, the 257th waited on its thread, holding its connection's reaper), and an
     * ACK completes exactly the writes it covers, whichever came first.
     */
    @Test
    void shouldDeferAsManyWritesAsThereAreSlotsAndCompleteExactlyThoseCovered()
    {
        final DeferredAcks acks = new DeferredAcks(4096);
        final int[] calls = new int[4097];
        for (int lsn = 4096; lsn >= 1; lsn--)
        {
            final int at = lsn;
            assertTrue(acks.defer(lsn, error -> calls[at]++, 0) >= 0, "LSN " + lsn);
        }
        assertEquals(-1, acks.defer(4097, error -> { }, 0), "its slot holds LSN 1, still waiting");
        assertEquals(4096, acks.pending());
        assertEquals(100, acks.completeUpTo(100, 0, null, 0));
        assertEquals(0, acks.completeUpTo(100, 0, null, 0));
        assertEquals(3996, acks.completeUpTo(4096, 0, null, 0));
        for (int lsn = 1; lsn <= 4096; lsn++)
        {
            assertEquals(1, calls[lsn], "completions of LSN " + lsn);
        }
        assertTrue(acks.defer(4097, error -> { }, 0) >= 0, "its slot is free again");
        assertThrows(IllegalArgumentException.class, () -> new DeferredAcks(100));
    }

    /**
     * Progress moves back when the partner dropped records it held (SourceGroup.partnerHolds): a write deferred
     * after that, below what the last scan went through, must still be completed by the next ACK that covers it.
     * Scanning only from where the last scan ended, it was never completed without the rewind.
     */
    @Test
    void shouldCompleteAWriteDeferredBelowTheLastScanAfterProgressMovedBack()
    {
        final DeferredAcks acks = new DeferredAcks(64);
        final int[] calls = new int[1];
        acks.defer(10, error -> { }, 0);
        assertEquals(1, acks.completeUpTo(10, 0, null, 0));
        acks.rewind(3);
        assertTrue(acks.defer(5, error -> calls[0]++, 0) >= 0);
        assertEquals(1, acks.completeUpTo(6, 0, null, 0));
        assertEquals(1, calls[0]);
        assertEquals(0, acks.pending());
    }
}
