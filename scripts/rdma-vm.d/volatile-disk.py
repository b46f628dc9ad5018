#!/usr/bin/python3
"""volatile-disk.py IMAGE SOCKET CUT_MARKER: serve IMAGE over NBD on the Unix socket SOCKET, as a disk with a
volatile write cache that loses power when CUT_MARKER appears (or when the VM disconnects).

For scripts/rdma-vm --volatile-disk. qemu attaches the export as the guest's virtio disk, which then advertises
a write cache, so the guest's kernel sends a FLUSH (and FUA) where it needs its writes on the medium, as on a real
disk. Here a write only enters the cache (memory, 4 KiB pages); a FLUSH writes every cached page to IMAGE, a FUA
write its own pages. At the power cut, a random subset of the cached pages reaches IMAGE (a drive writes its cache
back in any order, at any time before a flush), the rest is lost, the connection is closed (so qemu fails the
requests in flight instead of waiting for them) and the server exits. The cut happens at the first request after
CUT_MARKER exists, or when the client goes away, whichever comes first: every reply sent before it was true, so
whatever the guest was told is durable is in IMAGE.

RDMA_VM_DISK_SEED picks the random subset (default: a random seed, printed). One line per cut on stderr.

volatile-disk.py selftest: serves a scratch image to a client of its own, cuts the power, and checks that what was
flushed or written with FUA survived, that reads saw the cache, that each unflushed page is whole or absent, and
that nothing after the cut was applied. Exit 0 when all held.
"""
import os
import random
import socket
import struct
import sys
import time

PAGE = 4096
NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
OPT_REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES = 1, 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO, OPT_GO = 1, 2, 6, 7
REP_ACK, REP_INFO, REP_ERR_UNSUP = 1, 3, 0x80000001
INFO_EXPORT = 0
TRANSMISSION_FLAGS = 1 | 4 | 8  # HAS_FLAGS, SEND_FLUSH, SEND_FUA
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH = 0, 1, 2, 3
CMD_FLAG_FUA = 1
EINVAL = 22


class PowerCut(Exception):
    pass


