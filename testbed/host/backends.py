"""Where a session's runs execute: one :class:`Backend` protocol, three implementations.

``local`` runs the plan in this process on the running kernel, ``guest`` boots a Debian kernel under
virtme-ng (:mod:`testbed.host.virtme`), ``vagrant`` runs it in the project's lab VM over ssh
(:mod:`testbed.host.vagrant`). A session (:mod:`testbed.host.session`) asks its backend, in this
order: :meth:`~Backend.prepare` (everything that can refuse: the kernel, the accelerator, the VM),
:meth:`~Backend.record` (what ``session.json`` and every manifest record as ``backend``),
:meth:`~Backend.build` (what the runs need built on the host), :meth:`~Backend.execute` and
:meth:`~Backend.close`. The two remote backends start the runner differently (``vng --exec``, ssh)
and both follow it with :func:`testbed.host.remote.follow_plan`; each runner line goes to the host's
contention watch (:mod:`testbed.host.hostload`), then to the session's observers
(:data:`testbed.host.remote.Observer`: the report's analysis ahead, handed down as a callable because
the host does not import the report). The local backend runs the plan in this process: it has no
lines to pass on and ignores its observers, but its contention watch follows the runner's log. What a
failure means for the runs (marking those not finished) is the session's, the same for every backend:
a backend names the errors that say it could not finish the plan (:attr:`~Backend.failures`).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

from testbed import PROJECT
from testbed.guest import console, launch, lossbpf, modules, sidebyside
from testbed.guest.runner import execute_plan
from testbed.host import contended, guardian, hostload, kernels, packing, slotchoice, timebase, vagrant, virtme
from testbed.host.remote import Observer, with_observers
from testbed.host.secondboot import run_with_second_boot
from testbed.plan import estimate
from testbed.plan.connections import AUTO_SLOTS
from testbed.plan.plan import PLAN, Plan
from testbed.scenario.points import RunSpec

#: the backends by the name ``--backend`` takes and ``backend.kind`` records
NAMES = ("local", "guest", "vagrant")


class Artefacts(NamedTuple):
    """What a plan's context points the runner at (built on the host, or None where the lab VM builds its own)."""

    project_modules: dict[str, str | None]
    bpf_objects: dict[str, str]
    hold_library: str | None


class Backend(Protocol):
    #: the name ``--backend`` takes and ``backend.kind`` records
    name: str
    #: how messages name where the plan ran ("guest failed: ...")
    label: str
    #: the errors that say the backend could not finish the plan (the session marks the runs not finished)
    failures: tuple[type[Exception], ...]
    #: the runner runs in this process and marks its own runs when interrupted
    runs_here: bool
    #: set by the session before :meth:`execute`: told the runner's lines after the host's watch
    observers: tuple[Observer, ...]
    #: how many plans run at once, each beginning with a network to build (packed guests, or runs side by side
    #: on one kernel: testbed.host.packing); 1 for one plan at a time (after :meth:`prepare`)
    at_once: int

    def prepare(self) -> str:
        """Settle everything that can refuse before the results folder exists; returns the kernel release."""

    def record(self) -> dict:
        """The backend as ``session.json`` and every manifest record it (after :meth:`prepare`)."""

    def build(self, runs: list[RunSpec], release: str) -> Artefacts:
        """Build what these runs need on the host (modules, BPF objects, the connect hold library)."""

    def wall_s(
        self, estimates: list[float], boot_s: float | None = None, experiments: list[str] | None = None
    ) -> float:
        """How long runs of these estimates take here (each guest's boot added: ``boot_s`` where it was
        measured, testbed.plan.costs, else the model's; spread over a cluster's workers). ``experiments``:
        each run's, for a backend that runs some experiments' runs apart from the others'."""

    def execute(self, plan: Plan, plan_path: Path, session: Path, total_s: float) -> dict:
        """Run the plan written at ``plan_path`` into ``session``; returns its timings for ``session.json``."""

    def close(self) -> None:
        """Release what :meth:`prepare` took (called however the session ends)."""


