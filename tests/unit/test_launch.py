"""testbed.guest.launch: how iperf3 is started (argv), and the shim that holds a client at its first connect()."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.guest import build, launch
from testbed.plan.connections import Connection


def conn(**kw) -> Connection:
    base = dict(
        id="c0",
        flow=0,
        replica=0,
        period=0,
        pair=0,
        cc="reno",
        direction="forward",
        sender="l0",
        sender_ip="10.1.0.1",
        receiver="r0",
        receiver_ip="10.2.0.1",
        server_port=5201,
        client_port=40000,
        start_s=0.0,
        stop_s=10.0,
        base_rtt_ms=100.0,
    )
    return Connection(**{**base, **kw})


def test_iperf3_is_exec_d_directly_with_its_buffer_files_in_the_scratch_directory():
    scratch = Path("/dev/shm/cc-testbed-iperf3-1-x")
    server = launch.server_command(conn(), scratch)
    assert server.argv[:2] == ["iperf3", "-s"] and server.env == {"TMPDIR": str(scratch)}
    client = launch.client_command(conn(), scratch, Path("/cache/hold_at_connect.so"))
    assert client.argv[:2] == ["iperf3", "-c"]
    assert client.env == {"TMPDIR": str(scratch), "LD_PRELOAD": "/cache/hold_at_connect.so"}
    sized = launch.client_command(conn(size_bytes=1_000_000), scratch, Path("/cache/hold_at_connect.so"))
    assert sized.env["CC_TESTBED_DRAIN"] == "1"


class _Node:
    """A network whose nodes are this namespace (what launch.start asks of testbed.guest.network)."""

    def popen(self, node, argv, output, **kwargs):
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, **kwargs)


def test_a_started_iperf3_runs_niced_with_its_environment(tmp_path):
    command = launch.Command(["sleep", "30"], {"TMPDIR": str(tmp_path)})
    proc = launch.start(_Node(), "h1", command, tmp_path / "out")
    try:
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == launch.NICENESS
        environ = Path(f"/proc/{proc.pid}/environ")
        for _ in range(100):  # Popen returns at the exec, the new environment is set up just after
            if environ.read_bytes():
                break
            time.sleep(0.01)
        assert f"TMPDIR={tmp_path}".encode() in environ.read_bytes().split(b"\0")
    finally:
        proc.kill()
        proc.wait()


def test_a_client_is_released_five_and_a_half_base_round_trips_ahead():
    assert launch.release_lead_s(conn(base_rtt_ms=250)) == pytest.approx(1.375)
    assert launch.release_lead_s(conn(base_rtt_ms=20)) == pytest.approx(0.11)
    assert launch.release_lead_s(conn(base_rtt_ms=120), setup_rtt_ms=300) == pytest.approx(1.65)  # sprayed paths


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
    monkeypatch.setattr(build, "cache_base", lambda: tmp_path)
    library = launch.build_hold_library(log=lambda *_: None)
    assert launch.build_hold_library(log=lambda *_: None) == library  # cached by source version
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = (
        f"import socket, sys; print('started', flush=True); s = socket.create_connection(('127.0.0.1', {port})); "
        f"s.sendall(b'x'); print('connected', flush=True)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], env=dict(os.environ, LD_PRELOAD=str(library)), stdout=subprocess.PIPE, text=True
    ) as proc:
        _hold_and_release(proc, listener)
    listener.close()


def test_the_shim_holds_a_ping_at_its_first_socket_until_it_is_continued(tmp_path, monkeypatch):
    """ping, given its source address, has no connect(): it is held at socket(), before any echo, and its
    deadline (-w) counts from when it goes on: held longer than it, it still sends every echo."""
    if shutil.which("ping") is None:
        pytest.skip("no ping here (Debian package iputils-ping; 'make setup' installs it)")
    monkeypatch.setattr(build, "cache_base", lambda: tmp_path)
    monkeypatch.setattr(launch, "_library", None)
    env = {**os.environ, **launch.held_at_socket_env()}
    argv = ["ping", "-n", "-D", "-c", "2", "-i", "0.2", "-w", "1", "-I", "127.0.0.1", "127.0.0.1"]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 10
            while _state(proc.pid) != "T":
                assert proc.poll() is None and time.monotonic() < deadline, "ping did not stop at socket()"
                time.sleep(0.01)
            time.sleep(1.2)
            assert _state(proc.pid) == "T", "held until continued"
            continued = time.time()
            proc.send_signal(subprocess.signal.SIGCONT)
            out, _ = proc.communicate(timeout=10)
        finally:
            proc.kill()
    stamps = [float(line[1 : line.index("]")]) for line in out.splitlines() if line.startswith("[")]
    assert proc.returncode == 0 and len(stamps) == 2, out
    assert stamps[0] >= continued, "no echo before it was continued"


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


@pytest.mark.parametrize("drain", [True, False])
def test_the_shim_holds_the_end_of_test_message_until_the_data_is_acknowledged(tmp_path, monkeypatch, drain):
    # iperf3's TEST_END (one byte, 4) on its first connection, written while its data connection
    # still holds bytes the receiver has not taken (its window is closed: nothing is read)
    monkeypatch.setattr(build, "cache_base", lambda: tmp_path)
    library = launch.build_hold_library(log=lambda *_: None)
    control, data = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    data.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    code = (
        f"import os, socket; print('started', flush=True); "
        f"c = socket.create_connection(('127.0.0.1', {control.getsockname()[1]})); "
        f"d = socket.create_connection(('127.0.0.1', {data.getsockname()[1]})); d.setblocking(False)\n"
        f"try:\n    d.send(b'x' * 4_000_000)\nexcept BlockingIOError:\n    pass\n"
        f"os.write(c.fileno(), bytes([4])); print('ended', flush=True)"
    )
    env = dict(os.environ, LD_PRELOAD=str(library), **({"CC_TESTBED_DRAIN": "1"} if drain else {}))
    accepted: list[socket.socket] = []
    with subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "started"
            while _state(proc.pid) != "T":
                time.sleep(0.01)
            proc.send_signal(subprocess.signal.SIGCONT)
            control.settimeout(10)
            data.settimeout(10)
            (ctl, _), (peer, _) = control.accept(), data.accept()
            accepted += [ctl, peer]
            ctl.settimeout(0.5)
            if not drain:
                assert ctl.recv(1) == b"\x04"  # at once, the data still queued
                return
            with pytest.raises(TimeoutError):
                ctl.recv(1)  # held while the data is not acknowledged
            peer.settimeout(10)
            received = 0
            while chunk := peer.recv(1 << 20):  # until the client, ended, closes it
                received += len(chunk)
            assert received > 100_000  # what was queued when the message was written
            ctl.settimeout(10)
            assert ctl.recv(1) == b"\x04"  # once every byte is taken and acknowledged
            assert proc.stdout.readline().strip() == "ended"
        finally:
            proc.kill()
            for sock in [*accepted, control, data]:
                sock.close()


LOCALTIME_FIVE_TIMES = """
import ctypes, ctypes.util
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.localtime.restype = ctypes.c_void_p
now = ctypes.c_long(1796285623)
for _ in range(5):
    libc.localtime(ctypes.byref(now))
