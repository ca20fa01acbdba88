"""The one registry of congestion-control algorithms: kernel name, label, colour, marker.

Every plot and table takes its names and colours from here, so all figures agree.
The scenario schema accepts exactly these kernel names (a misspelling is an error, not a
silently different run); whether the *running kernel* has one is checked at run time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CongestionControl:
    kernel_name: str  # the name in net.ipv4.tcp_available_congestion_control
    label: str
    colour: str
    marker: str
    module: str | None  # the kernel module that provides it, None when built in everywhere we run
    #: built from this project's kernel-patch/ (against the target kernel's headers) rather than shipped
    project_module: bool = False


REGISTRY: dict[str, CongestionControl] = {
    cc.kernel_name: cc
    for cc in [
        CongestionControl("westwood", "Westwood+", "#d62728", "o", "tcp_westwood"),
        CongestionControl("reno", "NewReno (Linux reno)", "#1f77b4", "s", None),
        CongestionControl("cubic", "CUBIC", "#2ca02c", "^", None),
        CongestionControl("vegas", "Vegas", "#9467bd", "D", "tcp_vegas"),
        CongestionControl("bbr", "BBR", "#ff7f0e", "v", "tcp_bbr"),
        CongestionControl(
            "westwood_ml", "Westwood+ (mainline, instrumented)", "#ff9896", "h", "tcp_westwood_tb", project_module=True
        ),
        CongestionControl(
            "westwood_paper", "Westwood+ (papers' algorithm)", "#8b0000", "p", "tcp_westwood_tb", project_module=True
        ),
        CongestionControl("htcp", "H-TCP", "#8c564b", "P", "tcp_htcp"),
        CongestionControl("hybla", "Hybla", "#e377c2", "X", "tcp_hybla"),
    ]
}


def lookup(kernel_name: str) -> CongestionControl:
    """The registry entry, or a neutral one for an algorithm we have no style for."""
    return REGISTRY.get(kernel_name) or CongestionControl(kernel_name, kernel_name, "#7f7f7f", ".", None)
