"""The one registry of congestion-control algorithms: kernel name, label, colour, marker.

Every plot and table takes its names and colours from here, so all figures agree. :func:`algorithm_of` says
which algorithm a name runs (an instrumented module is the algorithm it instruments), so claims about an
algorithm match its instrumented runs too.
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
    #: which algorithm this is, when another entry's: westwood_ml is mainline Westwood+ (``westwood``) with
    #: tracing, so a claim about ``westwood`` is about its flows too; westwood_paper is a different algorithm
    algorithm: str | None = None


REGISTRY: dict[str, CongestionControl] = {
    cc.kernel_name: cc
    for cc in [
        CongestionControl("westwood", "Westwood+", "#d62728", "o", "tcp_westwood"),
        CongestionControl("reno", "NewReno (Linux reno)", "#1f77b4", "s", None),
        CongestionControl("cubic", "CUBIC", "#2ca02c", "^", None),
        CongestionControl("vegas", "Vegas", "#9467bd", "D", "tcp_vegas"),
        CongestionControl("bbr", "BBR", "#ff7f0e", "v", "tcp_bbr"),
        CongestionControl(
            "westwood_ml",
            "Westwood+ (mainline, instrumented)",
            "#ff9896",
            "h",
            "tcp_westwood_tb",
            project_module=True,
            algorithm="westwood",
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


def algorithm_of(kernel_name: str) -> str:
    """Which algorithm a kernel name runs: ``westwood`` for westwood_ml (registry field ``algorithm``), else
    the name itself (westwood_paper, the papers' variant, is its own algorithm)."""
    entry = REGISTRY.get(kernel_name)
    return (entry.algorithm if entry is not None else None) or kernel_name


def is_cc_param(key: str) -> bool:
    """Whether a point parameter names an algorithm (``cc``, ``flows.1.cc``, a suite's ``run_as.cc``)."""
    return key == "cc" or key.endswith(".cc")