class VolatileDisk:
    def __init__(self, image, marker, seed):
        self.fd = os.open(image, os.O_RDWR)
        self.size = os.fstat(self.fd).st_size
        self.marker = marker
        self.random = random.Random(seed)
        self.seed = seed
        self.cache = {}  # page index -> bytearray(PAGE): written, not yet on the medium
        self.flushes = 0
        self.writes = 0
        self.most_cached = 0  # pages, at a flush

    def page(self, index):
        cached = self.cache.get(index)
        if cached is None:
            cached = self.cache[index] = bytearray(os.pread(self.fd, PAGE, index * PAGE).ljust(PAGE, b"\0"))
        return cached

    def read(self, offset, length):
        data = bytearray(os.pread(self.fd, length, offset))
        for index in range(offset // PAGE, (offset + length - 1) // PAGE + 1):
            cached = self.cache.get(index)
            if cached is not None:
                start = max(offset, index * PAGE)
                end = min(offset + length, (index + 1) * PAGE)
                data[start - offset:end - offset] = cached[start - index * PAGE:end - index * PAGE]
        return data

    def write(self, offset, data, fua):
        pages = range(offset // PAGE, (offset + len(data) - 1) // PAGE + 1)
        for index in pages:
            start = max(offset, index * PAGE)
            end = min(offset + len(data), (index + 1) * PAGE)
            self.page(index)[start - index * PAGE:end - index * PAGE] = data[start - offset:end - offset]
        self.writes += 1
        if fua:
            self.write_back(pages)

    def write_back(self, pages):
        for index in sorted(pages):
            cached = self.cache.pop(index, None)
            if cached is not None:
                os.pwrite(self.fd, cached[:max(0, min(PAGE, self.size - index * PAGE))], index * PAGE)

    def flush(self):
        self.most_cached = max(self.most_cached, len(self.cache))
        self.write_back(list(self.cache))
        self.flushes += 1

    def check_power(self):
        if os.path.exists(self.marker):
            raise PowerCut("the guest cut the power")

    def cut(self, why, quiet=False):
        pending = sorted(self.cache)
        kept = [index for index in pending if self.random.random() < 0.5]
        self.write_back(kept)
        self.cache.clear()
        os.fsync(self.fd)
        if not quiet:
            print(f"volatile-disk: power cut ({why}) after {self.writes} writes and {self.flushes} flushes (at most "
                  f"{self.most_cached} pages cached at a flush): of {len(pending)} cached pages, {len(kept)} reached "
                  f"the disk, {len(pending) - len(kept)} were lost (seed {self.seed})", file=sys.stderr, flush=True)


def recv_exact(conn, n):
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def handshake(conn, disk):
    """Newstyle fixed: EXPORT_NAME, INFO and GO are served (any name), every other option is unsupported."""
    conn.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    (client_flags,) = struct.unpack(">I", recv_exact(conn, 4))
    while True:
        magic, option, length = struct.unpack(">QII", recv_exact(conn, 16))
        if magic != IHAVEOPT:
            raise EOFError
        recv_exact(conn, length)
        if option == OPT_EXPORT_NAME:
            zeroes = b"" if client_flags & FLAG_NO_ZEROES else bytes(124)
            conn.sendall(struct.pack(">QH", disk.size, TRANSMISSION_FLAGS) + zeroes)
            return
        if option == OPT_ABORT:
            conn.sendall(struct.pack(">QIII", OPT_REPLY_MAGIC, option, REP_ACK, 0))
            raise EOFError
        if option in (OPT_INFO, OPT_GO):
            info = struct.pack(">HQH", INFO_EXPORT, disk.size, TRANSMISSION_FLAGS)
            conn.sendall(struct.pack(">QIII", OPT_REPLY_MAGIC, option, REP_INFO, len(info)) + info +
                         struct.pack(">QIII", OPT_REPLY_MAGIC, option, REP_ACK, 0))
            if option == OPT_GO:
                return
        else:
            conn.sendall(struct.pack(">QIII", OPT_REPLY_MAGIC, option, REP_ERR_UNSUP, 0))


def reply(conn, cookie, error=0, data=b""):
    conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, error, cookie) + data)


def transmission(conn, disk):
    while True:
        magic, flags, kind, cookie, offset, length = struct.unpack(">IHHQQI", recv_exact(conn, 28))
        if magic != REQUEST_MAGIC:
            raise EOFError
        payload = recv_exact(conn, length) if kind == CMD_WRITE else b""
        disk.check_power()  # before anything is applied or answered: from here on, nothing is
        if kind == CMD_DISC:
            raise EOFError
        if kind in (CMD_READ, CMD_WRITE) and (offset + length > disk.size or length == 0):
            reply(conn, cookie, EINVAL)
        elif kind == CMD_READ:
            reply(conn, cookie, data=disk.read(offset, length))
        elif kind == CMD_WRITE:
            disk.write(offset, payload, flags & CMD_FLAG_FUA)
            reply(conn, cookie)
        elif kind == CMD_FLUSH:
            disk.flush()
            reply(conn, cookie)
        else:
            reply(conn, cookie, EINVAL)


