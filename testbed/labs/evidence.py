"""A graded run held to its evidence: what a student hands in is checked against the captures it was
made from, not only read.

A run folder's ``flows.csv`` and ``latency.csv`` are the analysis of its ``raw/`` files, and its
manifest's fidelity verdict is the guest's judgement of them; all three are text a student can
edit. Grading (testbed/labs/grading.py) therefore asks of each graded run:

1. its ``raw/`` files are those the guest wrote: each file the manifest lists, with that sha256
   (a capture edited, or left at home, fails naming the file);
2. its ``flows.csv`` and ``latency.csv`` are what the analysis gives on those files: the run is
   analysed again here, by the same code (``analysis.runs.analyze.analyze_run``), and each graded column
   compared (``goodput_mbit`` edited x1.15 fails, naming the file, the column and both values);
3. its manifest's fidelity verdict is that of its checks, and each check whose evidence is a raw
   file (the base RTT from ping, a capture's drops from tcpdump's log, a radio channel's loss from its
   timeline) passes or fails again here by the guest's own check function; a manifest edited to say
   "trustworthy" over a failed check fails, naming the check and the file that decides it.

What this cannot catch, and docs/labs.md says: a student who forges captures, traces and manifest
consistently (their sha256 included). Nothing on a student's machine can be signed with a key the
student lacks; the point is that an edited number is caught, and a forgery means rewriting
captures packet by packet. The CPU and host-contention checks have no file behind them: the
manifest's word stands.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from pathlib import Path

import pandas as pd

from analysis.runs import analyze as run_analysis
from testbed.guest import capture, fidelity
from testbed.labs import labels
from testbed.results import rundir

#: flows.csv's columns that grading reads (testbed/labs/studentruns.py; group_metric in analysis/runs/metrics.py)
FLOW_COLUMNS = ("cc", "direction", "goodput_mbit", "recv_goodput_mbit", "sent_bytes", "retrans_bytes")
#: how far a recomputed number may sit from the file's: the file holds 10 significant digits
RELATIVE_TOLERANCE = 1e-6


def run_problems(run_dir: Path, receiver_pct: float | None = None) -> list[str]:
    """Why the run's files disagree with its evidence (empty: they agree), each naming the file;
    ``receiver_pct``: the lab's goodput agreement with iperf3's receiver (testbed/labs/labels.py)."""
    try:
        manifest = rundir.read_json(run_dir / rundir.MANIFEST)
    except rundir.LoadError as err:
        return [str(err)]
    problems = raw_problems(run_dir, manifest)
    if problems:
        return problems
    raw = run_dir / "raw"
    problems = labels.label_problems(raw, manifest) + table_problems(run_dir, manifest, receiver_pct)
    return problems + fidelity_problems(raw, manifest)


def raw_problems(run_dir: Path, manifest: dict) -> list[str]:
    """Each raw file the manifest lists, present with the sha256 the guest recorded."""
    files = manifest.get("files") or {}
    if not files:
        return [f"{rundir.MANIFEST} lists no raw files: not a run the testbed made"]
    if not (run_dir / "raw").is_dir():
        return ["raw/ is missing: hand in each run with its raw/ folder (grading recomputes the run from it)"]
    problems = []
    for name, sha in sorted(files.items()):
        path = run_dir / name
        if not path.is_file():
            problems.append(f"{name} is missing: hand in the run's raw/ folder whole")
        elif rundir.sha256_file(path) != sha:
            problems.append(f"{name} is not the file the run wrote ({rundir.MANIFEST} has another sha256)")
    return problems


def table_problems(run_dir: Path, manifest: dict, receiver_pct: float | None = None) -> list[str]:
    """flows.csv and latency.csv against the analysis of the run's raw files."""
    flows, latency = _recomputed(_manifest_key(manifest), run_dir)
    problems = labels.receiver_problems(flows, receiver_pct) if receiver_pct else []
    problems += _table_diff(run_dir / "flows.csv", flows, ["conn"], FLOW_COLUMNS)
    if not latency.empty or (run_dir / "latency.csv").is_file():
        keys = [c for c in ("conn", "kind") if c in latency.columns]
        problems += _table_diff(run_dir / "latency.csv", latency, keys, None)
    return problems


