"""``testbed lab``: the course labs (list, start, check, pack, and the instructor's commands)."""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.cli import options


def _cmd_lab(args: argparse.Namespace) -> int:
    from testbed.labs import lab

    runner = None if args.action != "check" or (args.no_hidden and not args.rerun) else _hidden_runner(args)
    return lab.command(
        args.action,
        args.name,
        args.dir,
        args.more,
        args.work,
        args.how,
        None if args.no_hidden else runner,
        args.student,
        student_check=not args.no_student_check,
        rerun_runner=runner if args.rerun else None,
    )


def _hidden_runner(args: argparse.Namespace):
    """How ``lab check`` runs the instructor's hidden variants: a session each, as ``testbed run`` would."""
    from testbed.host.session import run_session
    from testbed.workflows.sessions import update_catalog

    kernel = options.kernel(args)  # a dirty tree's diff read once, for every variant

    def run(scenario, results: Path) -> list:
        result = run_session(
            scenario, backend=args.backend, kernel_version=kernel, results_root=results, clock=args.clock
        )
        update_catalog(results)
        return result.failed

    return run


def add_lab(sub) -> None:
    lab = sub.add_parser(
        "lab",
        help="course labs: list them, start one in a folder of its own, grade a student's work",
        description="list: the labs of labs/. start NAME [DIR]: copy a lab (handout, starter scenario, notebook) "
        "into DIR (default ./NAME). check NAME [RESULTS]: grade the lab folder (the current one, or --work) on "
        "RESULTS (default: its results/): per task pass or fail, JUnit XML and Gradescope's results.json in "
        "grade/; the lab's hidden variants run first when it has any. Exit 0: every task passes; 1: one fails. "
        "pack NAME [DIR]: zip the lab folder (the current one, or --work) for handing in, each run with its raw/ "
        "files (grading recomputes the runs from them), into DIR (default: the current folder). "
        "notebook NAME: JupyterLab on the lab's analysis.ipynb (the current folder's, if it has one). "
        "bands NAME RESULTS --how TEXT (instructors): the bands of the lab's expected.yaml from reference runs of "
        "its solution/. autograder NAME [DIR] (instructors): the zip Gradescope takes as the lab's autograder, "
        "written to DIR (default: the current folder). duplicates FOLDER FOLDER... (instructors): runs that two "
        "submissions share, by their captures' fingerprints (exit 1 when any).",
    )
    lab.add_argument(
        "action", choices=["list", "start", "check", "pack", "notebook", "bands", "autograder", "duplicates"]
    )
    lab.add_argument("name", nargs="?", help="a lab of labs/ (testbed lab list) or a folder holding a lab.yaml")
    lab.add_argument(
        "dir",
        nargs="?",
        type=Path,
        help="start: the new folder; check: the results folder; pack, autograder: where the zip goes",
    )
    lab.add_argument("more", nargs="*", help="duplicates: more submission folders")
    lab.add_argument(
        "--work",
        type=Path,
        help="check, pack: the student's lab folder (default: the current one "
        "if it holds a lab.yaml, else the lab's own)",
    )
    lab.add_argument("--no-hidden", action="store_true", help="check: do not run the instructor's hidden variants")
    lab.add_argument(
        "--rerun",
        action="store_true",
        help="check: run one graded run per point again on this machine and hold the submitted ones "
        "to it (beyond 20 %%: to grade by hand; docs/labs.md)",
    )
    options.backend_options(
        lab,
        "check: where the hidden variants run (as for testbed run)",
        "check: the guest kernel of the hidden variants (as for testbed run)",
    )
    options.clock_option(lab)  # check: the hidden variants' clock
    lab.add_argument("--how", help="bands: how the reference runs (the results folder given) were made")
    lab.add_argument(
        "--no-student-check",
        action="store_true",
        help="autograder: build it without the course's secret (a student's own seeds unchecked)",
    )
    lab.add_argument(
        "--student",
        metavar="ID",
        help="start: give the student their own seeds (and the lab's variant, e.g. the wireless "
        "lab's radio rate), drawn from the course's secret (CC_TESTBED_COURSE_SECRET) and "
        "ID; check: grade the folder as ID's, their own required (docs/labs.md)",
    )
    lab.set_defaults(func=_cmd_lab)
