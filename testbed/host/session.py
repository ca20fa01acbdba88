"""A session: every run of one scenario file, on one kernel and backend, in one results folder.

``testbed run`` lands here: expand the scenario into runs, decide where they run, execute them
(in-process on a kernel that has what they need, otherwise in a virtme-ng guest), then analyse
each run and write the session report. The decision and the guest's accelerator are recorded in
``session.json`` and every run's manifest.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import PROJECT
from testbed.guest import launch, modules
from testbed.plan import estimate, resume
from testbed.plan.plan import PLAN, Plan, PlanContext, PlanRun
from testbed.results import folderlock, provenance, rundir
from testbed.results.manifest import Manifest, read_manifest, run_status, write_manifest
from testbed.scenario.algorithms import lookup as cc_lookup
from testbed.scenario.points import RunSpec, ScenarioFile


def log(message: str) -> None:
    print(f"[testbed] {message}", flush=True)


@dataclass
class SessionResult:
    directory: Path
    runs: list[Path]
    statuses: dict[str, str]
    backend: dict

    @property
    def failed(self) -> list[Path]:
        return [r for r in self.runs if self.statuses[str(r)] != "complete"]


def host_can_run(runs: list[RunSpec]) -> tuple[bool, str]:
    """Whether this machine's own kernel can execute these runs (root, netem if needed, every algorithm)."""
    if os.geteuid() != 0:
        return False, "not root"
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    modules_possible = Path("/proc/modules").exists()
    wanted = sorted({f.cc for r in runs for f in r.scenario.flows})
    release = os.uname().release
    # the project's module is built for the running kernel: its headers must be there (the lab VM has them)
    headers = Path(f"/usr/src/linux-headers-{release}/Makefile").exists()
    missing = [
        cc for cc in wanted
        if (cc_lookup(cc).project_module and not (modules_possible and headers))
        or (cc not in available and not (modules_possible and cc_lookup(cc).module))
    ]  # fmt: skip
    if missing:
        return False, f"the host kernel lacks {', '.join(missing)}"
    needs_netem = any(estimate.needs_netem(r) for r in runs)
    if needs_netem and not _kernel_has_qdisc("netem", modules_possible):
        return False, "the host kernel has no netem (delay/loss)"
    if any(estimate.netspec(r).needs_fq for r in runs) and not _kernel_has_qdisc("fq", modules_possible):
        return False, "the host kernel has no fq (per-flow delays)"
    return True, "the host kernel has everything these runs need"


def choose_backend(runs: list[RunSpec]) -> tuple[str, str]:
    """Where runs go when nobody says: this kernel when it can, else the lab VM when it is up,
    else a virtme-ng guest. Returns the backend and why."""
    from testbed.host import vagrant

    local_ok, why = host_can_run(runs)
    if local_ok:
        return "local", why
    if vagrant.vm_running():
        return "vagrant", f"{why}; the lab VM is up (vagrant)"
    return "guest", f"{why}; no lab VM is up"


def _kernel_has_qdisc(kind: str, modules_possible: bool) -> bool:
    release = os.uname().release
    if modules_possible and list(Path(f"/lib/modules/{release}").rglob(f"sch_{kind}.ko*")):
        return True
    config = Path(f"/boot/config-{release}")
    return config.exists() and f"CONFIG_NET_SCH_{kind.upper()}=y" in config.read_text()


