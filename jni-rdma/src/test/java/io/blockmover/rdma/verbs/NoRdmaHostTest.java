package io.blockmover.rdma.verbs;

import java.io.File;

import com.sun.jna.Native;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

/**
 * What a host without RDMA support looks like through the binding (the build host's kernel has no
 * CONFIG_INFINIBAND): the probe calls fail with ENOSYS/ENODEV and map to {@link RdmaUnavailableException} with a
 * message an operator understands.
 */
class NoRdmaHostTest
{
    @BeforeEach
    void requireHostWithoutRdma()
    {
        final String[] devices = new File("/sys/class/infiniband").list();
        assumeFalse(null != devices && devices.length > 0, "this host has RDMA devices");
    }

    @Test
    void shouldReportNoKernelSupportFromDeviceList()
    {
        final long list = IbVerbs.ibv_get_device_list(0);
        final int errno = Native.getLastError();
        if (0 != list)
        {
            IbVerbs.ibv_free_device_list(list);
        }

        assertEquals(0, list);
        assertEquals(Errno.ENOSYS, errno);
        final RdmaException ex = RdmaException.of("ibv_get_device_list", errno, "listing devices");
        assertInstanceOf(RdmaUnavailableException.class, ex);
        assertEquals(Errno.ENOSYS, ex.errno());
        assertEquals("ibv_get_device_list", ex.functionName());
        assertTrue(ex.getMessage().startsWith("no RDMA device/kernel support on this host: ibv_get_device_list " +
            "failed: ENOSYS (Function not implemented)"), ex.getMessage());
    }

    @Test
    void shouldReportNoDeviceFromEventChannel()
    {
        final long channel = RdmaCm.rdma_create_event_channel();
        final int errno = Native.getLastError();
        if (0 != channel)
        {
            RdmaCm.rdma_destroy_event_channel(channel);
        }

        assertEquals(0, channel);
        assertEquals(Errno.ENODEV, errno);
        final RdmaException ex = RdmaException.of("rdma_create_event_channel", errno, "device 10.0.0.1");
        assertInstanceOf(RdmaUnavailableException.class, ex);
        assertTrue(ex.getMessage().contains("no RDMA device/kernel support"), ex.getMessage());
        assertTrue(ex.getMessage().contains("ENODEV (No such device)"), ex.getMessage());
    }

    @Test
    void shouldKeepOtherErrnosPlain()
    {
        final RdmaException ex = RdmaException.of("rdma_bind_addr", Errno.ENODEV, "binding");
        assertEquals(RdmaException.class, ex.getClass());
        assertEquals("rdma_bind_addr failed: ENODEV (No such device): binding", ex.getMessage());
        assertEquals("errno 200", Errno.name(200));
    }
}
