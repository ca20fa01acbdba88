"""Short transfers one after another, each on a new TCP connection, timed: a requests flow's server
and client (``testbed.plan.latency``). Standard library only: it runs as a script in a node.

Why written here: the tools that time short transfers are netperf's TCP_CRR (not in Debian's main
archive) and HTTP load generators (a web server and a client, and their own timing); iperf3 runs one
test per process (57 ms to start one under TCG). This is a few dozen lines of sockets.

Protocol: the client connects, sends the response size as 8 bytes (big-endian), reads that many bytes
and closes. It prints one JSON line per transfer: ``start_unix`` (the captures' clock), ``completion_s``
from ``connect()`` to the last byte, ``bytes`` received, and ``error`` when it failed.

The client stops itself (SIGSTOP) once ready; the runner continues it at its start time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
CHUNK = 64 * 1024
#: a transfer that takes longer than this is abandoned and reported as an error
TRANSFER_TIMEOUT_S = 60.0


def _tcp_socket(cc: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
    return sock


def serve(bind: str, port: int, cc: str) -> None:
    """Answer each connection with the number of bytes it asks for, one thread per connection."""
    listener = _tcp_socket(cc)
    listener.bind((bind, port))
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer, args=(conn,), daemon=True).start()


def _answer(conn: socket.socket) -> None:
    with conn:
        header = b""
        while len(header) < 8:
            part = conn.recv(8 - len(header))
            if not part:
                return
            header += part
        left = struct.unpack("!Q", header)[0]
        block = bytes(min(CHUNK, left))
        while left > 0:
            conn.sendall(block[: min(CHUNK, left)])
            left -= min(CHUNK, left)


def fetch_one(server: str, port: int, bind: str, client_port: int, size: int, cc: str) -> dict:
    """One timed transfer of ``size`` bytes on a new connection."""
    start_unix, start = time.time(), time.monotonic()
    received, error = 0, None
    try:
        with _tcp_socket(cc) as sock:
            sock.settimeout(TRANSFER_TIMEOUT_S)
            sock.bind((bind, client_port))
            sock.connect((server, port))
            sock.sendall(struct.pack("!Q", size))
            while received < size:
                part = sock.recv(CHUNK)
                if not part:
                    break
                received += len(part)
    except OSError as err:
        error = f"{type(err).__name__}: {err}"
    if error is None and received < size:
        error = f"the server closed after {received} of {size} bytes"
    record = {"start_unix": round(start_unix, 6), "completion_s": round(time.monotonic() - start, 6), "bytes": received}
    return record | ({"error": error} if error else {})


def fetch(args: argparse.Namespace) -> None:
    """Transfers one after another for ``duration_s`` from when it is continued."""
    os.kill(os.getpid(), signal.SIGSTOP)  # ready: the runner continues it at its start time
    end = time.monotonic() + args.duration_s
    i = 0
    while time.monotonic() < end:
        port = args.first_port + i % args.ports
        print(json.dumps(fetch_one(args.server, args.port, args.bind, port, args.size, args.cc)), flush=True)
        i += 1
        time.sleep(args.think_ms / 1000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    server = sub.add_parser("serve")
    server.add_argument("--bind", required=True)
    server.add_argument("--port", type=int, required=True)
    server.add_argument("--cc", required=True)
    client = sub.add_parser("fetch")
    client.add_argument("--server", required=True)
    client.add_argument("--port", type=int, required=True)
    client.add_argument("--bind", required=True)
    client.add_argument("--first-port", type=int, required=True)
    client.add_argument("--ports", type=int, required=True)
    client.add_argument("--size", type=int, required=True)
    client.add_argument("--think-ms", type=float, default=0.0)
    client.add_argument("--duration-s", type=float, required=True)
    client.add_argument("--cc", required=True)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.bind, args.port, args.cc)
    else:
        fetch(args)


if __name__ == "__main__":
    sys.exit(main())
