#!/usr/bin/python3 -IS
"""ctl.py SOCKET OP [ARGS-JSON]: one request to a blockmoverd control socket, its result as JSON on stdout; a daemon's
error goes to stderr with exit 1. For scripts that run where a JVM per call is dear (scripts/test-rdma and
scripts/test-crash, in the emulated VM, where one blockmover call costs 15-20 s): the protocol is one JSON line each
way."""
import json
import socket
import sys

if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(json.dumps({"id": 1, "op": sys.argv[2], "args": json.loads(sys.argv[3] if len(sys.argv) > 3 else "{}")})
          .encode() + b"\n")
reply = json.loads(s.makefile().readline())
if not reply.get("ok"):
    sys.exit("ctl " + sys.argv[2] + ": " + json.dumps(reply.get("error")))
print(json.dumps(reply["result"]))