def create(
    name: str,
    kernel_version: str | None = None,
    vcpus: int | None = None,
    log=print,
    clock: str = "auto",
    experiments: frozenset[str] = frozenset(),
    guests: int = 1,
    side_by_side: int = 1,
) -> Backend:
    """The backend of this name; only the guest boots a kernel of the caller's choice, and only a guest
    runs in virtual time (``clock``, for the runs of ``experiments``: :func:`timebase.choose`).
    ``side_by_side``: runs at once in one guest or on the local kernel, a slot each (testbed.guest.sidebyside)."""
    if name not in NAMES:
        raise ValueError(f"unknown backend {name!r}: one of {', '.join(NAMES)}")
    if side_by_side > 1 and name == LabVMBackend.name:
        raise ValueError(
            f"--side-by-side {side_by_side} runs side by side in a guest (--backend guest) or on the local kernel "
            f"(--backend local); the {name} backend runs one run at a time"
        )
    if name == GuestBackend.name:
        return GuestBackend(kernel_version, vcpus, log, clock, experiments, guests, side_by_side)
    if guests > 1:
        raise ValueError(
            f"--guests {guests} packs virtme-ng guests (--backend guest, in virtual time): the {name} backend "
            "runs one session at a time on its kernel"
        )
    if clock == "virtual":
        raise ValueError(
            f"--clock virtual needs the guest backend (QEMU's icount): the {name} backend runs "
            "in real time; give --backend guest or --clock auto"
        )
    if kernel_version:
        raise ValueError(
            "--kernel needs the guest backend (the local backend and the lab VM use their running kernel; "
            "the lab VM's kernel is chosen with TESTBED_KERNEL at 'vagrant provision')"
        )
    return LabVMBackend(log) if name == LabVMBackend.name else LocalBackend(log, side_by_side)


def build_on_host(runs: list[RunSpec], release: str, log=print) -> Artefacts:
    """The project's modules for ``release``, the BPF loss programs and the connect hold library, built here."""

    project_modules: dict[str, str | None] = {}
    for module in sorted(modules.needed(set().union(*(r.scenario.algorithms for r in runs)))):
        project_modules[module] = str(modules.build(release, log=log))
    bpf_objects = {}
    for name in sorted(set().union(*(estimate.bpf_programs(r) for r in runs))):
        bpf_objects[name] = str(lossbpf.build(name, log=log))
    # clients are held at their first connect() by a preloaded shim (testbed.guest.launch)
    return Artefacts(project_modules, bpf_objects, str(launch.build_hold_library(log=log)))


