package io.blockmover.daemon;

import java.net.InetSocketAddress;
import java.nio.file.Path;

/**
 * One configured peer, validated.
 *
 * @param name      as the peer names itself in HELLO.
 * @param address   where its listener is.
 * @param keyFile   file holding the shared key (mode 0600).
 * @param key       the key bytes.
 * @param transport requested transport.
 */
public record PeerConfig(String name, InetSocketAddress address, Path keyFile, byte[] key, TransportKind transport)
{
    /**
     * Transport requested for a peer.
     */
    public enum TransportKind
    {
        AUTO, TCP, RDMA
    }
}
