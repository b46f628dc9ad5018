#!/bin/bash
# vm-test.sh - run the RDMA endpoint tests on real (soft) RDMA devices inside the test VM, without Maven.
#
#   mvn -B -pl jni-rdma verify                      # on the host: builds the shim, classes and class path
#   scripts/rdma-vm -- jni-rdma/vm-test.sh          # in the VM: RdmaEndpointVmTest on siw and rxe
#   scripts/rdma-vm -- jni-rdma/vm-test.sh --select-method io.blockmover.rdma.RdmaEndpointVmTest#...
#
# Maven works in the VM too (scripts/rdma-vm -- mvn -o -q -B -pl jni-rdma test -Dtest=RdmaEndpointVmTest
# -Dcheckstyle.skip) but takes about 4 minutes to start under emulation; this takes well under one.
# Exit status: 0 all passed, 1 a test failed, 2 not in the VM or not built.
set -euo pipefail
MODULE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(dirname "$MODULE")
LAUNCHER=$MODULE/target/vm-test-lib/junit-platform-console-standalone.jar   # fetched by the Maven build

die() { echo "vm-test.sh: $*" >&2; exit 2; }
[ -n "${BM_SIW_DEV:-}" ] || die "BM_SIW_DEV is not set: run inside scripts/rdma-vm (the tests need RDMA devices)"
[ -s "$MODULE/target/vm-test-classpath.txt" ] && [ -d "$MODULE/target/test-classes" ] ||
    die "not built: run 'mvn -B -pl jni-rdma verify' on the host first"
[ -s "$LAUNCHER" ] || die "missing $LAUNCHER: run 'mvn -B -pl jni-rdma verify' on the host first"

SELECT=("$@")
[ ${#SELECT[@]} -gt 0 ] || SELECT=(--select-class io.blockmover.rdma.RdmaEndpointVmTest)
cd "$MODULE"
# The same JVM flags as surefire (config/jvm.options); -ea as surefire enables assertions.
exec java @"$ROOT/config/jvm.options" -ea -jar "$LAUNCHER" execute --disable-banner --details=tree \
    --fail-if-no-tests \
    --class-path "target/classes:target/test-classes:$(cat target/vm-test-classpath.txt)" "${SELECT[@]}"
