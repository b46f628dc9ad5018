package io.blockmover.frontend.nbd;

import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

import io.blockmover.io.Volume;

/**
 * Serves one file over NBD until killed, for measuring against other servers by hand:
 * {@code java @config/jvm.options -cp CLASSPATH io.blockmover.frontend.nbd.NbdBenchServer FILE SOCKET [WORKERS]}.
 */
public final class NbdBenchServer
{
    private NbdBenchServer()
    {
    }

    /**
     * @param args file, socket path, optional workers per connection.
     * @throws InterruptedException never, in practice: the process is killed.
     */
    public static void main(final String[] args) throws InterruptedException
    {
        final int workers = args.length > 2 ? Integer.parseInt(args[2]) : NbdServer.DEFAULT_WORKERS_PER_CONNECTION;
        final ExportRegistry exports = new ExportRegistry();
        final Volume volume = Volume.open(Path.of(args[0]), true);
        exports.add(new VolumeExport("disk", volume, false));
        final NbdServer server = new NbdServer(exports, Path.of(args[1]), null, workers,
            NbdServer.DEFAULT_MAX_PAYLOAD, System.getLogger("nbd-bench"));
        Runtime.getRuntime().addShutdownHook(new Thread(() ->
        {
            server.close();
            volume.close();
        }));
        server.start();
        new CountDownLatch(1).await();
    }
}
