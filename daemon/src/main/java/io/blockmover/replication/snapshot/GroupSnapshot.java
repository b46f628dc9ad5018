package io.blockmover.replication.snapshot;

import io.blockmover.replication.group.ApplyHook;

/**
 * The copy-on-write views of every volume of a destination group, frozen at one LSN boundary: the applier's hook
 * that preserves each volume's old contents before a record overwrites them. Applier thread for
 * {@link #beforeApply}; the views themselves are thread-safe.
 */
public final class GroupSnapshot implements ApplyHook, AutoCloseable
{
    private final CopyOnWriteView[] views;

    /**
     * @param views one per volume of the group, in the group's order.
     */
    public GroupSnapshot(final CopyOnWriteView[] views)
    {
        this.views = views.clone();
    }

    @Override
    public void beforeApply(final int volume, final long offset, final int length)
    {
        views[volume].preserve(offset, length);
    }

    public int viewCount()
    {
        return views.length;
    }

    public CopyOnWriteView view(final int index)
    {
        return views[index];
    }

    /**
     * @return the first view's failure, or null when all are well.
     */
    public String failure()
    {
        for (final CopyOnWriteView view : views)
        {
            final String f = view.failure();
            if (f != null)
            {
                return f;
            }
        }
        return null;
    }

    /**
     * Closes every view and deletes its files; the applier must no longer call this hook.
     */
    @Override
    public void close()
    {
        for (final CopyOnWriteView view : views)
        {
            if (view != null)
            {
                view.close();
            }
        }
    }
}
