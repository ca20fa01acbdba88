"""The kernel half of shaping: install the qdiscs and tc-BPF programs that ``topologies.shaping`` plans.

:func:`apply` sends a plan's qdiscs to the kernel through pyroute2 (netlink) inside a node's network
namespace; the few that pyroute2 lacks (``fq``, ``pie``, ``red``, netem's loss models) go in with the ``tc`` command.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess

from pyroute2.netlink.exceptions import NetlinkError

from testbed.guest import lossbpf
from testbed.guest.netnsutil import iproute
from topologies import queues
from topologies.lossmodel import FourStateLoss, GilbertElliottLoss
from topologies.shaping import EDT_PROGRAM, EgressPlan, QdiscSpec, fq_tc_argv, netem_tc_argv, qdisc_specs

# pyroute2 0.9 logs a warning for every codel and fq_codel parameter, that their names "will be changed";
# they are the names of the version requirements.lock pins
for _module in ("sched_codel", "sched_fq_codel"):
    logging.getLogger(f"pyroute2.netlink.rtnl.tcmsg.{_module}").setLevel(logging.ERROR)


class MissingQdiscError(RuntimeError):
    """The kernel lacks a qdisc a plan needs (e.g. netem on the host kernel)."""


def delay_map_lines(map_id: int, delays_ms: dict[str, float]) -> list[str]:
    """``bpftool batch`` lines that set the delay of each destination in the program's ``delay_ns`` map."""
    return [
        f"map update id {map_id} key hex {lossbpf.hex_bytes(socket.inet_aton(dst))} "
        f"value hex {lossbpf.hex_bytes(struct.pack('<Q', round(ms * 1e6)))}"
        for dst, ms in delays_ms.items()
    ]


def apply(netns_path: str, ifname: str, plan: EgressPlan, replace: bool = False) -> list[QdiscSpec]:
    """Install a plan on ``ifname`` inside the namespace at ``netns_path``.

    ``replace``: swap an existing root qdisc of the same layout in place (used to correct a netem
    delay without tearing the link down)."""
    if plan.delay_classes:
        _tc(netns_path, fq_tc_argv(ifname), "sch_fq")
        lossbpf.attach(netns_path, ifname, EDT_PROGRAM)
        set_delays(netns_path, ifname, {c.dst: c.delay_ms for c in plan.delay_classes})
        return []
    if replace and (plan.is_lossy or plan.rate_mbit is not None):
        raise ValueError("only a delay-only netem is replaced in place (set_delay)")
    specs = qdisc_specs(plan)
    if plan.timed_loss is not None and not replace:
        lossbpf.attach(netns_path, ifname)
    with iproute(netns_path) as ns:
        index = ns.link_lookup(ifname=ifname)[0]
        for spec in specs:
            if spec.command == "tc":  # a discipline pyroute2 has no module for (topologies.shaping.leaf_spec)
                _tc(netns_path, [arg.replace("{dev}", ifname) for arg in spec.kwargs["argv"]], f"sch_{spec.kind}")
                continue
            command = "replace" if replace and spec.command == "add" else spec.command
            try:
                ns.tc(command, spec.kind, index=index, **spec.kwargs)
            except NetlinkError as err:
                if err.code == 2 and spec.command == "add":  # ENOENT: qdisc kind not in this kernel
                    raise MissingQdiscError(_missing(spec.kind, ifname, plan)) from err
                raise
    if isinstance(plan.loss_model, (GilbertElliottLoss, FourStateLoss)):  # into the prio's band 2 (netem_tc_argv)
        _tc(netns_path, netem_tc_argv(ifname, plan), "sch_netem")
    return specs


def _missing(kind: str, ifname: str, plan: EgressPlan) -> str:
    """What to do when the kernel lacks a qdisc: netem's delay and loss, or a queue discipline."""
    kernel = os.uname().release
    if kind in ("netem", "prio"):
        return (
            f"the kernel {kernel} has no '{kind}' qdisc (needed on {ifname} for {plan}); delay and loss "
            f"need sch_netem: run in the guest (testbed run --backend guest) or load the module "
            f"(modprobe sch_{kind})"
        )
    return (
        f"the kernel {kernel} has no '{kind}' qdisc, the queue discipline asked for on {ifname} (module "
        f"{queues.MODULES.get(kind, 'sch_' + kind)}): run in the guest (testbed run --backend guest; Debian's "
        f"kernels have it) or load the module (modprobe sch_{kind})"
    )


def _tc(netns_path: str, argv: list[str], module: str) -> None:
    out = subprocess.run(["nsenter", f"--net={netns_path}", *argv], capture_output=True, text=True)
    if out.returncode != 0:
        kind = module.removeprefix("sch_")
        if any(sign in out.stderr for sign in ("No such file or directory", "Unknown qdisc", "kind is unknown")):
            raise MissingQdiscError(f"{_missing(kind, argv[4], EgressPlan())} ({' '.join(argv)}: {out.stderr.strip()})")
        raise MissingQdiscError(f"{' '.join(argv)} failed: {out.stderr.strip()} (is {module} loaded?)")


def set_delay(netns_path: str, ifname: str, delay_ms: float) -> None:
    """Change the delay of the root netem on ``ifname`` in place (per-destination delays: :func:`set_delays`)."""
    apply(netns_path, ifname, EgressPlan(delay_ms=delay_ms), replace=True)


def set_delays(netns_path: str, ifname: str, delays_ms: dict[str, float]) -> None:
    """Set the per-destination delays (destination IPv4 -> ms) of the delay program on ``ifname``:
    one ``bpftool`` process for all of them."""
    maps = lossbpf.program_maps(netns_path, ifname, EDT_PROGRAM)
    lossbpf.batch(delay_map_lines(maps["delay_ns"], delays_ms), f"set the delays on {ifname}")
