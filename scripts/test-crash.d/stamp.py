#!/usr/bin/python3 -I
"""stamp.py: the writer and the checker of scripts/test-crash (run inside its VM).

  stamp.py write SOCKET EXPORT LEDGER SECONDS   write stamped blocks through a group's NBD export, one at a time,
                                                each made durable (FLUSH, or FUA on every other one); record each
                                                in LEDGER before it is sent ("issued N") and once the server has
                                                said it is durable ("durable N"); after SECONDS and at least
                                                MIN_ROUND blocks made durable in this round (or SECONDS + 120, or
                                                at the end of the volume), send one more and cut the power (sysrq
                                                b) without waiting for its answer. A LEDGER of an earlier round
                                                (an earlier boot) is continued: the numbers go on after its last.
  stamp.py write-on SOCKET EXPORT LEDGER        the same without an end: until the power goes (another writer
                                                cuts it), or the end of the volume.
  stamp.py check VOLUME LEDGER [partner|resync] read a volume and compare it with LEDGER: every durable block
                                                holds its stamp, one issued but never answered its stamp or zeros,
                                                the rest zeros. Prints one line; exit 1 when a durable block is
                                                missing or a block holds what nobody wrote.
  stamp.py prefix VOLUME LEDGER [partner]       for an async destination, which may lag: the volume holds a prefix
                                                of the writes (blocks 1 to K stamped, the rest zeros). A write of an
                                                earlier round that was never answered is no part of the history
                                                either way: its block may hold its stamp or zeros. Prints one line
                                                with K; exit 1 when it is no prefix.
  stamp.py logged VOLUME LOG LEDGER             for a source's record log read after a power cut, before its daemon
                                                starts: every block acknowledged as durable is on the partner's
                                                VOLUME (its stamp at its offset) or whole somewhere in LOG (a record
                                                the partner had not yet made durable must still be in the source's
                                                log). Prints one line; exit 1 when a durable block is in neither.
  stamp.py selftest                             check and prefix against made-up volumes and a ledger of two rounds
                                                (the second written with the partner down): each must pass or fail
                                                as it should. Exit 1 if one does not. scripts/test-crash runs it
                                                first, on the host.
  partner: a destination read before its source is back knows nothing of writes made while it was down: the
  ledger is read only up to its line "partner down" (the test writes it), and what follows must be zeros there.
  resync: a destination whose power was cut while its source resent the regions written while it was down: it
  must hold every block made durable before "partner down"; one written after holds its stamp (its region was
  resent) or zeros (not yet).

Block N (from 1) is written at offset (N - 1) * 4096, once: its 4096 bytes are the 16-byte stamp
(MAGIC, N) repeated. Most writes are one block; every fourth 256 KiB stretch (LONG blocks, aligned) is written by
one request, one record of LONG blocks: the destination writes records that long to its volume with O_DIRECT, and
one applied before it was durable in its log once broke the prefix at a power cut. The ledger lives on the host (the VM's work directory share), so it survives the power cut.
A small NBD client of its own (newstyle fixed handshake, NBD_OPT_GO, simple replies), because a process start costs
seconds under the VM's emulation and nothing else here speaks NBD from Python.
"""
import os
import socket
import struct
import sys
import time

BLOCK = 4096
MAGIC = 0x626D63726173680A  # "bmcrash\n"
STAMP = struct.Struct("<QQ")
# Blocks the cutting writer makes durable in each round at least: 600 KiB, so that the degraded round spans three
# of scripts/test-crash's 256 KiB regions, and the resync its third cut falls in has more to send after the first.
MIN_ROUND = 150
# Blocks of a long write: 256 KiB, DestinationGroup.DIRECT_APPLY_LENGTH, and the test's region (chunk.length), so
# that the source logs it as one record.
LONG = 64

