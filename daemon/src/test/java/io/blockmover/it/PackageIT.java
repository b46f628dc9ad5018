package io.blockmover.it;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The Debian package and scripts/install for real, through scripts/test-package: build the .deb from the jar
 * this build made, apt-get install it on this machine, check every installed piece and a start of the installed
 * daemon, purge it and check nothing is left; then the same with scripts/install. Root only (it installs to /usr
 * and adds a system user), which CI is.
 */
@Timeout(600)
class PackageIT
{
    @Test
    void shouldInstallCheckAndPurgeTheDebianPackage()
    {
        assumeTrue("root".equals(System.getProperty("user.name")), "installing a package needs root");
        final Run run = Run.of(540, List.of(Testbed.script("test-package"), "--no-build"));
        assertEquals(0, run.exitCode(), run.stdout() + run.stderr());
        assertTrue(run.stdout().matches("(?s).*\\n\\d+ passed, 0 failed\\n$"), run.stdout());
    }
}