def _manifest_key(manifest: dict) -> str:
    """What the analysis depends on once the raw files are checked: the manifest whole (its ``files``
    give each raw file's sha256)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


#: manifest key -> the run's analysis, and its flows and latency tables as written
_RECOMPUTED: dict[str, tuple[run_analysis.RunAnalysis, pd.DataFrame, pd.DataFrame]] = {}


def _recomputed(key: str, run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's flows and latency tables as the analysis writes them (through the CSV its writer makes,
    so that both sides carry the same digits). Kept per manifest, whose ``files`` the raw files were
    just checked against: a run is analysed once per process however often it is graded, wherever its
    folder is (the unit tier's cheats grade copies of one submission twenty times)."""
    if key not in _RECOMPUTED:
        recomputed = run_analysis.analyze_run(run_dir, write=False)
        _RECOMPUTED[key] = (recomputed, _as_written(recomputed.flows), _as_written(recomputed.latency))
    _, flows, latency = _RECOMPUTED[key]
    return flows.copy(), latency.copy()


def analysed(run_dir: Path) -> run_analysis.RunAnalysis:
    """The run's analysis from its raw files (what the report windows a claim's goodput on), kept per
    manifest as :func:`_recomputed` keeps it. A manifest that cannot be read is analysed uncached (the
    analysis names the problem)."""
    try:
        key = _manifest_key(rundir.read_json(run_dir / rundir.MANIFEST))
    except rundir.LoadError:
        return run_analysis.analyze_run(run_dir, write=False)
    _recomputed(key, run_dir)
    return _RECOMPUTED[key][0]


