#!/usr/bin/python3 -I
"""stamp.py: the writer and the checker of scripts/test-crash (run inside its VM).

  stamp.py write SOCKET EXPORT LEDGER SECONDS   write stamped blocks through a group's NBD export, one at a time,
                                                each made durable (FLUSH, or FUA on every other one), and zero
                                                some of them again later (WRITE_ZEROES, with and without NO_HOLE,
                                                and TRIM); record each in LEDGER before it is sent ("issued N",
                                                "zeroing N", "trimming N") and once the server has said it is
                                                durable ("durable N", "zeroed N", "trimmed N"); after SECONDS and at least
                                                MIN_ROUND blocks made durable in this round (or SECONDS + 120, or
                                                at the end of the volume), send one more and cut the power (sysrq
                                                b) without waiting for its answer. A LEDGER of an earlier round
                                                (an earlier boot) is continued: the numbers go on after its last.
  stamp.py write-on SOCKET EXPORT LEDGER        the same without an end: until the power goes (another writer
                                                cuts it), or the end of the volume.
  stamp.py check VOLUME LEDGER [partner|resync] read a volume and compare it with LEDGER: every durable block
                                                holds its stamp, every block durably zeroed zeros, one issued but
                                                never answered (or trimmed) its stamp or zeros, the rest zeros.
                                                Prints one line; exit 1 when a durable block is missing, a zeroed
                                                block holds its stamp again, or a block holds what nobody wrote.
  stamp.py prefix VOLUME LEDGER [partner]       for an async destination, which may lag: the volume is what the
                                                first K requests of the ledger make of zeros (blocks 1 to K
                                                stamped, the rest zeros, less the blocks zeroed among them). A
                                                request of an earlier round that was never answered is no part of
                                                the history either way: its block may hold either. Prints one line;
                                                exit 1 when it is no prefix.
  stamp.py logged VOLUME LOG LEDGER             for a source's record log read after a power cut, before its daemon
                                                starts: every block acknowledged as durable is on the partner's
                                                VOLUME (its stamp at its offset) or whole somewhere in LOG (a record
                                                the partner had not yet made durable must still be in the source's
                                                log); blocks zeroed since are not looked for (a zero record holds
                                                no stamp). Prints one line; exit 1 when a durable block is in
                                                neither.
  stamp.py holes VOLUME LEDGER                  how many of the blocks durably zeroed by a request that lets the
                                                server deallocate (WRITE_ZEROES without NO_HOLE, TRIM) lie in holes
                                                of VOLUME, a sparse file. Prints one line; exit 1 when none does.
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
one applied before it was durable in its log once broke the prefix at a power cut. Every ZERO_EVERY-th block written
on its own is zeroed again ZERO_LAG blocks later: a zero record, whose range the destination (and the source, for
WRITE_ZEROES without NO_HOLE and for TRIM) deallocates, a punched hole that only the file system's journal makes
durable. The ledger lives on the host (the VM's work directory share), so it survives the power cut.
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

# Every ZERO_EVERY-th block written on its own (not in a long write) is zeroed later, once ZERO_LAG more blocks are
# durable: by WRITE_ZEROES that may deallocate (the volume punches a hole, and so does the partner's, from a zero
# record), by WRITE_ZEROES with NO_HOLE (zeros written), or by TRIM (deallocated where the volume can: its stamp
# or zeros afterwards, NBD promises nothing more), in turn, every other one with FUA. A power cut must not bring
# back the stamp of a block whose zeroing was acknowledged: the punched hole is metadata, made durable by the
# file system's journal, not by writing the block.
ZERO_EVERY = 8
ZERO_LAG = 8
ZEROING_KINDS = ("zeroes", "zeroes-no-hole", "trim")

NBD_OPT_GO = 7
NBD_REP_ACK = 1
NBD_REP_INFO = 3
NBD_FLAG_C_FIXED_NEWSTYLE = 1
NBD_FLAG_C_NO_ZEROES = 2
NBD_FLAG_SEND_FUA = 1 << 3
NBD_FLAG_SEND_TRIM = 1 << 5
NBD_FLAG_SEND_WRITE_ZEROES = 1 << 6
NBD_CMD_WRITE = 1
NBD_CMD_FLUSH = 3
NBD_CMD_TRIM = 4
NBD_CMD_WRITE_ZEROES = 6
NBD_CMD_FLAG_FUA = 1
NBD_CMD_FLAG_NO_HOLE = 2
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


def zeroed_later(b):
    """Whether block b is zeroed once ZERO_LAG blocks after it are durable: every ZERO_EVERY-th block, if written
    on its own (the last quarter of every 4 * LONG blocks is long writes)."""
    return b % ZERO_EVERY == ZERO_EVERY // 2 + 1 and (b - 1) % (4 * LONG) < 3 * LONG


def zeroing_kind(b):
    """How block b is zeroed, and whether with FUA."""
    return ZEROING_KINDS[(b // ZERO_EVERY) % len(ZEROING_KINDS)], (b // ZERO_EVERY) % 2 == 0


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


def request(sock, cmd, flags, handle, offset, data=b"", length=None):
    """Sends a request: length is the data's, unless given (WRITE_ZEROES and TRIM carry none)."""
    sock.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, cmd, handle, offset,
                             len(data) if length is None else length) + data)


