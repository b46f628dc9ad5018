package io.blockmover.replication.group;

/**
 * Called by a destination group's applier just before it writes a record to a volume, so that something that
 * must see the volume as it was (a test-failover view keeping a point-in-time copy) can act first.
 * <p>
 * Threading: the applier thread only, once per record; must not allocate and must not throw: a failure of the
 * hook is the hook's own (it records it and stops), never a reason to stop replication.
 */
public interface ApplyHook
{
    /**
     * @param volume index of the volume in the group.
     * @param offset byte offset the record is about to overwrite.
     * @param length bytes it is about to overwrite.
     */
    void beforeApply(int volume, long offset, int length);
}