def run_session(
    scenario: ScenarioFile,
    backend: str = "auto",
    kernel_version: str | None = None,
    results_root: Path = PROJECT / "results",
    vcpus: int | None = None,
    force: bool = False,
) -> SessionResult:
    """Run every run of a scenario; without ``force``, resume the newest unfinished session of the same runs."""
    runs = scenario.runs()
    git = provenance.git_state(PROJECT)
    from testbed.host import virtme as guest

    guest.stop_orphans(log=log)  # a guest whose controller was killed must not compete with the next
    if backend == "auto":
        backend, why = choose_backend(runs)
        log(f"backend: {backend} ({why})")
    backend_info: dict = {"kind": backend}
    kernel = config = vm = None
    # Everything that can refuse (kernel, accelerator) is settled before the results folder exists.
    if backend == "guest":
        from testbed.host import kernels

        kernel = kernels.fetch(kernel_version, log=log)
        config = guest.guest_config(kernel, vcpus, log=log)
        backend_info.update({"tool": "virtme-ng", "kernel_package": kernel.source, "kernel_release": kernel.release,
                             **config.to_dict()})  # fmt: skip
        log(f"guest: {kernel.release} under {config.accel.upper()} with {config.vcpus} vCPU(s)")
        release = kernel.release
    elif kernel_version:
        raise ValueError(
            "--kernel needs the guest backend (the local backend and the lab VM use their running kernel; "
            "the lab VM's kernel is chosen with TESTBED_KERNEL at 'vagrant provision')"
        )
    elif backend == "vagrant":
        from testbed.host import vagrant

        vm = vagrant.LabVM()
        vm.stop_orphan_runners(log=log)
        release = vm.kernel_release()
        backend_info.update({"tool": "vagrant", "kernel_release": release, "vm_project": vagrant.VM_PROJECT})
        log(f"lab VM: {release}; pushing this checkout (vagrant rsync)")
        vagrant.sync_checkout()
    else:
        release = os.uname().release
        backend_info["kernel_release"] = release
    previous = None if force else resume.find_resumable(results_root, scenario.name, runs, release)
    if previous is not None:
        done = [r for r in runs if resume.is_done(rundir.run_dir(previous, r.point_id, r.seed), r, release)]
        resume.note_older_code(previous, done, git, log)
        if len(done) == len(runs):
            log(f"{scenario.name}: all {len(runs)} runs are already complete on {release} in {previous} "
                f"(--force runs them again in a new folder)")  # fmt: skip
            return _result(previous, runs, backend_info)
        log(f"resuming {previous}: {len(done)} of {len(runs)} runs complete on {release}, running the other "
            f"{len(runs) - len(done)} (--force starts anew)")  # fmt: skip
        runs_to_do = [r for r in runs if r not in done]
    else:
        runs_to_do = runs
    project_modules: dict[str, str | None] = {}
    wanted_modules = modules.needed({f.cc for r in runs_to_do for f in r.scenario.flows})
    for module in sorted(wanted_modules):
        # the lab VM builds its own (the host has no headers for the VM's kernel)
        project_modules[module] = None if backend == "vagrant" else str(modules.build(release, log=log))
    bpf_objects = {}
    if backend != "vagrant":  # the lab VM compiles its own
        from testbed.guest import lossbpf

        for name in sorted(set().union(*(estimate.bpf_programs(r) for r in runs_to_do))):
            bpf_objects[name] = str(lossbpf.build(name, log=log))
    # clients are held at their first connect() by a preloaded shim (testbed.guest.launch); the lab VM builds its own
    hold_library = None if backend == "vagrant" else str(launch.build_hold_library(log=log))
    total = sum(estimate.estimate_s(r) for r in runs_to_do) + (estimate.GUEST_BOOT_S if backend == "guest" else 0)
    log(f"{scenario.name} ({scenario.profile or 'no'} profile): {len(runs_to_do)} runs, "
        f"estimated {total / 60:.1f} min")  # fmt: skip
    session = previous or rundir.session_dir(results_root, scenario.name, git["sha"])
    try:
        lock = folderlock.acquire(session)
    except folderlock.FolderBusy:
        if vm is not None:
            vm.close()
        raise
    with lock:
        if lock.took_over:
            log(f"took over {session}: its last writer ended without releasing it "
                f"({folderlock.describe(lock.took_over)})")  # fmt: skip
        for r in runs_to_do:
            resume.set_aside(rundir.run_dir(session, r.point_id, r.seed), session)
        context = PlanContext(git=git, backend=backend_info, project_modules=project_modules,
                              bpf_objects=bpf_objects, hold_library=hold_library)  # fmt: skip
        plan = Plan(context=context, runs=[_plan_entry(r, scenario, session) for r in runs_to_do])
        _write_session_info(session, scenario, runs, backend_info, git, resumed=previous is not None)
        plan_path = session / PLAN
        plan.write(plan_path)
        started = time.monotonic()
        timing = _execute(backend, plan, plan_path, session, total, kernel, config, vm)
        timing["runs_wall_s"] = round(time.monotonic() - started, 2)
        session_info = rundir.read_json(session / rundir.SESSION)
        session_info.update({"ended_utc": rundir.utc_iso(), "timing": timing})
        rundir.write_json_atomic(session / rundir.SESSION, session_info)
    result = _result(session, runs, backend_info)
    log(f"runs finished in {(time.monotonic() - started) / 60:.1f} min: "
        f"{sum(s == 'complete' for s in result.statuses.values())}/{len(result.runs)} complete")  # fmt: skip
    return result


def _plan_entry(r: RunSpec, scenario: ScenarioFile, session: Path) -> PlanRun:
    return PlanRun(
        scenario_name=r.scenario_name,
        point_id=r.point_id,
        params=r.params,
        seed=r.seed,
        profile=r.profile or scenario.profile,  # a suite entry's own, else the session's
        scenario=r.scenario.model_dump(mode="json"),
        run_dir=str(rundir.run_dir(session, r.point_id, r.seed).relative_to(session)),
        estimate_s=estimate.estimate_s(r),
    )


def _write_session_info(session: Path, scenario: ScenarioFile, runs: list[RunSpec], backend_info: dict, git: dict,
                        resumed: bool) -> None:  # fmt: skip
    info = {"scenario": scenario.name, "scenario_file": str(scenario.path), "profile": scenario.profile,
            "description": scenario.description, "backend": backend_info, "git": git,
            "started_utc": rundir.utc_iso(), "runs": resume.run_dirs(session, runs)}  # fmt: skip
    if resumed:
        earlier = rundir.read_json(session / rundir.SESSION)
        info["started_utc"] = earlier.get("started_utc", info["started_utc"])
        info["resumed_utc"] = [*earlier.get("resumed_utc", []), rundir.utc_iso()]
        # a part of the sweep (--only, --seed) run into the folder adds to its runs, a whole sweep after a part grows it
        kept = earlier.get("runs", [])
        info["runs"] = [*kept, *(r for r in info["runs"] if r not in kept)]
    rundir.write_json_atomic(session / rundir.SESSION, info)


