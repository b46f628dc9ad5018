package io.blockmover.rdma;

import java.io.File;
import java.net.InetAddress;

import io.blockmover.rdma.verbs.Errno;
import io.blockmover.rdma.verbs.RdmaUnavailableException;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

/**
 * Opening a device on a host without RDMA must say so plainly instead of surfacing a bare errno.
 */
class NoRdmaDeviceTest
{
    @Test
    void shouldExplainThatTheHostHasNoRdma() throws Exception
    {
        final String[] devices = new File("/sys/class/infiniband").list();
        assumeFalse(null != devices && devices.length > 0, "this host has RDMA devices");

        final RdmaUnavailableException ex = assertThrows(RdmaUnavailableException.class,
            () -> RdmaDevice.open(InetAddress.getLoopbackAddress()));

        assertEquals(Errno.ENODEV, ex.errno());
        assertEquals("rdma_create_event_channel", ex.functionName());
        assertTrue(ex.getMessage().startsWith("no RDMA device/kernel support on this host: "), ex.getMessage());
    }

    @Test
    void shouldExplainWhyNoDevicesCanBeListed()
    {
        final String[] devices = new File("/sys/class/infiniband").list();
        assumeFalse(null != devices && devices.length > 0, "this host has RDMA devices");

        final RdmaUnavailableException ex = assertThrows(RdmaUnavailableException.class, RdmaDevice::deviceNames);

        assertEquals(Errno.ENOSYS, ex.errno());
        assertEquals("no RDMA device/kernel support on this host: ibv_get_device_list failed: ENOSYS (Function not " +
            "implemented): listing RDMA devices (needs a kernel with CONFIG_INFINIBAND, an RDMA device such as " +
            "rxe/siw/mlx5, and rdma-core)", ex.getMessage());
    }
}