class LocalBackend:
    """The running kernel, in this process."""

    name = "local"
    label = "local kernel"
    failures: tuple[type[Exception], ...] = ()
    runs_here = True
    observers: tuple[Observer, ...] = ()  # ignored: the runner runs in this process, it has no lines to follow
    #: run once more a run the host took the CPU from (testbed.host.contended); a cluster's worker does not
    contended_again = True

    def __init__(self, log=print, side_by_side: int = 1) -> None:
        self.log = log
        self.release = ""
        #: ``--side-by-side``: runs at once on this kernel, a slot each; ``auto``: one (shown in a guest only)
        self.at_once = max(side_by_side, 1)

    def prepare(self) -> str:
        self.release = os.uname().release
        return self.release

    def record(self) -> dict:
        return {"kind": self.name, "kernel_release": self.release}

    def build(self, runs: list[RunSpec], release: str) -> Artefacts:
        return build_on_host(runs, release, self.log)

    def wall_s(
        self, estimates: list[float], boot_s: float | None = None, experiments: list[str] | None = None
    ) -> float:
        return packing.makespan_s(estimates, self.at_once)

    def execute(self, plan: Plan, plan_path: Path, session: Path, total_s: float) -> dict:
        alone, timing, twice = self._alone(session), {}, frozenset()
        if self.at_once > 1:
            record = packing.run_side_by_side(plan, session, self.at_once, self._slots(session), alone, log=self.log)
            timing, twice = {"side_by_side": record}, contended.twice(record)
        else:
            self._watched(session, [plan], lambda: execute_plan(plan, session))
        again = contended.run_again(plan, session, alone, self.log, twice) if self.contended_again else None
        return {**timing, **({"run_again": again} if again else {})}

    def _slots(self, session: Path) -> packing.ExecuteSlots:
        def execute(plan_paths: list[Path]) -> dict:
            plans = [Plan.read(path) for path in plan_paths]
            started = time.monotonic()
            self._watched(session, plans, lambda: sidebyside.execute(plan_paths, session))
            return {"wall_s": round(time.monotonic() - started, 1)}

        return execute

    def _alone(self, session: Path) -> packing.BootOne:
        def alone(plan_path: Path, console_log: Path, budget_s: float, name: str) -> dict:
            plan = Plan.read(plan_path)
            self._watched(session, [plan], lambda: execute_plan(plan, session))
            return {}

        return alone

    def _watched(self, session: Path, plans: list[Plan], body: Callable[[], object]) -> None:
        """``body`` run with the host's contention watched, as for a guest (the runs' own processes being this
        process's tree); the lines of plans side by side go to each one's watch by its slot."""
        watches = [
            hostload.HostWatch(
                [run.run_dir for run in plan.runs],
                set,
                session=session,
                cores=hostload.host_cores(),
                tree=os.getpid(),
                log=self.log,
            )
            for plan in plans
        ]
        on_line = watches[0].on_line if len(watches) == 1 else packing.by_slot([w.on_line for w in watches])
        with console.following(on_line):
            body()

    def close(self) -> None:
        pass