"""


def zone_file_accesses(tmp_path: Path, name: str) -> list[str]:
    """The file system calls a process made on /etc/localtime and its copies while calling localtime() 5 times."""
    trace = tmp_path / f"{name}.strace"
    subprocess.run(
        ["strace", "-f", "-e", "trace=%file", "-o", str(trace), sys.executable, "-c", LOCALTIME_FIVE_TIMES],
        check=True,
        env=os.environ.copy(),
    )
    return [line for line in trace.read_text().splitlines() if "localtime" in line]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (make setup installs it)")
def test_the_runs_read_the_time_zone_once_from_a_tmpfs_not_at_every_localtime(tmp_path, monkeypatch):
    monkeypatch.delenv("TZ", raising=False)
    if not launch.ZONE_FILE.is_file():
        pytest.skip("this system has no /etc/localtime: glibc has no zone file to stat")
    # unset, glibc stats /etc/localtime at every call (in a guest: a wait for the host each time)
    assert len(zone_file_accesses(tmp_path, "unset")) >= 5
    with launch.local_zone():
        zone = os.environ["TZ"]
        copy = Path(zone[1:])
        assert zone.startswith(":") and copy.read_bytes() == launch.ZONE_FILE.read_bytes()
        assert copy.parent.parent == launch.tmpfs_base() and copy.parent.name.startswith(launch.SCRATCH_PREFIX)
        accesses = zone_file_accesses(tmp_path, "set")
    assert len(accesses) == 1 and str(copy) in accesses[0]  # read once, from the copy
    assert "TZ" not in os.environ and not copy.parent.exists()  # nothing left behind
    monkeypatch.setenv("TZ", "Europe/Rome")
    with launch.local_zone():
        assert os.environ["TZ"] == "Europe/Rome"  # the caller's choice stands