NBD_OPT_GO = 7
NBD_REP_ACK = 1
NBD_REP_INFO = 3
NBD_FLAG_C_FIXED_NEWSTYLE = 1
NBD_FLAG_C_NO_ZEROES = 2
NBD_FLAG_SEND_FUA = 1 << 3
NBD_CMD_WRITE = 1
NBD_CMD_FLUSH = 3
NBD_CMD_FLAG_FUA = 1
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
OPTION_REPLY_MAGIC = 0x3E889045565A9


def block(n):
    return STAMP.pack(MAGIC, n) * (BLOCK // STAMP.size)


def write_length(first, size):
    """Blocks in the write that starts at block first: LONG at the start of every fourth LONG-block stretch, if
    the volume has room for it; otherwise one."""
    long_write = (first - 1) % (4 * LONG) == 3 * LONG and (first - 1 + LONG) * BLOCK <= size
    return LONG if long_write else 1


def read_exactly(sock, length):
    data = b""
    while len(data) < length:
        chunk = sock.recv(length - len(data))
        if not chunk:
            raise SystemExit("stamp: the NBD server closed the connection")
        data += chunk
    return data


def connect(path, export):
    """Opens an export; returns the socket, the export's size and its transmission flags."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    magic, opt_magic, _ = struct.unpack(">8s8sH", read_exactly(sock, 18))
    if magic != b"NBDMAGIC" or opt_magic != b"IHAVEOPT":
        raise SystemExit("stamp: not a newstyle NBD server")
    sock.sendall(struct.pack(">I", NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES))
    name = export.encode()
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    sock.sendall(b"IHAVEOPT" + struct.pack(">II", NBD_OPT_GO, len(data)) + data)
    flags = None
    while True:
        magic, _, reply, length = struct.unpack(">QIII", read_exactly(sock, 20))
        payload = read_exactly(sock, length)
        if magic != OPTION_REPLY_MAGIC:
            raise SystemExit("stamp: bad option reply magic")
        if reply & 0x80000000:
            raise SystemExit("stamp: NBD_OPT_GO refused (%#x): %s" % (reply, payload[4:].decode(errors="replace")))
        if reply == NBD_REP_INFO and struct.unpack(">H", payload[:2])[0] == 0:
            size, flags = struct.unpack(">QH", payload[2:12])
        if reply == NBD_REP_ACK:
            if flags is None:
                raise SystemExit("stamp: the server sent no NBD_INFO_EXPORT")
            return sock, size, flags


def request(sock, cmd, flags, handle, offset, data=b""):
    sock.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, cmd, handle, offset, len(data)) + data)


def reply(sock, handle):
    magic, error, got = struct.unpack(">IIQ", read_exactly(sock, 16))
    if magic != SIMPLE_REPLY_MAGIC or got != handle:
        raise SystemExit("stamp: bad reply (magic %#x, handle %d for %d)" % (magic, got, handle))
    if error:
        raise SystemExit("stamp: the server failed request %d with NBD error %d" % (handle, error))


def write(path, export, ledger_path, seconds, cut_power=True):
    sock, size, flags = connect(path, export)
    fua = bool(flags & NBD_FLAG_SEND_FUA)
    n = max(read_ledger(ledger_path)[0], default=0) if os.path.exists(ledger_path) else 0
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = n
    deadline = time.monotonic() + seconds
    while True:
        first = n + 1
        n = first + write_length(first, size) - 1
        os.write(ledger, b"".join(b"issued %d\n" % k for k in range(first, n + 1)))
        with_fua = fua and n % 2 == 0
        request(sock, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA if with_fua else 0, 2 * n, (first - 1) * BLOCK,
                b"".join(block(k) for k in range(first, n + 1)))
        now = time.monotonic()
        # At least MIN_ROUND blocks, however slowly the emulator runs this round (a run beside the Maven tests at
        # the lowest priority made 9 once): fewer would prove little.
        if (now >= deadline and n - start > MIN_ROUND) or now >= deadline + 120 or n * BLOCK >= size:
            # The last write is in flight (or not yet read by the server) when the power goes: it may or may not
            # have reached the volumes, and nobody was told either way.
            break
        reply(sock, 2 * n)
        if not with_fua:
            request(sock, NBD_CMD_FLUSH, 0, 2 * n + 1, 0)
            reply(sock, 2 * n + 1)
        os.write(ledger, b"".join(b"durable %d\n" % k for k in range(first, n + 1)))
    if not cut_power:
        os.write(ledger, b"end of the volume\n")
        time.sleep(3600)
        return
    os.write(ledger, b"crash\n")
    os.close(ledger)
    # The harness reports this file's status (scripts/rdma-vm --help, "Crashing the guest on purpose").
    with open("/run/rdma-vm/rc.tmp", "w") as rc:
        rc.write("0\n")
    os.rename("/run/rdma-vm/rc.tmp", "/run/rdma-vm/rc")
    with open("/proc/sysrq-trigger", "w") as trigger:
        trigger.write("b")
    time.sleep(60)
    raise SystemExit("stamp: still running a minute after the power cut")


def read_ledger(ledger_path, partner=False):
    """Returns the blocks issued and the blocks acknowledged as durable, as two sets: with partner, only those
    before the line "partner down"."""
    issued, durable = set(), set()
    with open(ledger_path) as ledger:
        for line in ledger:
            if partner and line == "partner down\n":
                break
            word, _, number = line.partition(" ")
            if word == "issued":
                issued.add(int(number))
            elif word == "durable":
                durable.add(int(number))
    return issued, durable


def blocks(volume):
    """Yields (N, the 4096 bytes of block N) of a volume, N from 1."""
    with open(volume, "rb") as f:
        yield from enumerate(iter(lambda: f.read(BLOCK), b""), 1)


def prefix(volume, ledger_path, partner=False):
    issued, durable = read_ledger(ledger_path, partner)
    # Each writer has one write unanswered at most, its last (the blocks after the last acknowledged one): any
    # other unanswered one was cut off in an earlier round, and is no part of the history either way.
    last = {n for n in issued - durable if n > max(durable, default=0)}
    cut_off = issued - durable - last
    zeros = bytes(BLOCK)
    stamped, ended, foreign = 0, False, []
    for index, data in blocks(volume):
        if index in cut_off and data in (zeros, block(index)):
            continue
        if not ended and index in issued and data == block(index):
            stamped = index
        else:
            ended = True
            if data != zeros:
                foreign.append(index)
    if not durable:
        print("%s: no block was acknowledged in the ledger: nothing to check" % volume)
        return 1
    print("%s: a prefix of the writes up to block %d (%d acknowledged on the source, %d issued)%s"
          % (volume, stamped, len(durable), len(issued), "" if not foreign else
             "; NOT a prefix: %d blocks after it are not zeros (first %s)" % (len(foreign), foreign[:5])))
    return 1 if foreign else 0


def check(volume, ledger_path, view=None):
    issued, durable = read_ledger(ledger_path, view == "partner")
    if view == "resync":
        # Required: what the destination held before it went down. Allowed: anything written since.
        durable = read_ledger(ledger_path, True)[1]
    zeros = bytes(BLOCK)
    missing, foreign, landed, index = [], [], 0, 0
    for index, data in blocks(volume):
        if index in durable:
            if data != block(index):
                missing.append(index)
        elif index in issued and data == block(index):
            landed += 1
        elif data != zeros:
            foreign.append(index)
    if not durable or index < max(issued):
        print("%s: %d blocks durable and %d issued in the ledger, %d blocks in the volume: nothing to check"
              % (volume, len(durable), len(issued), index))
        return 1
    print("%s: %d durable blocks, %d missing%s; %d of %d written but %s landed; %d blocks hold what "
          "nobody wrote%s" % (volume, len(durable), len(missing),
                              (" (first " + str(missing[:5]) + ")") if missing else "", landed,
                              len(issued - durable), "written since it went down" if view == "resync" else
                              "unanswered", len(foreign),
                              (" (first " + str(foreign[:5]) + ")") if foreign else ""))
    return 1 if missing or foreign else 0


def logged(volume, log_path, ledger_path):
    durable = read_ledger(ledger_path)[1]
    with open(volume, "rb") as f:
        on_volume = {index for index, data in enumerate(iter(lambda: f.read(BLOCK), b""), 1)
                     if index in durable and data == block(index)}
    # Records sit anywhere in the log, behind headers of their own: find each stamp, then the whole block.
    with open(log_path, "rb") as f:
        data = f.read()
    magic, in_log, at = STAMP.pack(MAGIC, 0)[:8], set(), data.find(STAMP.pack(MAGIC, 0)[:8])
    while at >= 0:
        n = STAMP.unpack_from(data, at)[1] if at + STAMP.size <= len(data) else 0
        if n in durable and data[at:at + BLOCK] == block(n):
            in_log.add(n)
            at = data.find(magic, at + BLOCK)
        else:
            at = data.find(magic, at + 1)
    lost = sorted(durable - on_volume - in_log)
    if not durable:
        print("%s: no block was acknowledged in the ledger: nothing to check" % log_path)
        return 1
    print("%s: %d durable blocks, %d on the partner's volume, %d more only in this log, %d in neither%s"
          % (log_path, len(durable), len(on_volume), len(in_log - on_volume), len(lost),
             (" (first " + str(lost[:5]) + ")") if lost else ""))
    return 1 if lost else 0


def selftest():
    import tempfile
    # Round 1: blocks 1-5 acknowledged, 6 cut off; round 2: 7-9 acknowledged, 10 cut off; then, with the partner
    # down, 11-12 acknowledged and 13 in flight at the cut.
    ledger = ["issued %d" % i for i in range(1, 7)] + ["durable %d" % i for i in range(1, 6)] + ["crash"]
    ledger += ["issued %d" % i for i in range(7, 11)] + ["durable %d" % i for i in range(7, 10)] + ["crash"]
    ledger += ["partner down"] + ["issued %d" % i for i in range(11, 14)]
    ledger += ["durable %d" % i for i in range(11, 13)] + ["crash"]
    cases = [  # blocks stamped in the volume, view, whether check and prefix must pass (prefix: None, n/a)
        (set(range(1, 13)) - {6, 10}, None, True, True),    # the cut-off writes lost, the one in flight too
        (set(range(1, 14)), None, True, True),              # every write landed
        (set(range(1, 13)) - {8}, None, False, False),      # an acknowledged block lost
        (set(range(1, 6)), None, False, True),              # a lagging destination: a prefix, not complete
        (set(range(1, 6)) | {7}, None, False, True),        # the prefix goes on past a write cut off
        (set(range(1, 5)) | {7}, None, False, False),       # a hole in the history
        ({1, 2, 3, 40}, None, False, False),                # a block nobody wrote
        (set(range(1, 10)), "partner", True, True),         # the partner knows nothing of what came after it
        (set(range(1, 10)) | {11}, "partner", False, False),  # the partner holds a write made while it was down
        (set(range(1, 10)), "resync", True, None),          # cut before the resync sent anything
        (set(range(1, 10)) | {11, 13}, "resync", True, None),  # part of it resent, even the write in flight
        (set(range(1, 14)), "resync", True, None),          # all of it resent
        (set(range(1, 12)) - {4}, "resync", False, None),   # a block it held before lost
        (set(range(1, 10)) | {11, 40}, "resync", False, None),  # a block nobody wrote
    ]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        ledger_path, volume = os.path.join(tmp, "ledger"), os.path.join(tmp, "volume")

        def write_ledger(lines):
            with open(ledger_path, "w") as f:
                f.write("".join(line + "\n" for line in lines))

        def outcome(stamped, view, with_prefix):
            """Whether check and prefix (None: not run) pass on a volume holding the stamped blocks."""
            with open(volume, "wb") as f:
                for n in range(1, 65):
                    f.write(block(n) if n in stamped else bytes(BLOCK))
            with open(os.devnull, "w") as quiet:
                saved, sys.stdout = sys.stdout, quiet
                try:
                    return (check(volume, ledger_path, view) == 0,
                            prefix(volume, ledger_path, view == "partner") == 0 if with_prefix else None)
                finally:
                    sys.stdout = saved

        write_ledger(ledger)
        for stamped, view, check_passes, prefix_passes in cases:
            got = outcome(stamped, view, prefix_passes is not None)
            if got != (check_passes, prefix_passes):
                failed += 1
                print("stamp selftest: blocks %s%s: check and prefix passed %s, should have %s"
                      % (sorted(stamped), " (%s)" % view if view else "", got, (check_passes, prefix_passes)))
        # Long writes: blocks 1-4 one at a time, 5-8 in one write, 9-12 in one write cut off in round 1, 13-14
        # one at a time in round 2 and 15-18 in one write in flight at its cut.
        long_ledger = ["issued %d" % i for i in range(1, 13)] + ["durable %d" % i for i in range(1, 9)]
        long_ledger += ["crash"] + ["issued %d" % i for i in range(13, 19)] + ["durable 13", "durable 14", "crash"]
        long_cases = [  # blocks stamped, whether check and prefix must pass
            (set(range(1, 9)) | {13, 14}, True, True),       # both unanswered long writes lost
            (set(range(1, 19)), True, True),                 # both landed
            (set(range(1, 9)) | set(range(13, 19)), True, True),  # the one in flight landed, the cut-off one not
            (set(range(1, 5)) | {13, 14}, False, False),     # an acknowledged long write lost: a hole
            (set(range(1, 5)), False, True),                 # a lagging destination, before the long write
            (set(range(1, 5)) | set(range(15, 19)), False, False),  # the write in flight without those before it
            (set(range(1, 9)) | {13, 14, 15, 17}, True, False),  # torn: a destination applies a record whole
        ]
        write_ledger(long_ledger)
        for stamped, check_passes, prefix_passes in long_cases:
            got = outcome(stamped, None, True)
            if got != (check_passes, prefix_passes):
                failed += 1
                print("stamp selftest: long writes, blocks %s: check and prefix passed %s, should have %s"
                      % (sorted(stamped), got, (check_passes, prefix_passes)))
        write_ledger(ledger)
        # logged: blocks 1-5 and 7-9 durable on the volume, 11-12 (and 10, unanswered) only in a log of records
        # with 40-byte headers between them; the same with block 12 missing from the log must fail.
        log_path, checked = os.path.join(tmp, "log"), len(cases) + len(long_cases)
        with open(volume, "wb") as f:
            for n in range(1, 65):
                f.write(block(n) if n in set(range(1, 10)) - {6} else bytes(BLOCK))
        for in_log, passes in (({10, 11, 12}, True), ({10, 11}, False)):
            with open(log_path, "wb") as f:
                for n in sorted(in_log):
                    f.write(bytes(40) + block(n))
                f.write(bytes(40) + block(12)[:BLOCK // 2])   # a torn record
            with open(os.devnull, "w") as quiet:
                saved, sys.stdout = sys.stdout, quiet
                try:
                    got = logged(volume, log_path, ledger_path) == 0
                finally:
                    sys.stdout = saved
            checked += 1
            if got != passes:
                failed += 1
                print("stamp selftest: logged with blocks %s in the log passed %s, should have %s"
                      % (sorted(in_log), got, passes))
    print("stamp selftest: %d of %d cases as they should be" % (checked - failed, checked))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "write-on":
        write(sys.argv[2], sys.argv[3], sys.argv[4], float("inf"), cut_power=False)
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "check" and sys.argv[4:] in ([], ["partner"], ["resync"]):
        sys.exit(check(sys.argv[2], sys.argv[3], (sys.argv[4:] or [None])[0]))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "prefix" and sys.argv[4:] in ([], ["partner"]):
        sys.exit(prefix(sys.argv[2], sys.argv[3], sys.argv[4:] == ["partner"]))
    elif len(sys.argv) == 5 and sys.argv[1] == "logged":
        sys.exit(logged(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif sys.argv[1:] == ["selftest"]:
        sys.exit(selftest())
    else:
        sys.exit(__doc__)