class GuestBackend:
    """A Debian kernel booted under virtme-ng over the host's root filesystem (booted once more when it fails)."""

    name = "guest"
    label = "guest"
    failures: tuple[type[Exception], ...] = (virtme.GuestError,)
    runs_here = False
    observers: tuple[Observer, ...] = ()
    contended_again = True  # as LocalBackend's

    def __init__(
        self,
        kernel_version: str | None = None,
        vcpus: int | None = None,
        log=print,
        clock: str = "auto",
        experiments: frozenset[str] = frozenset(),
        guests: int = 1,
        side_by_side: int = 1,
    ) -> None:
        self.kernel_version, self.vcpus, self.log = kernel_version, vcpus, log
        self.clock, self.experiments = clock, experiments
        #: ``--guests``: asked for; then how many this session packs (testbed.host.packing.guests_for)
        self.requested_guests, self.guests = guests, 1
        #: ``--side-by-side``: runs at once in the one guest, a slot each (AUTO_SLOTS until prepare() decides)
        self.side_by_side = side_by_side
        self.alone_experiments: dict[str, str] = {}  # under auto: experiments not shown equivalent so, and why
        self.kernel: kernels.Kernel | None = None
        self.config: virtme.GuestConfig | None = None

    def prepare(self) -> str:
        self.kernel = kernels.fetch(self.kernel_version, log=self.log)
        # an explicit vCPU count above one is a request for real time under auto (icount runs one vCPU), and so
        # are runs side by side (they would share one virtual clock's CPU)
        for_real = (self.vcpus or 1) > 1 or self.side_by_side > 1
        requested = "real" if self.clock == "auto" and for_real else self.clock
        clock, why = timebase.choose(requested, self.experiments, lambda: virtme.kvm_usable(self.kernel, self.log))
        self.config = virtme.guest_config(self.kernel, self.vcpus, log=self.log, clock=clock)
        shown = f", virtual time (icount shift {self.config.icount_shift})" if clock == "virtual" else ", real time"
        self.log(
            f"guest: {self.kernel.release} under {self.config.accel.upper()} with {self.config.vcpus} vCPU(s)"
            f"{shown}: {why}"
        )
        cores = len(os.sched_getaffinity(0))
        self.guests, why = packing.guests_for(self.requested_guests, self.config.clock, cores)
        if self.requested_guests > 1:
            self.log(f"guests: {why}")
        if self.side_by_side > 1 and (self.config.clock == "virtual" or self.guests > 1):
            raise ValueError(
                f"--side-by-side {self.side_by_side} runs share one guest's CPU, which in virtual time would lengthen "
                "each run's own clock: give --clock real, or pack virtual-time guests with --guests N instead"
            )
        if self.side_by_side == AUTO_SLOTS:
            slots = slotchoice.choose(AUTO_SLOTS, self.experiments, self.config.to_dict())
            self.side_by_side, self.alone_experiments = slots.count, slots.alone
            self.log(f"runs at once: {slots.count} ({slots.why})")
        return self.kernel.release

    def record(self) -> dict:
        # a kernel built here from source: its tree, commit, patches and config hash in every manifest
        built = {"kernel_build": self.kernel.build} if self.kernel.build else {}
        return {
            "kind": self.name,
            "tool": "virtme-ng",
            "kernel_package": self.kernel.source,
            "kernel_release": self.kernel.release,
            **built,
            **self.config.to_dict(),
        }

    def build(self, runs: list[RunSpec], release: str) -> Artefacts:
        if self.kernel.build:
            self._check_built_module(runs, release)
        return build_on_host(runs, release, self.log)

    def _check_built_module(self, runs: list[RunSpec], release: str) -> None:
        """A kernel built here has no headers package: our module is built with it, or the runs say why not."""
        needed = modules.needed(set().union(*(r.scenario.algorithms for r in runs)))
        why = self.kernel.build.get("westwood_tb", "built")
        if needed and why != "built":
            raise modules.ModuleBuildError(
                f"{', '.join(sorted(needed))} did not build against "
                f"{self.kernel.source} ({why}); other algorithms can run on it"
            )
        if needed and modules.built(release) is None:
            raise modules.ModuleBuildError(
                f"kernel-patch/ changed since {self.kernel.source} was built, and a kernel built here keeps no "
                f"headers to build it again: remove {self.kernel.vmlinuz.parent.parent} and run again (the "
                "kernel is rebuilt, incrementally, with the module)"
            )

    @property
    def at_once(self) -> int:
        return max(self.guests, self.side_by_side)

    def wall_s(
        self, estimates: list[float], boot_s: float | None = None, experiments: list[str] | None = None
    ) -> float:
        # packed: the longest guest's share (in virtual time a busy run's wall time is its own, not its traffic's)
        boot_s = estimate.GUEST_BOOT_S if boot_s is None else boot_s
        apart = [self.side_by_side > 1 and name in self.alone_experiments for name in experiments or []]
        apart = apart or [False] * len(estimates)
        beside = [e for e, alone in zip(estimates, apart, strict=True) if not alone]
        after = [e for e, alone in zip(estimates, apart, strict=True) if alone]
        # under auto, the runs of experiments not shown equivalent side by side run alone after the slots, in a
        # guest of their own (testbed.host.packing.run_side_by_side)
        slots_boot = len(beside) > 1 and bool(after)  # one run admitted runs alone with the others
        return packing.makespan_s(beside, self.at_once) + sum(after) + boot_s * (1 + slots_boot)

    def execute(self, plan: Plan, plan_path: Path, session: Path, total_s: float) -> dict:
        boot = functools.partial(
            run_with_second_boot,
            virtme,
            self.kernel,
            self.config,
            session=session,
            log=self.log,
            observers=packing.serialized(self.observers) if self.guests > 1 else self.observers,
        )
        one = self._boot_one(boot, self.log)
        if self.guests > 1:
            return {"guest": packing.run_packed(plan, session, self.guests, one, log=self.log)}
        if self.side_by_side > 1:
            record = packing.run_side_by_side(
                plan, session, self.side_by_side, self._slots(plan, session), one, self.alone_experiments, self.log
            )
            twice = contended.twice(record)  # run alone already after failing side by side
        else:
            record, twice = boot(plan_path=plan_path, total_s=total_s), frozenset()
        again = contended.run_again(plan, session, one, self.log, twice) if self.contended_again else None
        return {"guest": record, **({"run_again": again} if again else {})}

    def _slots(self, plan: Plan, session: Path) -> packing.ExecuteSlots:
        """One guest for the slots' plans at once; each slot's lines to its own watch and observers."""

        def execute(plan_paths: list[Path]) -> dict:
            whole = session / packing.SLOTS_DIR / PLAN  # the slots' common folder, where plan.done is written
            plan.write(whole)
            shards = [Plan.read(path) for path in plan_paths]
            ours = guardian.marker_value(str(PROJECT))
            followers = []
            for shard in shards:
                run_dirs = [run.run_dir for run in shard.runs]
                watch = hostload.HostWatch(
                    run_dirs,
                    lambda: hostload.marked_processes(ours),
                    session=session,
                    cores=hostload.host_cores(),
                    clock=self.config.clock,
                    log=self.log,
                )
                followers.append(with_observers(watch.on_line, self.observers, session, run_dirs))
            longest_s = max(sum(run.estimate_s for run in shard.runs) for shard in shards)
            return virtme.run_in_guest(
                self.kernel,
                self.config,
                whole,
                [session],
                session / "guest-console.log",
                timeout_s=longest_s * 3 + virtme.BOOT_TIMEOUT_S,
                echo=self.log,
                on_line=packing.by_slot(followers),
                session=session,
                slot_plans=plan_paths,
            )

        return execute

    @staticmethod
    def _boot_one(boot, log) -> packing.BootOne:
        def one(plan_path: Path, console: Path, budget_s: float, name: str) -> dict:
            # each guest's lines named, or two guests' "run 1/5" lines read as one session's
            def named(text: str) -> None:
                log(f"{name}: {text}")

            return boot(plan_path=plan_path, total_s=budget_s + estimate.GUEST_BOOT_S, console=console, log=named)

        return one

    def close(self) -> None:
        pass


