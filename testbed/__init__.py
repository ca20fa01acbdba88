"""cc-testbed: real-kernel experiments with TCP congestion control, in pipeline order.

Rooms (each a subpackage; imports run one way, enforced by import-linter in ``make lint``)::

    scenario/   the experiment files: schema, YAML line index, sweeps, suites, algorithm registry (pure)
    results/    one run folder: layout, provenance, the folder lock
    guest/      what runs where the experiment runs: network, shaping, traffic, capture, fidelity, runner
    host/       what runs on the controlling machine: kernels, builds, guests, the lab VM, sessions
    report/     HTML and Markdown reports over the analysis (the top-level ``analysis`` package)
    workflows/  regress and bench, built from sessions and reports
    cli.py      the ``testbed`` command
"""

from pathlib import Path

#: the checkout: scenarios/, kernel-patch/, the Vagrantfile and results/ sit here
PROJECT = Path(__file__).resolve().parent.parent