def serve(image, path, marker, seed, quiet=False):
    disk = VolatileDisk(image, marker, seed)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once it listens: whoever waits for SOCKET to exist (rdma-vm before it
    # starts qemu, the selftest) can connect at once, never between bind() and listen(), where it was refused.
    listener.bind(path + ".tmp")
    listener.listen(1)
    os.rename(path + ".tmp", path)
    conn, _ = listener.accept()  # one client, one power cut: qemu connects once
    listener.close()
    why = "the client went away"
    try:
        handshake(conn, disk)
        transmission(conn, disk)
    except PowerCut as cut:
        why = str(cut)
    except (EOFError, ConnectionError):
        pass
    finally:
        disk.cut(why, quiet)
        conn.close()


def selftest():
    import tempfile
    import threading
    failures, checks = [], [0]

    def expect(what, ok):
        checks[0] += 1
        if not ok:
            print("FAIL  " + what)
            failures.append(what)

    with tempfile.TemporaryDirectory() as scratch:
        image, path, marker = (os.path.join(scratch, name) for name in ("disk.img", "disk.sock", "rc"))
        with open(image, "wb") as f:
            f.truncate(16 * PAGE)
        kept_counts = []
        for seed in range(8):  # several random halves: each unflushed page is kept by some and lost by others
            with open(image, "r+b") as f:
                f.write(bytes(16 * PAGE))
            for stale in (path, marker):
                if os.path.exists(stale):
                    os.unlink(stale)
            server = threading.Thread(target=serve, args=(image, path, marker, seed, True))
            server.start()
            deadline = time.monotonic() + 10
            while not os.path.exists(path):  # it appears once the server listens
                if time.monotonic() > deadline:
                    raise TimeoutError("the server did not listen within 10 s")
                time.sleep(0.01)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            recv_exact(client, 18)
            client.sendall(struct.pack(">I", FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
            client.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, 6) + struct.pack(">I", 0) + struct.pack(">H", 0))
            recv_exact(client, 20 + 12)  # NBD_REP_INFO with NBD_INFO_EXPORT
            recv_exact(client, 20)  # NBD_REP_ACK

            def request(kind, offset, data=b"", flags=0, length=None):
                size = len(data) if length is None else length
                client.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, kind, 1, offset, size) + data)
                magic, error, _ = struct.unpack(">IIQ", recv_exact(client, 16))
                return recv_exact(client, size) if kind == CMD_READ and error == 0 else error

            page = lambda byte: bytes([byte]) * PAGE  # noqa: E731
            request(CMD_WRITE, 0, page(1))  # cached only
            expect(f"seed {seed}: a read sees a write not yet flushed", request(CMD_READ, 0, length=PAGE) == page(1))
            request(CMD_WRITE, 2 * PAGE, page(2))
            request(CMD_FLUSH, 0)  # page 2 (and page 0) on the medium
            request(CMD_WRITE, 4 * PAGE, page(4), flags=CMD_FLAG_FUA)  # page 4 on the medium
            for n in range(6, 14):  # cached only, each one byte short of its page
                request(CMD_WRITE, n * PAGE + 1, bytes([n]) * (PAGE - 1))
            with open(marker, "w"):
                pass
            client.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_WRITE, 9, 15 * PAGE, PAGE) + page(15))
            expect(f"seed {seed}: the connection ends at the power cut", client.recv(16) == b"")
            client.close()
            server.join()
            with open(image, "rb") as f:
                medium = f.read()
            at = lambda n: medium[n * PAGE:(n + 1) * PAGE]  # noqa: E731
            expect(f"seed {seed}: flushed and FUA writes survive the cut",
                   at(0) == page(1) and at(2) == page(2) and at(4) == page(4))
            kept = [n for n in range(6, 14) if at(n) != bytes(PAGE)]
            expect(f"seed {seed}: unflushed pages are whole or absent (kept: {kept})",
                   all(at(n) == b"\0" + bytes([n]) * (PAGE - 1) for n in kept))
            expect(f"seed {seed}: nothing after the cut was applied", at(15) == bytes(PAGE))
            kept_counts.append(len(kept))
        expect("over the seeds, some unflushed pages were lost and some kept",
               min(kept_counts) < 8 and max(kept_counts) > 0)
    print(f"volatile-disk selftest: {checks[0] - len(failures)} of {checks[0]} checks as they should be")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["selftest"]:
        sys.exit(selftest())
    image, path, marker = sys.argv[1:4]
    seed = int(os.environ.get("RDMA_VM_DISK_SEED") or random.SystemRandom().randrange(1 << 32))
    serve(image, path, marker, seed)


if __name__ == "__main__":
    main()
