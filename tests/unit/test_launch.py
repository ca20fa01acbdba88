"""testbed.launch: how iperf3 is started (argv), and the shim that holds a client at its first connect()."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import launch
from testbed.traffic import Connection


def conn(**kw) -> Connection:
    base = dict(id="c0", flow=0, replica=0, period=0, pair=0, cc="reno", direction="forward", sender="l0",
                sender_ip="10.1.0.1", receiver="r0", receiver_ip="10.2.0.1", server_port=5201, client_port=40000,
                start_s=0.0, stop_s=10.0, base_rtt_ms=100.0)  # fmt: skip
    return Connection(**{**base, **kw})


def test_iperf3_runs_niced_with_its_buffer_files_in_the_scratch_directory():
    scratch = Path("/dev/shm/cc-testbed-iperf3-1-x")
    server = launch.server_command(conn(), scratch)
    assert server[:5] == ["env", f"TMPDIR={scratch}", "nice", "-n", "19"]
    assert server[5:7] == ["iperf3", "-s"]
    client = launch.client_command(conn(), scratch, Path("/cache/hold_at_connect.so"))
    assert client[:6] == ["env", f"TMPDIR={scratch}", "LD_PRELOAD=/cache/hold_at_connect.so", "nice", "-n", "19"]
    assert client[6:8] == ["iperf3", "-c"]


def test_a_client_is_released_four_base_round_trips_ahead():
    assert launch.release_lead_s(conn(base_rtt_ms=250)) == pytest.approx(1.0)
    assert launch.release_lead_s(conn(base_rtt_ms=20)) == pytest.approx(0.08)


def test_scratch_directories_are_on_tmpfs_and_name_their_runner():
    scratch = launch.make_scratch()
    try:
        assert scratch.parent == launch.tmpfs_base()
        assert launch.scratch_owner(scratch) == os.getpid()
        assert scratch in launch.stale_scratch_dirs()
    finally:
        scratch.rmdir()


def test_the_shim_stops_a_process_at_its_first_connect_and_lets_it_go_on(tmp_path, monkeypatch):
    # built with clang, which the project needs anyway (tc-BPF programs; 'make setup' installs it)
    monkeypatch.setattr(launch, "cache_root", lambda: tmp_path / "kernels")
    library = launch.build_hold_library(log=lambda *_: None)
    assert launch.build_hold_library(log=lambda *_: None) == library  # cached by source version
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = (f"import socket, sys; print('started', flush=True); s = socket.create_connection(('127.0.0.1', {port})); "
            f"s.sendall(b'x'); print('connected', flush=True)")  # fmt: skip
    with subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, LD_PRELOAD=str(library)),
                          stdout=subprocess.PIPE, text=True) as proc:  # fmt: skip
        _hold_and_release(proc, listener)
    listener.close()


def _hold_and_release(proc: subprocess.Popen, listener: socket.socket) -> None:
    try:
        assert proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "T":
            assert proc.poll() is None and time.monotonic() < deadline, "the process did not stop at connect()"
            time.sleep(0.01)
        listener.settimeout(0.3)
        with pytest.raises(TimeoutError):
            listener.accept()  # held before its SYN: nothing has connected
        proc.send_signal(subprocess.signal.SIGCONT)
        listener.settimeout(10)
        peer, _ = listener.accept()
        assert peer.recv(1) == b"x"
        assert proc.stdout.readline().strip() == "connected"
        assert proc.wait(timeout=10) == 0
        peer.close()
    finally:
        proc.kill()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