def _as_written(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return frame
    return pd.read_csv(io.StringIO(frame.to_csv(index=False, float_format="%.10g")))


def _table_diff(path: Path, recomputed: pd.DataFrame, keys: list[str], columns: tuple[str, ...] | None) -> list[str]:
    """Where the file at ``path`` and the recomputed table differ (the first three differences)."""
    name = path.name
    if not path.is_file():
        return [f"{name} is missing: run 'testbed report' on the session to write it again"]
    try:
        given = pd.read_csv(path)
    except (OSError, ValueError) as err:
        return [f"{name} does not read as a table ({err})"]
    wanted = [c for c in (columns or recomputed.columns) if c in recomputed.columns and c not in keys]
    absent = [c for c in [*keys, *wanted] if c not in given.columns]
    if absent:
        return [f"{name} lacks {', '.join(absent)}: run 'testbed report' on the session to write it again"]
    if len(given) != len(recomputed):
        return [f"{name} has {len(given)} rows; the run's captures give {len(recomputed)}"]
    given = given.sort_values(keys).reset_index(drop=True)
    recomputed = recomputed.sort_values(keys).reset_index(drop=True)
    differences = [
        f"{name}: {column} of {_row_name(recomputed, keys, i)} is {_shown(given[column][i])}; the run's "
        f"captures give {_shown(recomputed[column][i])}"
        for column in wanted
        for i in range(len(recomputed))
        if not _same(given[column][i], recomputed[column][i])
    ]
    return differences[:3]


def _row_name(frame: pd.DataFrame, keys: list[str], i: int) -> str:
    return " ".join(str(frame[k][i]) for k in keys) if keys else f"row {i + 1}"


def _same(a, b) -> bool:
    numbers = [_number(a), _number(b)]
    if None in numbers:
        return str(a) == str(b)
    x, y = numbers
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _shown(value) -> str:
    number = _number(value)
    return f"{number:.6g}" if number is not None else str(value)


def fidelity_problems(raw: Path, manifest: dict) -> list[str]:
    """The run's fidelity judged again, failing closed: every check the run must have is there (a check
    deleted from the manifest fails), each check whose evidence is a raw file is judged again from that
    file by the guest's own function (the file missing fails), and the run is trustworthy only when
    every check passes, whatever the manifest's ``trustworthy`` says."""
    record = manifest.get("fidelity") or {}
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    names = {str(c.get("name")) for c in checks}
    problems = [
        f"{rundir.MANIFEST} lacks the check '{name}' the run must have: a run is graded only with every check it made"
        for name in required_checks(raw, manifest)
        if name not in names
    ]
    if not any(name.startswith("bottleneck rate") for name in names):
        problems.append(
            f"{rundir.MANIFEST} lacks a bottleneck rate check: a run is graded only with every check it made"
        )
    failed = [str(c.get("name")) for c in checks if not c.get("ok")]
    if failed:
        said = " (while it says trustworthy)" if record.get("trustworthy") else ""
        problems.append(f"{rundir.MANIFEST}'s check(s) {', '.join(failed)} failed{said}: the run is untrustworthy")
    for check in checks:
        found = _judged_again(raw, check)
        if isinstance(found, str):
            problems.append(found)
        elif found is not None and bool(found[1].ok) != bool(check.get("ok")):
            file, again = found
            said = "passed" if check.get("ok") else "failed"
            problems.append(
                f"{rundir.MANIFEST} says '{check.get('name')}' {said}; judged again from "
                f"{file}, it {'passes' if again.ok else 'fails'}: {again.detail}"
            )
    return problems


def required_checks(raw: Path, manifest: dict) -> list[str]:
    """The checks every run of this shape makes (testbed/guest/run.py): a base RTT per pair, a capture
    per capturing node, the loss of each state each timed loss channel saw packets in, the CPU and the
    data's start; the bottleneck's rate is required apart (its checks are named per direction)."""
    flows = [*(manifest.get("connections") or []), *(manifest.get("latency_flows") or [])]
    names = [f"base RTT pair {p}" for p in sorted({f.get("pair") for f in flows if isinstance(f, dict)} - {None})]
    capturing = {c.get("capture_node") for c in manifest.get("connections") or [] if isinstance(c, dict)}
    names += [f"capture {n}" for n in sorted(capturing - {None})]
    for path in sorted(raw.glob("loss-*.json")):
        try:
            channel = rundir.read_json(path)
            names += [
                f"loss {kind} {channel['node']}/{channel['interface']}"
                for kind, state in sorted(channel["per_state"].items())
                if state.get("seen")
            ]
        except (rundir.LoadError, KeyError, TypeError, AttributeError):
            names.append(f"loss of raw/{path.name}")
    return [*names, "cpu headroom", "data start"]


def _judged_again(raw: Path, check: dict) -> tuple[str, fidelity.Check] | str | None:
    """The raw file that decides the check and the check judged from it; why it cannot be judged when
    that file is missing or unreadable (a failure: evidence fails closed); None when no file here
    decides it (CPU, host contention, start times, the bottleneck's rate)."""
    name = str(check.get("name") or "")
    for pattern, judge in _JUDGES:
        match = re.fullmatch(pattern, name)
        if match:
            return judge(raw, name, match, check)
    return None


def _missing(check: str, path: Path) -> str:
    return f"the check '{check}' has no evidence: raw/{path.name}, the file that decides it, is missing or unreadable"


def _rtt(raw: Path, name: str, match: re.Match, check: dict):
    path = raw / f"ping-pair{match.group(1)}.txt"
    if not path.is_file() or not isinstance(check.get("expected"), int | float):
        return _missing(name, path)
    return f"raw/{path.name}", fidelity.rtt_check(name, path.read_text(errors="replace"), float(check["expected"]))


def _capture(raw: Path, name: str, match: re.Match, check: dict):
    path = raw / f"tcpdump-{match.group(1)}.log"
    if not path.is_file():
        return _missing(name, path)
    return f"raw/{path.name}", fidelity.capture_check(match.group(1), capture.tcpdump_stats(path.read_text()))


def _channel_loss(raw: Path, name: str, match: re.Match, check: dict):
    kind, node, ifname = match.groups()
    path = raw / f"loss-{node}-{ifname}.json"
    try:
        state = (rundir.read_json(path).get("per_state") or {}).get(kind)
    except (rundir.LoadError, AttributeError):
        state = None
    if not isinstance(state, dict):
        return _missing(name, path)
    return f"raw/{path.name}", fidelity.loss_check(name, state["seen"], state["dropped"], state["configured_loss_pct"])


#: check name -> how to judge it again from the run's raw files
_JUDGES = [
    (r"base RTT pair (\d+)", _rtt),
    (r"capture (\S+)", _capture),
    (r"loss (good|bad) ([^/\s]+)/(\S+)", _channel_loss),  # a timed channel's (netem's: tc-stats, not judged here)
]
