package io.blockmover.frontend.nbd;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Tests: an export that passes every call to a real one; subclasses override what they observe or change.
 */
class ForwardingExport implements NbdExport
{
    final NbdExport delegate;

    ForwardingExport(final NbdExport delegate)
    {
        this.delegate = delegate;
    }

    @Override
    public String name()
    {
        return delegate.name();
    }

    @Override
    public long size()
    {
        return delegate.size();
    }

    @Override
    public boolean isReadOnly()
    {
        return delegate.isReadOnly();
    }

    @Override
    public void read(final long offset, final ByteBuffer dst, final int length) throws IOException
    {
        delegate.read(offset, dst, length);
    }

    @Override
    public void write(final long offset, final ByteBuffer src, final int length, final boolean fua)
        throws IOException
    {
        delegate.write(offset, src, length, fua);
    }

    @Override
    public void flush() throws IOException
    {
        delegate.flush();
    }

    @Override
    public void trim(final long offset, final long length) throws IOException
    {
        delegate.trim(offset, length);
    }

    @Override
    public void writeZeroes(final long offset, final long length, final boolean fua) throws IOException
    {
        delegate.writeZeroes(offset, length, fua);
    }
}
