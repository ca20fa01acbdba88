"""The dialogue both shell tests hold with ``testbed shell`` through a real pseudo-terminal (pexpect):
the netns tier's on the host kernel, the guest tier's in a virtme-ng guest."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pexpect
import yaml

from tests.conftest import PROJECT

PROMPT = "mininet> "
#: a dumbbell of one pair (nodes l0, rl, rr, r0) and one CUBIC flow of 30 s: long enough to look at
SCENARIO = {
    "description": "one CUBIC flow over a 10 Mbit/s dumbbell, for the shell",
    "topology": {"name": "dumbbell", "bottleneck": {"rate_mbit": 10, "queue_pkts": 50}},
    "flows": [{"cc": "cubic", "rtt_ms": 20}],
    "duration_s": 30,
}


@contextlib.contextmanager
def spawned(tmp_path: Path, backend: str, rtt_ms: float, boot_timeout_s: float) -> Iterator[pexpect.spawn]:
    """``testbed shell`` on a scenario written into ``tmp_path``, waited for up to its prompt; killed
    (its guardian then stops a guest) if the test fails before it ends. Its output: ``shell.log``."""
    scenario = tmp_path / "shell.yaml"
    scenario.write_text(yaml.safe_dump({**SCENARIO, "flows": [{"cc": "cubic", "rtt_ms": rtt_ms}]}))
    with open(tmp_path / "shell.log", "w") as log:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "testbed.cli", "shell", str(scenario), "--backend", backend],
            cwd=str(PROJECT),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        child.logfile_read = log
        try:
            child.expect_exact(PROMPT, timeout=boot_timeout_s)
            yield child
        finally:
            child.close(force=True)


def command(child: pexpect.spawn, line: str, timeout_s: float = 30) -> str:
    """Send one command; what it printed before the next prompt."""
    child.sendline(line)
    child.expect_exact(PROMPT, timeout=timeout_s)
    return child.before


def first_flow_record(url: str, timeout_s: float) -> dict:
    """The first flow record on a live page's stream (its ``events``, with the token)."""
    base, token = url.split("?")
    deadline = time.monotonic() + timeout_s
    with urllib.request.urlopen(f"{base}events?{token}", timeout=timeout_s) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data: ") and (record := json.loads(line[6:])).get("kind") == "flow":
                return record
            assert time.monotonic() < deadline, "no flow record on the live page"
    raise AssertionError("the live page's stream ended without a flow record")


def reachability_flow_and_exit(child: pexpect.spawn, leave: str = "exit", live: bool = True) -> None:
    """l0 reaches r0 across the bottleneck; ``live`` prints the live page's URL (or, ``live`` False: the
    lab VM, why there is none); the scenario's flow starts, is seen in the bottleneck's counters, in its
    sender's cwnd and on the page; leaving (``exit``, or Ctrl-D when ``leave`` says ``eof``) tears down
    and the program ends."""
    said = command(child, "live")
    found = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", said)
    assert bool(found) == live and (live or "no live page here" in said), said
    ping = command(child, "l0 ping -c 2 -W 2 r0")
    assert "0% dropped" in command(child, "pingall", timeout_s=60)
    assert re.search(r"2 packets transmitted, 2 received", ping), ping
    assert "idle" in command(child, "flows")
    assert "no connection 'c9'" in command(child, "cwnd c9"), "a wrong id is named, and the shell goes on"
    started = command(child, "start")
    assert "c0: cubic l0 -> r0" in started, started
    time.sleep(3)
    assert "running" in command(child, "flows")
    stats = command(child, "tc")
    sent = [int(n) for n in re.findall(r"Sent (\d+) bytes", stats)]
    assert "rl rl-eth0 (bottleneck)" in stats and max(sent) > 1_000_000, stats
    watched = command(child, "cwnd c0 1.2", timeout_s=30)
    assert re.search(r"cwnd \d+", watched), watched
    if live:  # the guest's trace of the flow, read by the host's page through the shared folder
        record = first_flow_record(found.group(1), 30)
        assert record["conn"] == "c0" and record["cwnd"] > 0, record
    assert re.search(r"stopped 1 running", command(child, "stop")), "the flow was not running"
    if leave == "eof":
        child.sendeof()
    else:
        child.sendline(leave)
    child.expect_exact("the network is torn down", timeout=60)
    child.expect(pexpect.EOF, timeout=120)
    child.close()
