"""The time-based two-state loss channel in the kernel: build, attach, arm and read the tc-BPF program.

Why tc-BPF: netem decides loss per packet with no notion of time-based states, and Debian 12's
netem takes no seed; the papers' channel (``topologies/lossmodel.py``) needs both. The program
(``testbed/guest/bpf/timed_loss.bpf.c``) looks up the state covering each packet's own time in a map
(``bpf_ktime_get_ns``, nanoseconds) and draws its fate from the seed and the packet's index.

Tools: ``clang`` compiles the program (once per source version, cached), ``tc`` loads it (its
libbpf loader; pyroute2 has no ELF/BPF loader), ``bpftool`` fills and reads its maps (batch mode:
one process for the whole timeline). All three come from the tools role (``make setup``).

Object placement: the host compiles (``build``) and a guest uses the host's path (virtme-ng shares
the host's filesystem); the lab VM and a local run compile for themselves.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import struct
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from testbed.guest import build as builder
from topologies.lossmodel import State, TimedTwoStateLoss

BPF_DIR = Path(__file__).resolve().parent / "bpf"
#: the project's tc-BPF programs: name -> source (the name is also the program's function)
SOURCES = {
    "timed_loss": BPF_DIR / "timed_loss.bpf.c",
    "spray": BPF_DIR / "spray.bpf.c",
    "edt_delay": BPF_DIR / "edt_delay.bpf.c",
}
SOURCE = SOURCES["timed_loss"]
PROGRAM = "timed_loss"
#: the program's dropped_bits map: the index of every dropped packet among the first 64 x this many
DROP_BITS_WORDS = 16_384
TOOLS = ("clang", "tc", "bpftool")
#: the objects this process attaches (set from the plan when the host built them); missing = build here
_objects: dict[str, Path] = {}
_objects_lock = threading.Lock()


class LossChannelError(RuntimeError):
    """A tc-BPF program could not be built, attached, armed or read; the message says why."""


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def build(name: str = PROGRAM, log=print) -> Path:
    """The compiled program ``name`` (a key of :data:`SOURCES`), built once per source version into the cache."""
    source = SOURCES[name]
    missing = missing_tools()
    if missing:
        raise LossChannelError(
            f"the {name} tc-BPF program needs {', '.join(missing)} (Debian packages clang, iproute2, bpftool): "
            f"run 'make setup'"
        )

    def compile_to(output: Path) -> None:
        multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
        include = [f"-I/usr/include/{multiarch}"] if multiarch else []
        out = subprocess.run(
            ["clang", "-O2", "-g", "-target", "bpf", "-mcpu=v3", *include, "-c", str(source), "-o", str(output)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise LossChannelError(f"clang could not compile {source}: {out.stderr.strip()[-800:]}")

    return builder.cached_file(
        "bpf",
        builder.source_digest([source]),
        f"{name}.bpf.o",
        compile_to,
        log,
        f"compiling {source.name} (clang -target bpf)",
    )


def use_objects(paths: dict[str, str] | None) -> None:
    """Attach these objects from now on (a guest gets the host's builds through the plan)."""
    _objects.clear()
    _objects.update({name: Path(path) for name, path in (paths or {}).items() if path})


def object_path(name: str = PROGRAM) -> Path:
    with _objects_lock:  # nodes are configured from several threads (network.Network.start)
        if name not in _objects or not _objects[name].exists():
            _objects[name] = build(name)
        return _objects[name]


def attach(netns_path: str, ifname: str, name: str = PROGRAM) -> None:
    """Load program ``name`` on ``ifname``'s egress (clsact) inside a namespace; it passes every packet
    until armed."""
    obj = object_path(name)
    commands = [
        ["tc", "qdisc", "add", "dev", ifname, "clsact"],
        ["tc", "filter", "add", "dev", ifname, "egress", "bpf", "direct-action", "obj", str(obj), "sec", "tc"],
    ]
    for argv in commands:
        out = subprocess.run(["nsenter", f"--net={netns_path}", *argv], capture_output=True, text=True)
        if out.returncode != 0:
            raise LossChannelError(f"{' '.join(argv)} failed: {out.stderr.strip()[-800:]}")


def program_maps(netns_path: str, ifname: str, name: str = PROGRAM, where: str = "") -> dict[str, int]:
    """Map name -> id of program ``name`` attached to ``ifname``'s egress, found through its tc filter."""
    out = subprocess.run(
        ["nsenter", f"--net={netns_path}", "tc", "-j", "filter", "show", "dev", ifname, "egress"],
        capture_output=True,
        text=True,
    )
    try:
        filters = json.loads(out.stdout or "[]")
    except ValueError:
        filters = []
    progs = [f.get("options", {}).get("prog", {}) for f in filters]
    ids = [prog["id"] for prog in progs if prog.get("name") == name]
    if not ids:
        raise LossChannelError(f"no {name} program on {where or ifname} egress ({out.stderr.strip()})")
    prog = _bpftool("prog", "show", "id", str(ids[0]))
    names = {info["id"]: info.get("name") for info in _bpftool("map", "show")}  # one process, not one per map
    return {names[map_id]: map_id for map_id in prog.get("map_ids", []) if map_id in names}


def lookup(map_id: int, keys) -> list[dict]:
    """The entries of an array map at ``keys``, in one bpftool process (a whole dump is ~14 MB of JSON)."""
    lines = [f"map lookup id {map_id} key hex {hex_bytes(struct.pack('<I', key))}" for key in keys]
    if not lines:
        return []
    with _batch_file(lines) as name:
        results = _bpftool("batch", "file", name)
    return _formatted([result["output"] for result in results])


def _bpftool(*args: str) -> object:
    out = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise LossChannelError(f"bpftool {' '.join(args)} failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout) if out.stdout.strip() else None


def hex_bytes(data: bytes) -> str:
    return " ".join(f"{b:02x}" for b in data)


def draw_seed(seed: int, stream: int) -> int:
    """The 64-bit seed of channel ``stream``'s per-packet draws in a run of ``seed``."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little")


def _threshold(loss_pct: float) -> int:
    return round(loss_pct / 100 * (1 << 32))


@dataclass
class Channel:
    """The program attached to one interface, found by its tc filter; arm it, then read it."""

    node: str
    ifname: str
    netns_path: str
    model: TimedTwoStateLoss
    stream: int
    maps: dict[str, int] | None = None
    states: list[State] | None = None
    t0_ns: int | None = None
    draw_seed: int | None = None
    words_used: int | None = None  # words of dropped_bits the last read covered (clear zeroes them)

    def load(self, seed: int, states: list[State]) -> None:
        """Write the timeline (the channel still passes everything until :func:`start`)."""
        self.maps = program_maps(self.netns_path, self.ifname, PROGRAM, f"{self.node}/{self.ifname}")
        self.states = states
        self.draw_seed = draw_seed(seed, self.stream)
        lines = []
        for index, state in enumerate(states):
            value = struct.pack("<QQ", round(state.end_s * 1e9), _threshold(state.loss_pct))
            lines.append(
                f"map update id {self.maps['timeline']} key hex {hex_bytes(struct.pack('<I', index))} "
                f"value hex {hex_bytes(value)}"
            )
        batch(lines, f"load the loss channel on {self.node}/{self.ifname}")

    def control_line(self, t0_ns: int) -> str:
        self.t0_ns = t0_ns
        control = struct.pack("<7Q", t0_ns, self.draw_seed, len(self.states), 0, 0, 0, 0)
        return f"map update id {self.maps['control']} key hex 00 00 00 00 value hex {hex_bytes(control)}"

    def arm(self, t0_ns: int, seed: int, states: list[State]) -> None:
        """Load the timeline and start it at ``t0_ns`` (CLOCK_MONOTONIC)."""
        self.load(seed, states)
        start([self], t0_ns)

    def _lookup(self, name: str, keys) -> list[dict]:
        return lookup(self.maps[name], keys)

    def read(self) -> dict:
        """The realized timeline with packets seen/dropped per state, per-kind totals, dropped packet indices."""
        if self.maps is None or self.states is None:
            raise LossChannelError(f"the loss channel on {self.node}/{self.ifname} was never armed")
        control = self._lookup("control", [0])[0]
        counters = {entry["key"]: entry["value"] for entry in self._lookup("state_counters", range(len(self.states)))}
        words = range(min(DROP_BITS_WORDS, -(-control["value"]["next_index"] // 64)))
        bits = {entry["key"]: entry["value"] for entry in self._lookup("dropped_bits", words) if entry["value"]}
        dropped_indices = sorted(
            word * 64 + bit for word, value in bits.items() for bit in range(64) if value >> bit & 1
        )
        states = []
        totals = {"good": {"seen": 0, "dropped": 0}, "bad": {"seen": 0, "dropped": 0}}
        for index, state in enumerate(self.states):
            seen, dropped = counters.get(index, {}).get("seen", 0), counters.get(index, {}).get("dropped", 0)
            kind = "bad" if state.bad else "good"
            totals[kind]["seen"] += seen
            totals[kind]["dropped"] += dropped
            states.append({**state.to_dict(), "seen": seen, "dropped": dropped})
        for kind, total in totals.items():
            configured = self.model.bad_loss_pct if kind == "bad" else self.model.good_loss_pct
            realized = 100 * total["dropped"] / total["seen"] if total["seen"] else None
            time_s = sum(s.end_s - s.start_s for s in self.states if (kind == "bad") == s.bad)
            total.update({"configured_loss_pct": configured, "realized_loss_pct": realized, "time_s": time_s})
        self.words_used = len(words)
        return {
            "node": self.node,
            "interface": self.ifname,
            "model": self.model.model_dump(mode="json"),
            "stream": self.stream,
            "draw_seed": self.draw_seed,
            "t0_ns": self.t0_ns,
            "packets_seen": control["value"]["next_index"],
            "passed_before_t0": control["value"]["before"],
            "passed_after_timeline": control["value"]["after"],
            "passed_control": control["value"]["control"],
            "per_state": totals,
            "dropped_packet_indices": dropped_indices,
            "states": states,
        }

    def clear(self) -> None:
        """Disarm the channel (it passes everything again) and zero the counters this run used, after
        :meth:`read`: a network kept for the next run (testbed.guest.keeper) hands it on as new."""
        zero = "value hex " + hex_bytes(bytes(16))
        lines = [f"map update id {self.maps['control']} key hex 00 00 00 00 value hex {hex_bytes(bytes(56))}"]
        lines += [
            f"map update id {self.maps['state_counters']} key hex {hex_bytes(struct.pack('<I', i))} {zero}"
            for i in range(len(self.states or []))
        ]
        words = DROP_BITS_WORDS if self.words_used is None else self.words_used
        lines += [
            f"map update id {self.maps['dropped_bits']} key hex {hex_bytes(struct.pack('<I', w))} value hex "
            f"{hex_bytes(bytes(8))}"
            for w in range(words)
        ]
        batch(lines, f"clear the loss channel on {self.node}/{self.ifname}")


def start(channels: list[Channel], t0_ns: int) -> None:
    """Start loaded channels at ``t0_ns``: one bpftool process for all of them (their clocks agree)."""
    if channels:
        batch([channel.control_line(t0_ns) for channel in channels], "start the loss channels")


@contextlib.contextmanager
def _batch_file(lines: list[str]):
    """A bpftool batch file holding ``lines`` (one bpftool process for all of them)."""
    with tempfile.NamedTemporaryFile("w", suffix=".bpftool") as batch:
        batch.write("\n".join(lines) + "\n")
        batch.flush()
        yield batch.name


def batch(lines: list[str], what: str) -> None:
    with _batch_file(lines) as name:
        out = subprocess.run(["bpftool", "batch", "file", name], capture_output=True, text=True)
    if out.returncode != 0:
        raise LossChannelError(f"bpftool could not {what}: {out.stderr.strip()[-800:]}")


def _formatted(dump: object) -> list[dict]:
    """bpftool's map dump entries as ``{"key": ..., "value": ...}`` using the program's BTF."""
    entries = []
    for entry in dump or []:
        if "formatted" not in entry:
            raise LossChannelError("bpftool printed no BTF-formatted values: the program was built without -g")
        entries.append(entry["formatted"])
    return entries
