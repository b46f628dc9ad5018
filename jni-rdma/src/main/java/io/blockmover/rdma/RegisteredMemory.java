package io.blockmover.rdma;

import java.nio.ByteBuffer;

/**
 * A caller-supplied direct {@link ByteBuffer} registered with {@code ibv_reg_mr} in one {@link RdmaDevice}'s
 * protection domain, with access LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ so that it can be the source or sink of
 * SEND, RECV, RDMA WRITE and RDMA READ (iWARP needs REMOTE_WRITE on READ sinks).
 * <p>
 * Register once at start-up and reuse: registration pins pages and costs a system call per page range. Offsets
 * given to {@link RdmaEndpoint} post methods are relative to the start of the buffer (index 0, not its position).
 * The buffer is referenced for the life of the registration so the memory cannot be freed under the adapter.
 * <p>
 * Threading: create and close on the owning (conductor) thread; the accessors are plain reads of final-once
 * fields and may be used by the thread that owns the endpoint after a safe hand-off.
 */
public final class RegisteredMemory implements AutoCloseable
{
    private final RdmaDevice device;
    private final ByteBuffer buffer;
    private final long address;
    private final int length;
    private final int lkey;
    private final int rkey;
    private final long pinnedBytes;
    private long mr;

    RegisteredMemory(
        final RdmaDevice device,
        final ByteBuffer buffer,
        final long address,
        final int length,
        final long mr,
        final int lkey,
        final int rkey,
        final long pinnedBytes)
    {
        this.device = device;
        this.buffer = buffer;
        this.address = address;
        this.length = length;
        this.mr = mr;
        this.lkey = lkey;
        this.rkey = rkey;
        this.pinnedBytes = pinnedBytes;
    }

    /**
     * The registered buffer.
     *
     * @return the caller's buffer.
     */
    public ByteBuffer buffer()
    {
        return buffer;
    }

    /**
     * Native address of byte 0, which the peer uses as the base of RDMA WRITE/READ targets.
     *
     * @return address.
     */
    public long address()
    {
        return address;
    }

    /**
     * Registered length.
     *
     * @return bytes.
     */
    public int length()
    {
        return length;
    }

    /**
     * Local key, used in the SGEs of local work requests.
     *
     * @return lkey.
     */
    public int lkey()
    {
        return lkey;
    }

    /**
     * Remote key, to advertise to the peer for RDMA WRITE/READ into this memory.
     *
     * @return rkey.
     */
    public int rkey()
    {
        return rkey;
    }

    /**
     * The device (protection domain) the memory is registered with.
     *
     * @return the device.
     */
    public RdmaDevice device()
    {
        return device;
    }

    /**
     * Whether {@link #close()} has run.
     *
     * @return true once deregistered.
     */
    public boolean isClosed()
    {
        return 0 == mr;
    }

    long mr()
    {
        return mr;
    }

    /**
     * Deregister. Work requests still using the memory then fail with a protection error, so close endpoints
     * first. Idempotent.
     */
    public void close()
    {
        if (0 != mr)
        {
            final long region = mr;
            mr = 0;
            device.deregister(this, region, pinnedBytes);
        }
    }

    public String toString()
    {
        return "RegisteredMemory{address=0x" + Long.toHexString(address) + ", length=" + length +
            ", lkey=0x" + Integer.toHexString(lkey) + ", rkey=0x" + Integer.toHexString(rkey) +
            ", device=" + device.name() + (isClosed() ? ", closed" : "") + '}';
    }
}
