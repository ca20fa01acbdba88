"""The bottleneck queues over time: each shaped link's root qdisc sampled over netlink during traffic.

One thread polls every bottleneck's root qdisc (``netspec.bottlenecks``) at ``SAMPLE_HZ``: bytes and
packets dequeued, drops, overlimits, backlog in bytes and packets; where the queue has a discipline
(``topologies.queues``), that qdisc's ECN marks and its own queueing delay too. One netlink request per queue and
tick, over a socket opened once in each node's namespace (:mod:`testbed.guest.qdiscstats`), so a
tick costs a few system calls, not a process (``tc -s`` would cost ~0.1 s per call in a TCG guest).

Each tick's samples are appended to ``raw/queues-live.csv`` as they are read (what the live page shows);
the samples are the run's ``raw/queues.csv`` and what the passive rate check reads
(:func:`testbed.guest.fidelity.passive_rate_check`): while a queue holds packets, the link sends at
its rate, so its dequeue rate over backlogged intervals *is* the emulated rate, measured with the
run's own traffic whatever the loss after it.
"""

from __future__ import annotations

import contextlib
import csv
import threading
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from testbed.guest.qdiscstats import RootQdiscReader

SAMPLE_HZ = 10.0
#: each tick's samples as they are read (monotonic time, not yet the traffic's): the live page's queues
LIVE_CSV = "queues-live.csv"
#: how often the live file is flushed: the page draws twice a second, and each write to the results folder
#: is a request to the host under a guest (virtiofs), so ticks are written together
LIVE_FLUSH_S = 0.5


@dataclass(frozen=True)
class QueueSample:
    """One reading of one bottleneck's root qdisc (counters cumulative since the qdisc was made)."""

    t_s: float  # monotonic seconds
    node: str
    intf: str
    bytes: int  # dequeued (sent on the link)
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int
    backlog_pkts: int
    #: the queue discipline's own (an AQM's leaf, testbed.guest.qdiscstats.parse_marks): ECN marks so far,
    #: and its queueing delay where it has one (codel, pie); None on a drop-tail queue
    marks: int | None = None
    delay_ms: float | None = None


class QueueSampler:
    """Samples the root qdisc of each ``(node, intf)`` at ``hz`` in a thread, from :meth:`start` to :meth:`stop`."""

    def __init__(
        self,
        links: list[tuple[str, str]],
        netns_path,
        hz: float = SAMPLE_HZ,
        disciplined: frozenset[tuple[str, str]] = frozenset(),
        live_path: Path | None = None,
    ):
        self.links = links
        self.live_path = live_path  # where each tick's samples are appended as they are read (None: nowhere)
        self.disciplined = disciplined  # the links whose queue is an AQM's leaf: its marks and delay read too
        self.netns_path = netns_path  # node -> "/proc/<pid>/ns/net"
        self.period_s = 1.0 / hz
        self.samples: list[QueueSample] = []
        self.error: str | None = None
        self.cpu_s: float | None = None  # the sampling thread's own CPU time, once stopped (its cost)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="queue-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        # the sockets are opened, used and closed in this thread: pyroute2 (0.9) gives each thread its
        # own netlink socket, made where that thread is, so one opened by another thread is no use here
        try:
            self._sample_until_stopped()
        finally:
            self.cpu_s = time.thread_time()

    def _sample_until_stopped(self) -> None:
        with contextlib.ExitStack() as stack:
            try:
                self._open(stack)
                live = self._open_live(stack)
            except Exception as err:  # noqa: BLE001 - recorded; the rate checks then have no samples
                self.error = f"{type(err).__name__}: {err}"
                return
            next_tick = flushed = time.monotonic()
            while not self._stop.is_set():
                try:
                    before = len(self.samples)
                    self._sample_once()
                    if live is not None:  # a line per sample (the page keeps a line cut by a flush until its end)
                        live.writerows(_row(sample) for sample in self.samples[before:])
                        if time.monotonic() - flushed >= LIVE_FLUSH_S:
                            self._live_file.flush()
                            flushed = time.monotonic()
                except Exception as err:  # noqa: BLE001 - recorded; the samples so far are kept
                    self.error = f"{type(err).__name__}: {err}"
                    return
                next_tick += self.period_s
                self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def _open_live(self, stack: contextlib.ExitStack):
        """The live file's CSV writer, its header written (None without a live path)."""
        if self.live_path is None:
            return None
        self._live_file = stack.enter_context(open(self.live_path, "w", newline=""))
        writer = csv.writer(self._live_file)
        writer.writerow(["t_mono_s"] + [f.name for f in fields(QueueSample)][1:])
        return writer

    def _open(self, stack: contextlib.ExitStack) -> None:
        """Per node: its netlink socket, and the sampled interfaces by index."""
        self._nodes: dict[str, tuple[RootQdiscReader, dict[int, str]]] = {}
        for node, intf in self.links:
            if node not in self._nodes:
                self._nodes[node] = (stack.enter_context(RootQdiscReader(self.netns_path(node))), {})
            reader, intfs = self._nodes[node]
            intfs[reader.index(intf)] = intf

    def _sample_once(self) -> None:
        for node, (reader, intfs) in self._nodes.items():
            for index, intf in intfs.items():
                stats = reader.read(index)
                if stats is None:
                    continue
                aqm = reader.read_leaf(index)[1:] if (node, intf) in self.disciplined else (None, None)
                self.samples.append(QueueSample(time.monotonic(), node, intf, *stats, *aqm))

    def stop(self) -> list[QueueSample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.samples


#: a sample's fields in order (dataclasses.astuple copies each value deeply: ten times slower per row)
_FIELDS = [f.name for f in fields(QueueSample)]


def _row(sample: QueueSample) -> list:
    return [getattr(sample, name) for name in _FIELDS]


def write_csv(path: Path, samples: list[QueueSample], t0: float) -> None:
    """The samples as CSV, time relative to the traffic's zero ``t0`` (monotonic)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s"] + [f.name for f in fields(QueueSample)][1:])
        for sample in samples:
            row = astuple(sample)
            writer.writerow([f"{row[0] - t0:.4f}", *row[1:]])
