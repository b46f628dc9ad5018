package io.blockmover.frontend.nbd;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A thread-safe set of exports by name. Any thread may add or remove while connections look names up.
 */
public final class ExportRegistry implements NbdExports
{
    private final ConcurrentHashMap<String, NbdExport> exports = new ConcurrentHashMap<>();

    /**
     * @param export to offer under its name.
     * @throws IllegalArgumentException when that name is taken.
     */
    public void add(final NbdExport export)
    {
        if (exports.putIfAbsent(export.name(), export) != null)
        {
            throw new IllegalArgumentException("an NBD export named '" + export.name() + "' exists already");
        }
    }

    /**
     * Stops offering an export to new connections; connections that opened it keep it until they close.
     *
     * @param name of the export.
     * @return the export removed, or null.
     */
    public NbdExport remove(final String name)
    {
        return exports.remove(name);
    }

    @Override
    public NbdExport find(final String name)
    {
        return exports.get(name);
    }

    @Override
    public List<String> names()
    {
        final List<String> names = new ArrayList<>(exports.keySet());
        Collections.sort(names);
        return names;
    }
}
