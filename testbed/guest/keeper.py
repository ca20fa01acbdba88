"""One network kept from a run to the next when the next would build the very same one.

Building a network costs 1.5-5.5 s in a TCG guest (node shells, veths, qdiscs, BPF programs) and the
runs of one point differ only in their algorithms and seeds: the same nodes, links, queues and
delays. So the runner keeps the network of a run that ended cleanly, and the next run uses it when
its *reuse key* is the same: the network's full description and the hosts' sysctls. Anything else
builds a new one.

What a run leaves in a kept network, and how the next run starts clean:

* its processes (servers, clients, captures): killed and reaped at the run's end (:meth:`Network.end_run`);
* its connections' TIME_WAIT sockets: none, the hosts keep no TIME_WAIT sockets
  (``net.ipv4.tcp_max_tw_buckets=0``, testbed.guest.run.HOST_SYSCTLS): the next run binds the same
  fixed client ports;
* its other sockets, orphans of its killed processes that linger while their peer does not answer:
  destroyed (:meth:`Network.end_run`), so that none holds a fixed client port; how many is handed on
  (``carried["sockets_left"]``, the next run's manifest ``network.sockets_left_before``);
* the qdiscs' counters: they count on; each run records the counters the previous run ended with
  (``raw/tc-stats-before.json``) and the analysis subtracts them;
* the loss channels' counters: cleared after they are read (testbed.guest.lossbpf.Channel.clear);
* the delays set by the calibration: kept (the next run only checks the base RTT);
* what it does not undo, the timing a new network's build and calibration leave before the traffic: in
  virtual time a 1 MB upload took a fast course on a new network most often (17 of 22) and the lossy
  one real time shows on a kept network always (22 of 22) (docs/regression.md, "Measured");
* the per-flow options (SACK, delayed ACKs, initial window): the next run sets its own, undoing
  those of the run before that it does not share (testbed.guest.collect.apply_flow_options);
* the multipath sprayers: kept attached; their packet counters count on, and each run reads what
  they counted during its own traffic.

A run that failed, or whose fidelity checks did not all pass, never hands its network on: the next
run builds a new one. Before
a network is built, what a killed run left is swept (testbed.guest.network.cleanup_leftovers); a kept
network is this runner's own and stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from testbed.guest.network import Network, cleanup_leftovers, run_id
from topologies.netspec import NetSpec


@dataclass
class Lease:
    """A run's use of a network: whether it was kept from an earlier run, and whether to keep it after."""

    net: Network
    reused: bool
    runs_before: int  # runs that used this network before this one
    carried: dict = field(default_factory=dict)  # what runs on this network hand on (tc counters, probes)
    keep: bool = True


class NetworkKeeper:
    """Hands each run a network: the one kept from the run before when the reuse keys match, else a new one."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._net: Network | None = None
        self._key: str | None = None
        self._runs = 0
        self._carried: dict = {}

    @contextlib.contextmanager
    def network(self, spec: NetSpec, key: str | None, host_sysctls: dict[str, str]) -> Iterator[Lease]:
        """A network for one run (``key`` None: never kept). Torn down on any error, or when the run
        sets ``lease.keep`` False; else kept for the next run, its run's processes ended."""
        if self._net is not None and (key is None or key != self._key):
            self.close()
        if self._net is None:
            cleanup_leftovers()  # what a run killed before this one may have left (a kept network is ours)
            net = Network(spec, run_id(), host_sysctls=host_sysctls)
            net.__enter__()
            self._net, self._key, self._runs, self._carried = net, key, 0, {}
        lease = Lease(self._net, reused=self._runs > 0, runs_before=self._runs, carried=self._carried)
        kept = False
        try:
            yield lease
            kept = lease.keep and self.enabled and key is not None
        finally:
            if kept:
                self._carried["sockets_left"] = self._net.end_run()
                self._runs += 1
            else:
                self.close()

    def close(self) -> None:
        """Tear down the kept network, if any."""
        net, self._net, self._key, self._runs = self._net, None, None, 0
        if net is not None:
            net.stop()
