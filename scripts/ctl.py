#!/usr/bin/python3 -IS
"""ctl.py SOCKET OP [ARGS-JSON]: one request to a blockmoverd control socket, its result as JSON on stdout; a daemon's
error goes to stderr with exit 1. For scripts that run where a JVM per call is dear (scripts/test-rdma and
scripts/test-crash, in the emulated VM, where one blockmover call costs 15-20 s): the protocol is one JSON line each
way. Python scripts import call() from it (scripts/bench-replication polls the groups so)."""
import json
import socket
import sys


class DaemonError(Exception):
    """The daemon answered with an error: its message says which."""


def call(path, op, args=None):
    """One request to the control socket at path; returns its result, or raises DaemonError."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(json.dumps({"id": 1, "op": op, "args": args or {}}).encode() + b"\n")
        reply = json.loads(s.makefile().readline())
    if not reply.get("ok"):
        raise DaemonError("ctl " + op + ": " + json.dumps(reply.get("error")))
    return reply["result"]


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    try:
        print(json.dumps(call(sys.argv[1], sys.argv[2], json.loads(sys.argv[3] if len(sys.argv) > 3 else "{}"))))
    except DaemonError as ex:
        sys.exit(str(ex))