def reply(sock, handle):
    magic, error, got = struct.unpack(">IIQ", read_exactly(sock, 16))
    if magic != SIMPLE_REPLY_MAGIC or got != handle:
        raise SystemExit("stamp: bad reply (magic %#x, handle %d for %d)" % (magic, got, handle))
    if error:
        raise SystemExit("stamp: the server failed request %d with NBD error %d" % (handle, error))


def write(path, export, ledger_path, seconds, cut_power=True):
    sock, size, flags = connect(path, export)
    fua = bool(flags & NBD_FLAG_SEND_FUA)
    zeroing = bool(flags & NBD_FLAG_SEND_WRITE_ZEROES and flags & NBD_FLAG_SEND_TRIM)
    history = read_ledger(ledger_path) if os.path.exists(ledger_path) else Ledger()
    n = max(history.issued, default=0)
    # Blocks to zero once ZERO_LAG more are durable: this round's, and those of earlier rounds not yet zeroed.
    due = sorted(b for b in history.durable if zeroed_later(b) and b not in history.zeroing | history.trimming)
    ledger = os.open(ledger_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start, handle = n, 0
    deadline = time.monotonic() + seconds
    while True:
        handle += 1
        if zeroing and due and due[0] + ZERO_LAG <= n:
            b = due.pop(0)
            kind, with_fua = zeroing_kind(b)
            with_fua = with_fua and fua
            issued, answered = (b"trimming %d\n" % b, b"trimmed %d\n" % b) if kind == "trim" else \
                (b"zeroing %d\n" % b, b"zeroed %d\n" % b)
            os.write(ledger, issued)
            request(sock, NBD_CMD_TRIM if kind == "trim" else NBD_CMD_WRITE_ZEROES,
                    (NBD_CMD_FLAG_FUA if with_fua else 0) | (NBD_CMD_FLAG_NO_HOLE if kind == "zeroes-no-hole" else 0),
                    handle, (b - 1) * BLOCK, length=BLOCK)
        else:
            first = n + 1
            n = first + write_length(first, size) - 1
            os.write(ledger, b"".join(b"issued %d\n" % k for k in range(first, n + 1)))
            with_fua = fua and n % 2 == 0
            request(sock, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA if with_fua else 0, handle, (first - 1) * BLOCK,
                    b"".join(block(k) for k in range(first, n + 1)))
            answered = b"".join(b"durable %d\n" % k for k in range(first, n + 1))
            due += [k for k in range(first, n + 1) if zeroed_later(k)]
        now = time.monotonic()
        # At least MIN_ROUND blocks, however slowly the emulator runs this round (a run beside the Maven tests at
        # the lowest priority made 9 once): fewer would prove little.
        if (now >= deadline and n - start > MIN_ROUND) or now >= deadline + 120 or n * BLOCK >= size:
            # The last request is in flight (or not yet read by the server) when the power goes: it may or may not
            # have reached the volumes, and nobody was told either way.
            break
        reply(sock, handle)
        if not with_fua:
            handle += 1
            request(sock, NBD_CMD_FLUSH, 0, handle, 0)
            reply(sock, handle)
        os.write(ledger, answered)
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


class Op:
    """One request of the history: a write of blocks (kind "write"), a WRITE_ZEROES ("zero") or a TRIM ("trim")
    of one block; answered once the ledger says it was made durable."""

    def __init__(self, kind, blocks):
        self.kind, self.blocks, self.answered = kind, blocks, False


class Ledger:
    """What a writer's ledger says: the blocks written (issued, and acknowledged as durable), the blocks zeroed and
    trimmed (likewise), and every request in the order they were made."""

    def __init__(self):
        self.issued, self.durable = set(), set()
        self.zeroing, self.zeroed = set(), set()
        self.trimming, self.trimmed = set(), set()
        self.ops = []


def read_ledger(ledger_path, partner=False):
    """Reads a ledger: with partner, only up to its line "partner down". The lines of one write are written
    together: a run of "issued" lines is one request."""
    ledger, pending, previous = Ledger(), {}, None
    with open(ledger_path) as ledger_file:
        for line in ledger_file:
            if partner and line == "partner down\n":
                break
            word, _, number = line.partition(" ")
            if word in ("issued", "zeroing", "trimming"):
                b = int(number)
                if word == "issued" and previous == "issued":
                    ledger.ops[-1].blocks.append(b)
                else:
                    ledger.ops.append(Op({"issued": "write", "zeroing": "zero", "trimming": "trim"}[word], [b]))
                pending[(word, b)] = ledger.ops[-1]
                {"issued": ledger.issued, "zeroing": ledger.zeroing, "trimming": ledger.trimming}[word].add(b)
            elif word in ("durable", "zeroed", "trimmed"):
                b = int(number)
                {"durable": ledger.durable, "zeroed": ledger.zeroed, "trimmed": ledger.trimmed}[word].add(b)
                op = pending.pop(({"durable": "issued", "zeroed": "zeroing", "trimmed": "trimming"}[word], b))
                op.answered = all((("issued", k) not in pending) for k in op.blocks) if op.kind == "write" else True
            previous = word
    return ledger


STAMPED, ZEROS = "stamp", "zeros"
ZEROS_ONLY = frozenset({ZEROS})


def apply(expected, op, either):
    """What each block of op may hold after it (a set of STAMPED and ZEROS), in expected; with either, whether or
    not op happened: a request never answered."""
    for b in op.blocks:
        before = expected.get(b, ZEROS_ONLY)
        after = {"write": {STAMPED}, "zero": {ZEROS}, "trim": before | {ZEROS}}[op.kind]
        expected[b] = frozenset(before | after if either else after)


def allowed_at_end(ledger):
    expected = {}
    for op in ledger.ops:
        apply(expected, op, not op.answered)
    return expected


def classify(index, data):
    return STAMPED if data == block(index) else ZEROS if data == bytes(BLOCK) else None


def holes(volume):
    """The blocks (N from 1) of a file that lie in holes: deallocated, as a punched range is."""
    found, fd = set(), os.open(volume, os.O_RDONLY)
    try:
        end, at = os.fstat(fd).st_size, 0
        while at < end:
            hole = os.lseek(fd, at, os.SEEK_HOLE)
            if hole >= end:
                break
            try:
                at = os.lseek(fd, hole, os.SEEK_DATA)
            except OSError:   # ENXIO: a hole to the end
                at = end
            found.update(range(hole // BLOCK + 1, at // BLOCK + 1))
    finally:
        os.close(fd)
    return found


def blocks(volume):
    """Yields (N, the 4096 bytes of block N) of a volume, N from 1."""
    with open(volume, "rb") as f:
        yield from enumerate(iter(lambda: f.read(BLOCK), b""), 1)


def prefix(volume, ledger_path, partner=False):
    """The history is the ledger's requests in order: the volume must be what some first K of them make of a
    volume of zeros. The last request may be in or out, whole; any other never answered was cut off in an earlier
    round, and is no part of the history either way: each of its blocks may or may not have it."""
    ledger = read_ledger(ledger_path, partner)
    got = {index: classify(index, data) for index, data in blocks(volume)}
    expected, last = {}, len(ledger.ops) - 1
    differ = {index for index, kind in got.items() if kind != ZEROS}
    best, upto = (0, 0) if not differ else (None, 0)
    fewest, written = set(differ), 0
    for k, op in enumerate(ledger.ops):
        apply(expected, op, not op.answered and k != last)
        for b in op.blocks:
            if got.get(b) in expected[b]:
                differ.discard(b)
            else:
                differ.add(b)
        if op.kind == "write":
            written = max(written, op.blocks[-1])
        if not differ:
            best, upto = k + 1, written
        elif len(differ) < len(fewest):
            fewest = set(differ)
    if not ledger.durable:
        print("%s: no block was acknowledged in the ledger: nothing to check" % volume)
        return 1
    zero_ops = sum(1 for op in ledger.ops[:best or 0] if op.kind != "write")
    print("%s: %s (%d acknowledged on the source, %d issued; %d zeroed and %d trimmed)%s"
          % (volume, "a prefix of the writes up to block %d, %d zeroings among them" % (upto, zero_ops)
             if best is not None else "NOT a prefix of the writes", len(ledger.durable), len(ledger.issued),
             len(ledger.zeroed), len(ledger.trimmed), "" if best is not None else
             ": at best %d blocks differ from any prefix (first %s)" % (len(fewest), sorted(fewest)[:5])))
    return 0 if best is not None else 1


def check(volume, ledger_path, view=None):
    """Every block holds what the ledger allows: the stamp of an acknowledged write, zeros after an acknowledged
    WRITE_ZEROES, either after a TRIM or a request never answered, zeros where nothing was written. resync: a
    destination cut off while its source resent what it missed: what it held before it went down, or what the
    source holds."""
    ledger = read_ledger(ledger_path, view == "partner")
    expected = allowed_at_end(ledger)
    if view == "resync":
        before = allowed_at_end(read_ledger(ledger_path, True))
        expected = {b: expected.get(b, ZEROS_ONLY) | before.get(b, ZEROS_ONLY) for b in expected.keys() | before}
    required = {b for b, allowed in expected.items() if allowed == {STAMPED}}
    zeroed = {b for b, allowed in expected.items() if allowed == ZEROS_ONLY and b in ledger.issued}
    # Written, never answered (or since the partner went down), and not zeroed since: stamp or zeros.
    unanswered = ledger.issued - required - zeroed - ledger.zeroing - ledger.trimming
    missing, back, foreign, landed, index = [], [], [], 0, 0
    for index, data in blocks(volume):
        kind = classify(index, data)
        allowed = expected.get(index, ZEROS_ONLY)
        if kind in allowed:
            landed += kind == STAMPED and index in unanswered
        elif allowed == {STAMPED}:
            missing.append(index)
        elif kind == STAMPED and index in zeroed:
            back.append(index)
        else:
            foreign.append(index)
    if not ledger.durable or index < max(ledger.issued):
        print("%s: %d blocks durable and %d issued in the ledger, %d blocks in the volume: nothing to check"
              % (volume, len(ledger.durable), len(ledger.issued), index))
        return 1

    def first(found):
        return (" (first " + str(found[:5]) + ")") if found else ""
    print("%s: %d durable blocks, %d missing%s; %d of %d written but %s landed; %d zeroed blocks (%d of them "
          "holes), %d hold their stamp again%s; %d blocks hold what nobody wrote%s"
          % (volume, len(required), len(missing), first(missing), landed, len(unanswered),
             "written since it went down" if view == "resync" else "unanswered", len(zeroed),
             len(zeroed & holes(volume)), len(back), first(back), len(foreign), first(foreign)))
    return 1 if missing or back or foreign else 0


def punched(volume, ledger_path):
    ledger = read_ledger(ledger_path)
    zeroed = {b for b in ledger.zeroed if zeroing_kind(b)[0] == "zeroes"} | ledger.trimmed
    found = zeroed & holes(volume)
    print("%s: %d of %d blocks zeroed by WRITE_ZEROES without NO_HOLE or by TRIM are holes"
          % (volume, len(found), len(zeroed)))
    return 0 if found else 1


def logged(volume, log_path, ledger_path):
    ledger = read_ledger(ledger_path)
    # A block zeroed or trimmed since it was written is looked for nowhere: its zero record holds no stamp, and the
    # checks after the source is back cover it.
    durable = ledger.durable - ledger.zeroing - ledger.trimming
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
    def wrote(first, last=None, answered=True):
        """A ledger's lines for one write of blocks first to last."""
        last = last or first
        return ["issued %d" % k for k in range(first, last + 1)] + \
            (["durable %d" % k for k in range(first, last + 1)] if answered else [])

    def each(first, last):
        return [line for k in range(first, last + 1) for line in wrote(k)]
    ledger = each(1, 5) + wrote(6, answered=False) + ["crash"] + each(7, 9) + wrote(10, answered=False) + ["crash"]
    ledger += ["partner down"] + each(11, 12) + wrote(13, answered=False) + ["crash"]
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
        log_path = os.path.join(tmp, "log")

        def write_ledger(lines):
            with open(ledger_path, "w") as f:
                f.write("".join(line + "\n" for line in lines))

        def passes(command, *args):
            """Whether a command passes (returns 0), its line of output dropped."""
            with open(os.devnull, "w") as quiet:
                saved, sys.stdout = sys.stdout, quiet
                try:
                    return command(*args) == 0
                finally:
                    sys.stdout = saved

        def outcome(stamped, view, with_prefix):
            """Whether check and prefix (None: not run) pass on a volume holding the stamped blocks."""
            with open(volume, "wb") as f:
                for n in range(1, 65):
                    f.write(block(n) if n in stamped else bytes(BLOCK))
            return (passes(check, volume, ledger_path, view),
                    passes(prefix, volume, ledger_path, view == "partner") if with_prefix else None)

        def logged_outcome(stamped, in_log, torn=None):
            """Whether logged passes on a volume holding the stamped blocks and a log holding these records, and a
            torn one."""
            with open(volume, "wb") as f:
                for n in range(1, 65):
                    f.write(block(n) if n in stamped else bytes(BLOCK))
            with open(log_path, "wb") as f:
                for n in sorted(in_log):
                    f.write(bytes(40) + block(n))
                if torn:
                    f.write(bytes(40) + block(torn)[:BLOCK // 2])
            return passes(logged, volume, log_path, ledger_path)

        write_ledger(ledger)
        for stamped, view, check_passes, prefix_passes in cases:
            got = outcome(stamped, view, prefix_passes is not None)
            if got != (check_passes, prefix_passes):
                failed += 1
                print("stamp selftest: blocks %s%s: check and prefix passed %s, should have %s"
                      % (sorted(stamped), " (%s)" % view if view else "", got, (check_passes, prefix_passes)))
        # Long writes: blocks 1-4 one at a time, 5-8 in one write, 9-12 in one write cut off in round 1, 13-14
        # one at a time in round 2 and 15-18 in one write in flight at its cut.
        long_ledger = each(1, 4) + wrote(5, 8) + wrote(9, 12, False) + ["crash"] + each(13, 14) + wrote(15, 18, False)
        long_ledger += ["crash"]
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
        checked = len(cases) + len(long_cases)
        for in_log, should in (({10, 11, 12}, True), ({10, 11}, False)):
            got = logged_outcome(set(range(1, 10)) - {6}, in_log, torn=12)
            checked += 1
            if got != should:
                failed += 1
                print("stamp selftest: logged with blocks %s in the log passed %s, should have %s"
                      % (sorted(in_log), got, should))
        # Zeroing: block 3 zeroed, 5 trimmed, 7 being zeroed at the cut; then, in a ledger of its own, block 2
        # zeroed after the partner went down.
        zero_ledger = each(1, 8) + ["zeroing 3", "zeroed 3"] + wrote(9) + ["trimming 5", "trimmed 5"] + wrote(10)
        zero_ledger += ["zeroing 7", "crash"]
        down_ledger = each(1, 4) + wrote(5, answered=False) + ["crash", "partner down", "zeroing 2", "zeroed 2"]
        down_ledger += each(6, 7) + wrote(8, answered=False) + ["crash"]
        zero_cases = [  # the ledger, blocks stamped, view, whether check and prefix must pass (prefix: None, n/a)
            (zero_ledger, {1, 2, 4, 5, 6, 7, 8, 9, 10}, None, True, True),  # the trim kept 5, 7 not yet zeroed
            (zero_ledger, {1, 2, 4, 6, 8, 9, 10}, None, True, True),        # 5 trimmed, 7 zeroed
            (zero_ledger, set(range(1, 11)), None, False, False),           # 3 holds its stamp again
            (zero_ledger, set(range(1, 9)), None, False, True),             # lagging, before 3 was zeroed
            (zero_ledger, {1, 2, 4, 5, 6, 7, 8}, None, False, True),        # lagging, after
            (zero_ledger, {1, 2, 4, 5, 6, 7, 8, 10}, None, False, False),   # a hole in the history
            (zero_ledger, {1, 2, 3, 4, 6, 7, 8, 9, 10}, None, False, False),  # trimmed, yet 3 not zeroed before
            (down_ledger, {1, 2, 3, 4}, "partner", True, True),             # zeroed while the partner was down
            (down_ledger, {1, 3, 4}, "partner", False, False),              # ... which it cannot know
            (down_ledger, {1, 3, 4}, "resync", True, None),                 # the zeros resent
            (down_ledger, {1, 2, 3, 4, 6, 7}, "resync", True, None),        # not yet, the writes after it yes
            (down_ledger, {1, 3, 4, 6, 7, 8}, "resync", True, None),
            (down_ledger, {1, 2, 4, 6}, "resync", False, None),             # a block it held before lost
            (down_ledger, {1, 3, 4, 6, 7}, None, True, True),
            (down_ledger, {1, 2, 3, 4, 6, 7}, None, False, False),          # 2 holds its stamp again
        ]
        for lines, stamped, view, check_passes, prefix_passes in zero_cases:
            write_ledger(lines)
            got = outcome(stamped, view, prefix_passes is not None)
            checked += 1
            if got != (check_passes, prefix_passes):
                failed += 1
                print("stamp selftest: zeroing, blocks %s%s: check and prefix passed %s, should have %s"
                      % (sorted(stamped), " (%s)" % view if view else "", got, (check_passes, prefix_passes)))
        # logged: the blocks zeroed or trimmed are looked for nowhere; 9 and 10 only in the log.
        write_ledger(zero_ledger)
        for in_log, should in (({9, 10}, True), ({9}, False)):
            got = logged_outcome({1, 2, 4, 6, 8}, in_log)
            checked += 1
            if got != should:
                failed += 1
                print("stamp selftest: zeroing, logged with blocks %s in the log passed %s, should have %s"
                      % (sorted(in_log), got, should))
        # holes: blocks 3 (WRITE_ZEROES) and 5 (TRIM) zeroed; a sparse volume holding only the stamped blocks has
        # them as holes, one with zeros written everywhere has none.
        write_ledger(zero_ledger)
        for sparse, should in ((True, True), (False, False)):
            with open(volume, "wb") as f:
                f.truncate(64 * BLOCK)
                for n in range(1, 65):
                    if n in {1, 2, 4, 6, 8, 9, 10} or not sparse:
                        f.seek((n - 1) * BLOCK)
                        f.write(block(n) if n in {1, 2, 4, 6, 8, 9, 10} else bytes(BLOCK))
                f.flush()
                os.fsync(f.fileno())
            got = passes(punched, volume, ledger_path)
            checked += 1
            if got != should:
                failed += 1
                print("stamp selftest: holes in a %s volume passed %s, should have %s"
                      % ("sparse" if sparse else "written", got, should))
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
    elif len(sys.argv) == 4 and sys.argv[1] == "holes":
        sys.exit(punched(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "logged":
        sys.exit(logged(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif sys.argv[1:] == ["selftest"]:
        sys.exit(selftest())
    else:
        sys.exit(__doc__)
