package io.blockmover.frontend.nbd;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.jr.ob.JSON;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import io.blockmover.io.Volume;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Real NBD clients (libnbd's nbdinfo and nbdcopy, qemu-io, qemu-img, fio's nbd engine) against the server on a
 * Unix socket over a real O_DIRECT file. A test is skipped only when its tool is not installed.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class NbdInteropTest
{
    private static final int SIZE = 64 * 1024 * 1024;
    private static final long TOOL_TIMEOUT_S = 40;
    /** Half the export: 8192 writes at QD16 and their verifying reads keep the test to a few seconds. */
    private static final int FIO_SIZE = SIZE / 2;

    @TempDir
    Path dir;

    private Path file;
    private Volume volume;
    private NbdServer server;
    private String uri;
    private Path sparseFile;
    private Volume sparseVolume;
    private String sparseUri;

    /** Exit status and merged output of a finished tool. */
    private record Result(int exitCode, String output)
    {
    }

    @BeforeEach
    void start() throws IOException
    {
        file = dir.resolve("disk.img");
        Files.write(file, NbdServerTest.random(SIZE, 21));
        volume = Volume.open(file, true);
        // 64 MiB, a hole but for 2 MiB of data at 8 MiB and 4 KiB at 40 MiB.
        sparseFile = dir.resolve("sparse.img");
        try (java.io.RandomAccessFile sparse = new java.io.RandomAccessFile(sparseFile.toFile(), "rw"))
        {
            sparse.setLength(SIZE);
            sparse.seek(8L << 20);
            sparse.write(NbdServerTest.random(2 << 20, 24));
            sparse.seek(40L << 20);
            sparse.write(NbdServerTest.random(4096, 25));
        }
        sparseVolume = Volume.open(sparseFile, true);
        final ExportRegistry exports = new ExportRegistry();
        exports.add(new VolumeExport("disk", volume, false));
        exports.add(new VolumeExport("sparse", sparseVolume, false));
        final Path socket = dir.resolve("nbd.sock");
        server = new NbdServer(exports, socket, null, NbdServer.DEFAULT_WORKERS_PER_CONNECTION,
            NbdServer.DEFAULT_MAX_PAYLOAD, System.getLogger("nbd-interop"));
        server.start();
        uri = "nbd+unix:///disk?socket=" + socket;
        sparseUri = "nbd+unix:///sparse?socket=" + socket;
    }

    @AfterEach
    void stop()
    {
        server.close();
        volume.close();
        sparseVolume.close();
    }

    private static boolean installed(final String tool)
    {
        for (final String directory : System.getenv("PATH").split(File.pathSeparator))
        {
            if (Files.isExecutable(Path.of(directory, tool)))
            {
                return true;
            }
        }
        return false;
    }

    private Result run(final String... command) throws IOException, InterruptedException
    {
        assumeTrue(installed(command[0]), command[0] + " is not installed");
        final Process process = new ProcessBuilder(command).redirectErrorStream(true)
            .redirectOutput(dir.resolve("tool.log").toFile()).start();
        if (!process.waitFor(TOOL_TIMEOUT_S, TimeUnit.SECONDS))
        {
            process.destroyForcibly().waitFor();
            fail(String.join(" ", command) + " did not finish in " + TOOL_TIMEOUT_S + " s");
        }
        final String output = Files.readString(dir.resolve("tool.log"), StandardCharsets.UTF_8);
        return new Result(process.exitValue(), output);
    }

    private Result runOk(final String... command) throws IOException, InterruptedException
    {
        final Result result = run(command);
        assertEquals(0, result.exitCode(), String.join(" ", command) + ":\n" + result.output());
        return result;
    }

    private void assertNoServerErrors()
    {
        assertEquals(0, server.errors(), "requests that failed");
        assertEquals(0, server.protocolErrors(), "protocol errors");
    }

    @Test
    @SuppressWarnings("unchecked")
    void shouldDescribeExportToNbdinfo() throws Exception
    {
        final Result result = runOk("nbdinfo", "--json", uri);

        final Map<String, Object> json = JSON.std.mapFrom(result.output());
        final Map<String, Object> export = ((List<Map<String, Object>>)json.get("exports")).get(0);
        assertEquals("disk", export.get("export-name"));
        assertEquals((long)SIZE, ((Number)export.get("export-size")).longValue());
        assertEquals(Boolean.TRUE, export.get("can_flush"));
        assertEquals(Boolean.TRUE, export.get("can_fua"));
        assertEquals(Boolean.TRUE, export.get("can_trim"));
        assertEquals(Boolean.TRUE, export.get("can_zero"));
        assertEquals(Boolean.TRUE, export.get("can_multi_conn"));
        assertEquals(Boolean.FALSE, export.get("is_read_only"));
        assertEquals(4096, ((Number)export.get("block_size_minimum")).intValue());
        assertEquals(NbdServer.DEFAULT_MAX_PAYLOAD, ((Number)export.get("block_size_maximum")).intValue());
        assertNoServerErrors();
    }

    @Test
    void shouldWriteAndVerifyPatternWithQemuIo() throws Exception
    {
        final Result result = runOk("qemu-io", "-f", "raw", uri, "-c", "write -P 0xab 0 1M", "-c",
            "read -P 0xab 0 1M", "-c", "flush");
        assertFalse(result.output().contains("verification failed"), result.output());

        final byte[] expected = new byte[1024 * 1024];
        Arrays.fill(expected, (byte)0xab);
        assertArrayEquals(expected, Arrays.copyOf(Files.readAllBytes(file), expected.length));
        assertNoServerErrors();
    }

    @Test
    void shouldConvertAndCompareWithQemuImg() throws Exception
    {
        final Path source = dir.resolve("source.img");
        Files.write(source, NbdServerTest.random(SIZE, 22));

        runOk("qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", source.toString(), uri);
        runOk("qemu-img", "compare", "-f", "raw", "-F", "raw", source.toString(), uri);

        assertArrayEquals(Files.readAllBytes(source), Files.readAllBytes(file));
        assertNoServerErrors();
    }

    @Test
    void shouldCopyBothWaysWithNbdcopy() throws Exception
    {
        final Path source = dir.resolve("source.img");
        final byte[] content = NbdServerTest.random(SIZE, 23);
        Files.write(source, content);
        final Path target = dir.resolve("target.img");
        Files.write(target, new byte[SIZE]);

        runOk("nbdcopy", "--flush", source.toString(), uri);
        assertArrayEquals(content, Files.readAllBytes(file));
        runOk("nbdcopy", uri, target.toString());
        assertArrayEquals(content, Files.readAllBytes(target));
        assertNoServerErrors();
    }

    /**
     * The export says where its holes are (NBD_CMD_BLOCK_STATUS in the base:allocation context, over structured
     * replies): nbdinfo maps them, qemu-img too, and nbdcopy skips them, so the copy of a thin volume is as thin.
     * Before, every client saw one extent of data and read all of it.
     */
    @Test
    void shouldMapHolesAndCopyThemAsHoles() throws Exception
    {
        final String map = runOk("nbdinfo", "--map", sparseUri).output();
        assertEquals(List.of(
            "0 8388608 3 hole,zero",
            "8388608 2097152 0 data",
            "10485760 31457280 3 hole,zero",
            "41943040 4096 0 data",
            "41947136 25161728 3 hole,zero"),
            map.lines().map(line -> line.trim().replaceAll(" +", " ")).toList());
        final String qemuMap = runOk("qemu-img", "map", "-f", "raw", "--output=json", sparseUri).output();
        assertTrue(qemuMap.contains("\"start\": 8388608, \"length\": 2097152, \"depth\": 0, \"present\": true, " +
            "\"zero\": false, \"data\": true"), qemuMap);

        final Path copy = dir.resolve("copy.img");
        runOk("nbdcopy", sparseUri, copy.toString());
        assertArrayEquals(Files.readAllBytes(sparseFile), Files.readAllBytes(copy));
        final long allocated = SIZE - io.blockmover.FileHoles.of(copy, SIZE).stream()
            .mapToLong(hole -> hole.get(1) - hole.get(0)).sum();
        assertTrue(allocated <= 4L << 20, "the copy of 2 MiB and 4 KiB of data allocated " + allocated + " bytes");
        runOk("qemu-io", "-f", "raw", "-r", sparseUri, "-c", "read -P 0 0 8M", "-c", "read -P 0 60M 4M");
        assertNoServerErrors();
    }

    @Test
    void shouldPassFioRandomWriteVerifyAtQueueDepth16() throws Exception
    {
        final List<String> job = List.of("--name=nbd", "--rw=randwrite", "--bs=4k", "--size=" + FIO_SIZE,
            "--verify=crc32c", "--randseed=1234", "--verify_state_save=0");
        final List<String> command = new ArrayList<>(List.of("fio", "--ioengine=nbd", "--uri=" + uri,
            "--iodepth=16", "--end_fsync=1"));
        command.addAll(job);
        runOk(command.toArray(new String[0]));

        // The same job replayed straight on the file checks that what fio wrote through NBD is what landed.
        final List<String> check = new ArrayList<>(List.of("fio", "--ioengine=psync", "--filename=" + file,
            "--verify_only"));
        check.addAll(job);
        runOk(check.toArray(new String[0]));
        assertTrue(server.bytesWritten() >= FIO_SIZE, "bytes written " + server.bytesWritten());
        assertNoServerErrors();
    }
}