class LabVMBackend:
    """The project's lab VM (Vagrant), over ssh; it builds what the runs need itself."""

    name = "vagrant"
    label = "lab VM"
    failures: tuple[type[Exception], ...] = (vagrant.VagrantError,)
    runs_here = False
    observers: tuple[Observer, ...] = ()  # told the lines, but the run folders come back only at the end
    at_once = 1

    def __init__(self, log=print) -> None:
        self.log = log
        self.vm: vagrant.LabVM | None = None
        self.release = ""

    def prepare(self) -> str:
        self.vm = vagrant.LabVM()
        self.vm.stop_orphan_runners(log=self.log)
        self.release = self.vm.kernel_release()
        self.log(f"lab VM: {self.release}; pushing this checkout (vagrant rsync)")
        vagrant.sync_checkout()
        return self.release

    def record(self) -> dict:
        return {"kind": self.name, "tool": "vagrant", "kernel_release": self.release, "vm_project": vagrant.VM_PROJECT}

    def build(self, runs: list[RunSpec], release: str) -> Artefacts:
        # the host has no headers for the VM's kernel: the VM builds the modules, BPF objects and the library
        wanted = modules.needed(set().union(*(r.scenario.algorithms for r in runs)))
        return Artefacts(dict.fromkeys(sorted(wanted)), {}, None)

    def wall_s(
        self, estimates: list[float], boot_s: float | None = None, experiments: list[str] | None = None
    ) -> float:
        return sum(estimates)

    def execute(self, plan: Plan, plan_path: Path, session: Path, total_s: float) -> dict:
        timing = vagrant.run_plan(
            self.vm, session, timeout_s=total_s * 3 + 300, echo=self.log, observers=self.observers
        )
        return {"vagrant": timing}

    def close(self) -> None:
        if self.vm is not None:
            self.vm.close()
            self.vm = None
