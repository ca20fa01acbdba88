"""Per-packet spraying over parallel paths in the kernel: attach, arm and read the tc-BPF program.

Linux has no per-packet multipath routing any more (multipath routes hash flows), bonding's
balance-rr works on Ethernet and needs the ``bonding`` module (absent from some hosts), and teql
needs its own qdisc module. The program ``testbed/guest/bpf/spray.bpf.c`` needs neither: it sits on the
egress of a router's first path interface and sends packet n out of path n mod N with
``bpf_redirect_neigh`` (the next hop's MAC filled in by the neighbour table). It is built and
loaded like the loss channel (:mod:`testbed.guest.lossbpf`: clang, tc, bpftool).
"""

from __future__ import annotations

import socket
import struct
import subprocess

from testbed.guest import lossbpf
from testbed.guest.lossbpf import hex_bytes
from testbed.guest.netnsutil import entered, iproute
from topologies.netspec import Sprayer

PROGRAM = "spray"


def setup(netns_path: str, sprayer: Sprayer) -> dict[str, int]:
    """Attach and arm the program on ``sprayer.intf``; returns its maps (name -> id)."""
    lossbpf.attach(netns_path, sprayer.intf, PROGRAM)
    maps = lossbpf.program_maps(netns_path, sprayer.intf, PROGRAM, f"{sprayer.node}/{sprayer.intf}")
    with iproute(netns_path) as ns:
        indexes = [ns.link_lookup(ifname=intf)[0] for intf, _ in sprayer.paths]
    lines = []
    for i, (index, (_, nexthop)) in enumerate(zip(indexes, sprayer.paths, strict=True), start=1):
        value = struct.pack("<I", index) + socket.inet_aton(nexthop)
        lines.append(
            f"map update id {maps['paths']} key hex {hex_bytes(struct.pack('<I', i))} value hex {hex_bytes(value)}"
        )
    control = struct.pack("<QQ", len(sprayer.paths) + 1, 0)
    lines.append(f"map update id {maps['spray_control']} key hex 00 00 00 00 value hex {hex_bytes(control)}")
    lossbpf.batch(lines, f"arm the sprayer on {sprayer.node}/{sprayer.intf}")
    _resolve_next_hops(netns_path, sprayer)
    return maps


def _resolve_next_hops(netns_path: str, sprayer: Sprayer) -> None:
    """One ping to each path's next hop, so that its neighbour entry exists before traffic: a packet
    redirected to a next hop not yet resolved was lost on the host kernel (6.18), the first SYN of a
    run then waiting out its 1 s timeout. The pings go out of the path's own interface, unsprayed."""
    with entered(netns_path):
        pings = [
            subprocess.Popen(
                ["ping", "-n", "-q", "-c", "1", "-W", "1", nexthop],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _, nexthop in sprayer.paths
        ]
    for ping in pings:
        ping.wait()


def sent(maps: dict[str, int], n_paths: int) -> list[int]:
    """Packets put on each path so far (path 0 = the interface the program is on)."""
    return [entry["value"] for entry in lossbpf.lookup(maps["sent"], range(n_paths))]
