package io.blockmover.frontend.nbd;

import java.util.List;

/**
 * The exports a server offers, looked up by name at every handshake, so the daemon may add and remove exports
 * while the server runs. A connection keeps the export it opened until it closes. Called from connection threads
 * concurrently: implementations must be thread-safe.
 */
public interface NbdExports
{
    /**
     * @param name as the client sent it.
     * @return the export, or null when there is none of that name.
     */
    NbdExport find(String name);

    /**
     * @return the names of all exports now, for NBD_OPT_LIST.
     */
    List<String> names();
}
