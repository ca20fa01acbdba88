"""How the runner starts iperf3: the argv of each server and client, the shim that holds a client
until its start time, and where iperf3 keeps its buffer files.

Three things keep many iperf3 processes in a small guest from disturbing the experiment (all
measured with 200 + 10 flows in a 2-vCPU TCG guest, ``make bench``'s many-flows point):

* **priority**: servers and clients run at ``nice 19``. At equal priority 420 iperf3 processes
  starved the kernel's network work deferred to ``ksoftirqd``: a handshake's SYN-ACK took 258 ms
  (median; 850 ms at the 90th percentile) longer than the path's delay to be answered, and 40 %
  of the connections sent their SYN again. At ``nice 19``: 0.9 ms, none. The emulated path comes
  first; a starved iperf3 still has its socket buffer, which the kernel keeps sending from.
* **buffer files on tmpfs**: iperf3 makes each stream's buffer a deleted file in ``$TMPDIR``
  (``/tmp`` by default). In a virtme-ng guest ``/tmp`` is an overlay over the host's, reached over
  virtiofs: 200 processes queued on its directory lock for seconds. ``TMPDIR`` points at a
  directory of :func:`tmpfs_base` instead.
* **held after exec**: each client is started before traffic with ``hold_at_connect.so``
  preloaded, which stops it (SIGSTOP) at its first ``connect()``: exec'd, linked, options read,
  nothing sent. The runner continues it (SIGCONT) shortly before its start time. Continued before
  exec, 210 clients spread their first packets over 0-8 s; held here, over 0.14 s.

One more keeps the guest's clock its own in virtual time: **the time zone from a tmpfs**. With ``TZ``
unset, glibc's ``localtime()`` stats ``/etc/localtime`` at every call to see whether it changed, and
iperf3 calls it as its test begins: in a guest that file is the host's, reached over virtiofs, so every
run's traffic began with two waits for the host (seen in the host's file server, 2 in each of 10 runs'
first 0.06 s), and in virtual time a wait moves the guest's clock at the host's pace. The runner copies
the zone file into a tmpfs and names the copy in ``TZ`` (:func:`local_zone`): each process reads it
once, from memory.

The same shim makes a fixed-size transfer (``iperf3 -n``) end when its last byte is acknowledged:
iperf3 tells its server the test is over once the bytes are written to the socket, and the server
stops reading, so a 1 MB upload through 100 ms of 10 Mbit/s reached the server as 300-350 KB (the
rest still in the sender's socket). With ``CC_TESTBED_DRAIN`` set, the shim holds that message
until every data connection's send queue is empty.

The shim is compiled with ``clang`` (already needed for the tc-BPF programs), once per source
version, into the cache; a guest uses the host's build (virtme-ng shares the host's files), the
lab VM builds its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.guest import build
from testbed.plan.connections import Connection, client_argv, server_argv

HOLD_SOURCE = Path(__file__).resolve().parent / "native" / "hold_at_connect.c"
#: iperf3's niceness (module doc)
NICENESS = 19
#: iperf3 sends its first data about this many base round trips after it is continued: control
#: connection, parameters, data connection, start message (and its way to the capture point).
#: Measured in the default suite under TCG: 5.3 to 6.4 round trips, median 5.8 (4 left GEO flows
#: 0.7 to 1.0 s late)
SETUP_ROUND_TRIPS = 5.5
#: directories of iperf3's buffer files are made under the first of these that is a tmpfs
TMPFS_CANDIDATES = ("/dev/shm", "/run")
SCRATCH_PREFIX = "cc-testbed-iperf3-"
#: where glibc reads the time zone when ``TZ`` is unset (module doc)
ZONE_FILE = Path("/etc/localtime")

#: the shim this process preloads (set from the plan when the host built it); None = build here
_library: Path | None = None


class LaunchError(RuntimeError):
    """The hold shim could not be built; the message says why and what to do."""


def build_hold_library(log=print) -> Path:
    """``hold_at_connect.so``, built once per source version into the cache (:mod:`testbed.guest.build`)."""
    if shutil.which("clang") is None:
        raise LaunchError(
            "holding iperf3 clients until their start time needs clang (Debian package clang): run 'make setup'"
        )

    def compile_to(output: Path) -> None:
        out = subprocess.run(
            ["clang", "-O2", "-shared", "-fPIC", "-o", str(output), str(HOLD_SOURCE)], capture_output=True, text=True
        )
        if out.returncode != 0:
            raise LaunchError(f"clang could not compile {HOLD_SOURCE}: {out.stderr.strip()[-800:]}")

    return build.cached_file(
        "native",
        build.source_digest([HOLD_SOURCE]),
        "hold_at_connect.so",
        compile_to,
        log,
        f"compiling {HOLD_SOURCE.name} (clang -shared)",
    )


def use_hold_library(path: str | None) -> None:
    """Preload this build from now on (a guest gets the host's build through the plan)."""
    global _library
    _library = Path(path) if path else None


def hold_library() -> Path:
    global _library
    if _library is None or not _library.exists():
        _library = build_hold_library()
    return _library


def tmpfs_base() -> Path:
    """The first of TMPFS_CANDIDATES mounted as tmpfs, else the system's temporary directory."""
    mounts = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2:
            mounts[fields[1]] = fields[2]
    for candidate in TMPFS_CANDIDATES:
        if mounts.get(candidate) == "tmpfs":
            return Path(candidate)
    return Path(tempfile.gettempdir())


def make_scratch(kind: str = "") -> Path:
    """A directory for one run's iperf3 buffer files (empty: iperf3 deletes each file once mapped), or of
    another ``kind`` (``raw``: a virtual-time run's raw files until it ends), named after the runner's
    process so that a cleanup can tell a killed run's from a live one's."""
    suffix = f"{kind}-" if kind else ""
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{suffix}", dir=tmpfs_base()))


def scratch_owner(scratch: Path) -> int:
    """The pid of the runner that made ``scratch``."""
    return int(scratch.name[len(SCRATCH_PREFIX) :].split("-")[0])


def stale_scratch_dirs() -> list[Path]:
    """Every scratch directory there is (``testbed cleanup`` removes those whose runner is gone)."""
    return sorted(tmpfs_base().glob(f"{SCRATCH_PREFIX}*"))


@contextlib.contextmanager
def local_zone(zone_file: Path = ZONE_FILE) -> Iterator[None]:
    """While the block runs, the processes it starts take this system's time zone from a copy in a tmpfs,
    named in ``TZ`` (module doc); a ``TZ`` the caller set stands. The copy is removed afterwards (a killed
    runner's, by the scratch directories' cleanup)."""
    if "TZ" in os.environ:
        yield
        return
    scratch = make_scratch(kind="zone")
    try:
        if zone_file.is_file():
            shutil.copyfile(zone_file, scratch / "localtime")
            os.environ["TZ"] = f":{scratch / 'localtime'}"
        else:
            os.environ["TZ"] = "UTC0"  # glibc's own choice without the file (looked up once per process)
        yield
    finally:
        os.environ.pop("TZ", None)
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class Command:
    """An iperf3 to start: its argv and what it adds to the runner's environment. Set through
    ``Popen(env=...)`` and :func:`start`'s ``setpriority``, not ``env`` and ``nice`` in the argv:
    each of those is one more exec, 33 ms under TCG (measured here: 40 starts of ``/bin/true``
    took 1.42 s, through ``env`` and ``nice`` 4.07 s), two thirds of an iperf3's own start."""

    argv: list[str]
    env: dict[str, str]


def _env(scratch: Path, preload: Path | None = None, drain: bool = False) -> dict[str, str]:
    return {
        "TMPDIR": str(scratch),
        **({"LD_PRELOAD": str(preload)} if preload else {}),
        **({"CC_TESTBED_DRAIN": "1"} if drain else {}),
    }


def held_at_socket_env() -> dict[str, str]:
    """A process other than iperf3 (ping) held by the shim at its first ``socket()`` (module doc)."""
    return {"LD_PRELOAD": str(hold_library()), "CC_TESTBED_HOLD_AT_SOCKET": "1"}


def server_command(conn: Connection, scratch: Path) -> Command:
    return Command(server_argv(conn), _env(scratch))


def client_command(conn: Connection, scratch: Path, library: Path) -> Command:
    """The client's command: it stops itself at its first connect(), and a fixed-size transfer ends
    when its last byte is acknowledged (module doc)."""
    return Command(client_argv(conn), _env(scratch, library, drain=bool(conn.size_bytes)))


def start(net, node: str, command: Command, output: Path) -> subprocess.Popen:
    """``command`` started in ``node`` at :data:`NICENESS`. The priority is set once the process
    exists: it runs at the runner's for the few microseconds between, which a server that has not
    listened yet and a client that will stop at its first connect() spend on their own start."""
    proc = net.popen(node, command.argv, output=output, env={**os.environ, **command.env})
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, NICENESS)
    except ProcessLookupError:
        pass  # it has exited already: its output says why, and the caller's wait reports it
    return proc


def release_lead_s(conn: Connection, setup_rtt_ms: float | None = None) -> float:
    """How long before its start time a client is continued, so that its data leaves on time.
    ``setup_rtt_ms``: the round trip its set-up packets take on average, where that is not the base
    RTT (packets sprayed over paths of different delays)."""
    return SETUP_ROUND_TRIPS * (setup_rtt_ms if setup_rtt_ms is not None else conn.base_rtt_ms) / 1000
