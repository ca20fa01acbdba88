"""Shared test helpers: leftover detection for the tiers that touch the kernel."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from testbed.capture import INSTANCES, TRACEFS
from testbed.network import INTF_PATTERN, _marked_pids


def leftovers() -> list[str]:
    """Everything a run may leave behind: marked processes, our interfaces, netns, trace instance."""
    found = [f"process {pid}" for pid in _marked_pids()]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if INTF_PATTERN.match(name):
            found.append(f"interface {name}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {n}" for n in netns]
    found += [f"trace instance {name}" for name in INSTANCES if (TRACEFS / "instances" / name).exists()]
    return found


PROJECT = Path(__file__).resolve().parent.parent


#: tcptrace -l labels compared with our pcap accounting (analysis/pcap.py)
TCPTRACE_LABELS = ["actual data pkts", "actual data bytes", "rexmt data pkts", "rexmt data bytes",
                   "unique bytes sent", "data xmit time"]  # fmt: skip


def tcptrace_connection(output: str, port: int) -> dict[str, float]:
    """The left-hand (a->b) column of ``tcptrace -l -n`` for the connection whose first host uses ``port``."""
    for block in output.split("TCP connection ")[1:]:
        if not re.search(rf"host \w+:\s+[\d.]+:{port}\n", block):
            continue
        values = {}
        for label in TCPTRACE_LABELS:
            match = re.search(rf"{label}:\s+([\d.]+)", block)
            if match:
                values[label] = float(match.group(1))
        return values
    raise AssertionError(f"tcptrace shows no connection from port {port}")
