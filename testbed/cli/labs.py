"""``testbed lab``: the course labs (list, start, check, pack, and the instructor's commands)."""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.cli import options


def _cmd_lab(args: argparse.Namespace) -> int:
    from testbed.labs import lab

    # each action's parser has only its own options: the others are their defaults here
    given = {**LAB_DEFAULTS, **vars(args)}
    action = given["action"]
    wanted = action == "check" and not (given["no_hidden"] and not given["rerun"])
    runner = _hidden_runner(args) if wanted else None
    return lab.run_action(
        action,
        given["name"],
        given["dir"],
        given["more"],
        given["work"],
        given["how"],
        None if given["no_hidden"] else runner,
        given["student"],
        student_check=not given["no_student_check"],
        rerun_runner=runner if given["rerun"] else None,
    )


#: the options of ``testbed lab`` an action's parser may lack
LAB_DEFAULTS = {
    "name": None,
    "dir": None,
    "more": [],
    "work": None,
    "how": None,
    "no_hidden": False,
    "rerun": False,
    "student": None,
    "no_student_check": False,
}


def _hidden_runner(args: argparse.Namespace):
    """How ``lab check`` runs the instructor's hidden variants: a session each, as ``testbed run`` would."""
    from testbed.host.session import run_session
    from testbed.workflows.sessions import update_catalog

    kernel = options.kernel(args)  # a dirty tree's diff read once, for every variant

    def run(scenario, results: Path, clock: str | None = None) -> list:
        """``clock``: a rerun's, the submitted run's own (testbed/labs/reruns.py); the variants' is --clock."""
        result = run_session(
            scenario, backend=args.backend, kernel_version=kernel, results_root=results, clock=clock or args.clock
        )
        update_catalog(results)
        return result.failed

    return run


def add_lab(sub) -> None:
    lab = sub.add_parser(
        "lab",
        help="course labs: list them, start one in a folder of its own, grade a student's work",
        description="The course labs (docs/labs.md). 'testbed lab ACTION -h' gives an action's options.",
    )
    actions = lab.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="the labs of labs/", description="The labs of labs/.")
    start = actions.add_parser(
        "start",
        help="copy a lab (handout, starter scenario, notebook) into a folder of its own",
        description="Copy a lab (handout, starter scenario, notebook) into DIR (default ./NAME).",
    )
    _lab_name(start)
    start.add_argument("dir", nargs="?", type=Path, metavar="DIR", help="the new folder (default ./NAME)")
    _student(
        start,
        "give the student their own seeds (and the lab's variant, e.g. the wireless lab's radio rate), "
        "drawn from the course's secret (CC_TESTBED_COURSE_SECRET) and ID",
    )
    _add_check(actions)
    pack = actions.add_parser(
        "pack",
        help="zip a lab folder for handing in",
        description="Zip the lab folder (the current one, or --work) for handing in, each run with its raw/ files "
        "(grading recomputes the runs from them), into DIR (default: the current folder).",
    )
    _lab_name(pack)
    pack.add_argument(
        "dir", nargs="?", type=Path, metavar="DIR", help="where the zip goes (default: the current folder)"
    )
    _work(pack)
    notebook = actions.add_parser(
        "notebook",
        help="JupyterLab on the lab's analysis.ipynb",
        description="JupyterLab on the lab's analysis.ipynb (the current folder's, if it has one).",
    )
    _lab_name(notebook)
    _add_instructor_actions(actions)
    lab.set_defaults(func=_cmd_lab)


def _add_check(actions) -> None:
    check = actions.add_parser(
        "check",
        help="grade a student's lab folder",
        description="Grade the lab folder (the current one, or --work) on RESULTS (default: its results/): per "
        "task pass or fail, JUnit XML and Gradescope's results.json in grade/; the lab's hidden variants run "
        "first when it has any. Exit 0: every task passes; 1: one fails.",
    )
    _lab_name(check)
    check.add_argument(
        "dir", nargs="?", type=Path, metavar="RESULTS", help="the results folder (default: the lab folder's results/)"
    )
    _work(check)
    check.add_argument("--no-hidden", action="store_true", help="do not run the instructor's hidden variants")
    check.add_argument(
        "--rerun",
        action="store_true",
        help="run one graded run per point again on this machine, on the clock it ran on, and hold the "
        "submitted ones to it (beyond 40 %% in real time, 20 %% in virtual time: to grade by hand; docs/labs.md)",
    )
    options.backend_options(
        check,
        "where the hidden variants and reruns run (as for testbed run)",
        "the guest kernel of the hidden variants and reruns (as for testbed run)",
    )
    options.clock_option(check)  # the hidden variants' clock (a rerun takes its run's own)
    _student(check, "grade the folder as ID's, their own required (docs/labs.md)")


def _add_instructor_actions(actions) -> None:
    bands = actions.add_parser(
        "bands",
        help="(instructors) the bands of a lab's expected.yaml from reference runs",
        description="The bands of the lab's expected.yaml from reference runs of its solution/.",
    )
    _lab_name(bands)
    bands.add_argument("dir", type=Path, metavar="RESULTS", help="the reference runs' results folder")
    bands.add_argument("--how", required=True, help="how the reference runs were made")
    autograder = actions.add_parser(
        "autograder",
        help="(instructors) the zip Gradescope takes as a lab's autograder",
        description="The zip Gradescope takes as the lab's autograder, written to DIR (default: the current folder).",
    )
    _lab_name(autograder)
    autograder.add_argument(
        "dir", nargs="?", type=Path, metavar="DIR", help="where the zip goes (default: the current folder)"
    )
    autograder.add_argument(
        "--no-student-check",
        action="store_true",
        help="build it without the course's secret (a student's own seeds unchecked)",
    )
    duplicates = actions.add_parser(
        "duplicates",
        help="(instructors) runs that two submissions share",
        description="Runs that two submissions share, by their captures' fingerprints (exit 1 when any).",
    )
    duplicates.add_argument("more", nargs="+", metavar="FOLDER", help="two submission folders or more")


def _lab_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="a lab of labs/ (testbed lab list) or a folder holding a lab.yaml")


def _work(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work",
        type=Path,
        help="the student's lab folder (default: the current one if it holds a lab.yaml, else the lab's own)",
    )


def _student(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--student", metavar="ID", help=what)
