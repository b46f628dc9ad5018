package io.blockmover.frontend.nbd;

/**
 * A bounded FIFO of request slots between the threads of one connection, as large as the connection has slots, so
 * {@link #put(NbdRequest)} never waits. It waits on its own monitor rather than a {@code java.util.concurrent}
 * queue because a parked AQS waiter allocates a node on every wait, and the data path allocates nothing.
 */
final class RequestRing
{
    private final NbdRequest[] ring;
    private int head;
    private int count;
    private boolean closed;

    RequestRing(final int capacity)
    {
        ring = new NbdRequest[capacity];
    }

    /**
     * @param request to append; there is always room, as a ring holds every slot of its connection at most once.
     */
    synchronized void put(final NbdRequest request)
    {
        if (count == ring.length)
        {
            throw new IllegalStateException("request ring over-full: a slot was handed over twice");
        }
        ring[(head + count) % ring.length] = request;
        count++;
        notify();
    }

    /**
     * Waits for a request.
     *
     * @return the oldest request, or null once the ring is closed and empty (or the thread was interrupted).
     */
    synchronized NbdRequest take()
    {
        while (count == 0 && !closed)
        {
            try
            {
                wait();
            }
            catch (final InterruptedException ex)
            {
                Thread.currentThread().interrupt();
                return null;
            }
        }
        return poll();
    }

    /**
     * @return the oldest request, or null when there is none now; never waits.
     */
    synchronized NbdRequest poll()
    {
        if (count == 0)
        {
            return null;
        }
        final NbdRequest request = ring[head];
        ring[head] = null;
        head = (head + 1) % ring.length;
        count--;
        return request;
    }

    /**
     * Wakes every taker: they drain what is queued, then get null.
     */
    synchronized void close()
    {
        closed = true;
        notifyAll();
    }
}
