"""testbed.guest.clients reads from /proc whether a server listens before the traffic is scheduled."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from testbed.guest import clients
from testbed.guest.errors import RunFailed


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_a_listening_socket_is_seen_and_a_bound_one_is_not(family):
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(("::" if family == socket.AF_INET6 else "127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert not clients.listening(os.getpid(), port)
        sock.listen()
        assert clients.listening(os.getpid(), port)


def test_a_server_that_exits_without_listening_fails_the_run_naming_it(tmp_path, monkeypatch):
    (tmp_path / "iperf3-c3-server.json").write_text('{"error": "unable to start listener"}')
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(RunFailed, match=r"iperf3 server of c3 did not listen on port 1.*unable to start listener"):
        clients.wait_listening({"c3": proc}, {"c3": 1}, tmp_path)