def _execute(backend: str, plan: Plan, plan_path: Path, session: Path, total_s: float, kernel, config, vm) -> dict:
    """Run the plan where the backend says; a backend that fails marks the runs it did not finish."""
    timing: dict = {}
    if backend == "local":
        from testbed.guest.runner import execute_plan

        execute_plan(plan, session)
    elif backend == "vagrant":
        from testbed.host import vagrant

        try:
            timing["vagrant"] = vagrant.run_plan(vm, session, timeout_s=total_s * 3 + 300, echo=log)
        except vagrant.VagrantError as err:
            log(f"lab VM failed: {err}")
            _mark_unfinished(plan, session, str(err))
        except KeyboardInterrupt:
            _mark_unfinished(plan, session, "interrupted (Ctrl-C) while the lab VM ran it; raw files kept")
            raise
        finally:
            vm.close()
    else:
        from testbed.host import virtme as guest

        try:
            timing["guest"] = _run_in_guest(guest, kernel, config, plan_path, session, total_s)
        except guest.GuestError as err:
            log(f"guest failed: {err}")
            _mark_unfinished(plan, session, str(err))
        except KeyboardInterrupt:
            _mark_unfinished(plan, session, "interrupted (Ctrl-C) while the guest ran it; raw files kept")
            raise
    return timing


def _run_in_guest(guest, kernel, config, plan_path: Path, session: Path, total_s: float) -> dict:
    """The plan in a guest, booted a second time for the runs not finished when the first guest
    never reached the runner or stopped responding.

    Under TCG a kernel can panic at random during boot (6.12.117+deb12 once hit an int3 oops in
    sched_clock_cpu while the kernel patched its own code, and booted on the next try), and a guest
    can stop altogether (once in CI: 6.1.0-56 fell silent in the middle of a run's traffic, with not
    even the runner's watchdog printing). The first console log is kept as ``guest-console-boot1.log``;
    the run that was going on is set aside under ``.attempts/`` and runs again; runs already complete
    or failed are kept. A second failure is reported."""
    console = session / "guest-console.log"

    def boot(plan: Path, estimate_s: float) -> dict:
        from testbed.host import guardian, hostload

        run_dirs = [run["run_dir"] for run in rundir.read_json(plan)["runs"]]
        ours = guardian.marker_value(str(PROJECT))
        watch = hostload.HostWatch(run_dirs, lambda: hostload.marked_processes(ours), session=session)
        return guest.run_in_guest(kernel, config, plan, [session], console, timeout_s=estimate_s * 3 +
                                  guest.BOOT_TIMEOUT_S, echo=log, on_line=watch.on_line)  # fmt: skip

    try:
        return boot(plan_path, total_s)
    except (guest.GuestBootError, guest.GuestHungError) as err:
        first = session / "guest-console-boot1.log"
        if console.exists():
            console.replace(first)
        what = "did not boot" if isinstance(err, guest.GuestBootError) else "stopped responding"
        reason = err.args[0].split(";")[0]
    # read as it is on disk, not as a Plan: the second plan is the first one's file with fewer runs, nothing else
    plan = rundir.read_json(plan_path)
    remaining = [r for r in plan["runs"] if run_status(session / r["run_dir"]) not in ("complete", "failed")]
    for run in remaining:
        resume.set_aside(session / run["run_dir"], session)
    retry = plan_path.with_name("plan-second-boot.json")
    rundir.write_json_atomic(retry, {**plan, "runs": remaining})
    log(f"the guest {what} ({reason}); booting it once more for the {len(remaining)} runs not finished "
        f"(its first console: {first})")  # fmt: skip
    return boot(retry, sum(r["estimate_s"] for r in remaining) + estimate.GUEST_BOOT_S)


def _result(session: Path, runs: list[RunSpec], backend_info: dict) -> SessionResult:
    run_dirs = [session / d for d in resume.run_dirs(session, runs)]
    return SessionResult(session, run_dirs, {str(d): run_status(d) for d in run_dirs}, backend_info)


def _mark_unfinished(plan: Plan, session: Path, reason: str) -> None:
    """Give every run the guest did not finish a manifest that says why (raw files stay)."""
    for run in plan.runs:
        directory = session / run.run_dir
        started = (directory / rundir.MANIFEST).exists()
        manifest = read_manifest(directory) if started else Manifest(
            scenario=run.scenario_name, point_id=run.point_id, params=run.params, seed=run.seed, resolved=run.scenario,
        )  # fmt: skip
        if manifest.status in ("complete", "failed"):
            continue
        status = "incomplete" if started else "failed"
        write_manifest(directory, manifest.model_copy(update={"status": status, "reason": reason}))
