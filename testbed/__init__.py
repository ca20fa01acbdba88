"""cc-testbed: real-kernel experiments with TCP congestion control, in pipeline order.

Rooms (each a subpackage; imports run one way, enforced by import-linter in ``make lint``)::

    scenario/   the experiment files: schema, YAML line index, sweeps, suites, algorithm registry (pure)
    plan/       a session's plan: its runs, connections, time estimate, progress and resume
    results/    one run folder: layout, provenance, the folder lock
    guest/      what runs where the experiment runs: network, shaping, traffic, capture, fidelity, runner
    host/       what runs on the controlling machine: kernels, builds, guests, the lab VM, sessions
    report/     reports over the analysis (the top-level ``analysis`` package): live/, pages/, cache/
    labs/       the course labs: a lab, a student's runs, grading and its evidence, the autograder
    workflows/  what is built from sessions: compare, regress, series, bisect, explain, decide, bench
    cli/        the ``testbed`` command: its parser, one module per group of commands

docs/layout.md names every module of every room.
"""

from pathlib import Path

#: the checkout: scenarios/, kernel-patch/, the Vagrantfile and results/ sit here
PROJECT = Path(__file__).resolve().parent.parent
