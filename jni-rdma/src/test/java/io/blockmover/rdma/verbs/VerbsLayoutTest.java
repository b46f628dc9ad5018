package io.blockmover.rdma.verbs;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Checks every offset, size and constant hard-coded in the verbs package against the installed headers, by
 * compiling and running {@code src/test/c/verbs_layout_probe.c}. Missing gcc or headers fail the test (naming the
 * package to install) rather than skip it: a binding whose layout is unchecked must not pass the build.
 */
class VerbsLayoutTest
{
    private static final Path PROBE_SOURCE = Path.of("src", "test", "c", "verbs_layout_probe.c");

    @Test
    void shouldMatchInstalledHeadersForEveryConstant() throws Exception
    {
        final Map<String, Long> header = runProbe();
        final Map<String, Long> java = javaConstants();

        final List<String> problems = new ArrayList<>();
        for (final Map.Entry<String, Long> entry : java.entrySet())
        {
            final Long expected = header.get(entry.getKey());
            if (null == expected)
            {
                problems.add(entry.getKey() + " = " + entry.getValue() + " has no check in " + PROBE_SOURCE);
            }
            else if (!expected.equals(entry.getValue()))
            {
                problems.add(entry.getKey() + " = " + entry.getValue() + " but the header says " + expected);
            }
        }
        for (final String key : new TreeSet<>(header.keySet()))
        {
            if (!java.containsKey(key))
            {
                problems.add(key + " is probed (" + header.get(key) + ") but no Java constant has that name");
            }
        }

        if (!problems.isEmpty())
        {
            fail("verbs binding does not match the installed rdma-core headers:\n  " + String.join("\n  ", problems));
        }
        assertTrue(java.size() > 150, "expected to check the whole package, checked " + java.size());
    }

    @Test
    void shouldUseLayoutsOfThisArchitecture()
    {
        assertEquals("amd64", System.getProperty("os.arch"), "offsets were verified for x86_64 only");
    }

    private static Map<String, Long> javaConstants()
        throws IOException, URISyntaxException, ReflectiveOperationException
    {
        final Path classes = Path.of(IbVerbs.class.getProtectionDomain().getCodeSource().getLocation().toURI())
            .resolve(IbVerbs.class.getPackageName().replace('.', '/'));
        final Map<String, Long> constants = new TreeMap<>();
        final List<String> classNames = new ArrayList<>();
        try (Stream<Path> files = Files.list(classes))
        {
            files.map((file) -> file.getFileName().toString())
                .filter((name) -> name.endsWith(".class") && !name.contains("$") && !name.startsWith("package-info"))
                .forEach((name) -> classNames.add(name.substring(0, name.length() - ".class".length())));
        }

        for (final String simpleName : classNames)
        {
            final Class<?> type = Class.forName(IbVerbs.class.getPackageName() + "." + simpleName, false,
                VerbsLayoutTest.class.getClassLoader());
            if (type.isEnum())
            {
                for (final Object constant : type.getEnumConstants())
                {
                    final int code = (Integer)type.getMethod("code").invoke(constant);
                    if (code >= 0)
                    {
                        constants.put(simpleName + "." + ((Enum<?>)constant).name(), (long)code);
                    }
                }
                continue;
            }

            for (final Field field : type.getDeclaredFields())
            {
                final int modifiers = field.getModifiers();
                if (Modifier.isPublic(modifiers) && Modifier.isStatic(modifiers) && Modifier.isFinal(modifiers) &&
                    (field.getType() == int.class || field.getType() == long.class))
                {
                    constants.put(simpleName + "." + field.getName(), ((Number)field.get(null)).longValue());
                }
            }
        }

        return constants;
    }

    private static Map<String, Long> runProbe() throws IOException, InterruptedException
    {
        assertTrue(Files.isRegularFile(PROBE_SOURCE), "probe source missing: " + PROBE_SOURCE.toAbsolutePath());
        final Path binary = Path.of("target", "verbs-layout-probe");
        Files.createDirectories(binary.getParent());

        final List<String> compile = List.of("gcc", "-std=c11", "-Wall", "-Werror", "-o", binary.toString(),
            PROBE_SOURCE.toString());
        final Result compiled;
        try
        {
            compiled = run(compile);
        }
        catch (final IOException ex)
        {
            fail("cannot run gcc to check the verbs layouts: install the Debian package gcc (" + ex.getMessage() + ")");
            throw ex;
        }
        if (0 != compiled.exitCode)
        {
            final String hint;
            if (compiled.output.contains("infiniband/verbs.h"))
            {
                hint = "install the Debian package libibverbs-dev";
            }
            else if (compiled.output.contains("rdma/rdma_cma.h"))
            {
                hint = "install the Debian package librdmacm-dev";
            }
            else
            {
                hint = "needs gcc, libibverbs-dev and librdmacm-dev";
            }
            fail("compiling " + PROBE_SOURCE + " failed: " + hint + "\n" + compiled.output);
        }

        final Result probed = run(List.of(binary.toAbsolutePath().toString()));
        assertEquals(0, probed.exitCode, probed.output);
        final Map<String, Long> values = new TreeMap<>();
        for (final String line : probed.output.split("\n"))
        {
            if (line.isBlank())
            {
                continue;
            }
            final String[] parts = line.trim().split(" ");
            assertEquals(2, parts.length, "bad probe line: " + line);
            final Long previous = values.put(parts[0], Long.parseLong(parts[1]));
            assertEquals(null, previous, "probe prints " + parts[0] + " twice");
        }

        return values;
    }

    private static Result run(final List<String> command) throws IOException, InterruptedException
    {
        final Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
        final byte[] output = process.getInputStream().readAllBytes();
        if (!process.waitFor(60, TimeUnit.SECONDS))
        {
            process.destroyForcibly();
            fail("timed out: " + command);
        }

        return new Result(process.exitValue(), new String(output, StandardCharsets.UTF_8));
    }

    private static final class Result
    {
        final int exitCode;
        final String output;

        Result(final int exitCode, final String output)
        {
            this.exitCode = exitCode;
            this.output = output;
        }
    }
}
