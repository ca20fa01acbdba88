"""``testbed lab autograder NAME``: the zip an instructor uploads to Gradescope as a lab's autograder.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once when it builds the
autograder's image, and ``run_autograder`` for each submission, which it puts in
``/autograder/submission``; it reads the grade from ``/autograder/results/results.json``. The zip
holds the two scripts and the part of this checkout that grading reads: the Python packages, the
experiments (``scenarios/``: the reproduce lab's claims name them), the pinned packages and the lab as
installed (its tasks, bands and rubric; never a student's copy). ``run_autograder`` grades the
uploaded lab folder with ``testbed lab check --no-hidden``: hidden variants run experiments, which a
Gradescope machine (no qemu, no root) cannot.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from testbed import PROJECT
from testbed.labs import definition, students

#: the checkout's parts grading reads (testbed lab check): code, experiments, the package pins
CODE = ("testbed", "analysis", "topologies", "scenarios")
TOP_FILES = ("pyproject.toml", "requirements.lock")
#: the folder of the zip that holds them (/autograder/source/<this> on Gradescope)
SOURCE = "cc-testbed"
#: the course's secret, in the zip when CC_TESTBED_COURSE_SECRET was set as it was built (beside SOURCE's files)
SECRET_FILE = "course-secret"

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (its Ubuntu base): a Python of at least
# 3.11 with the project's pinned packages. Grading runs no experiment: no qemu, iperf3 or kernel here.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
python3 - <<'END'
import sys
if sys.version_info < (3, 11):
    sys.exit("cc-testbed needs Python 3.11 or later: use Gradescope's Ubuntu 24.04 base image")
END
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q -r /autograder/source/{source}/requirements.lock
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission: `testbed lab check {lab} --no-hidden` on the uploaded lab folder
# (the folder holding {answers}), its results.json copied to where Gradescope reads it. AUTOGRADER_ROOT and
# AUTOGRADER_PYTHON replace /autograder and its venv (the project's tests run this script in a folder).
set -uo pipefail
root=${{AUTOGRADER_ROOT:-/autograder}}
python=${{AUTOGRADER_PYTHON:-$root/venv/bin/python}}
out=$root/results/results.json
mkdir -p "$root/results"
fail() {{  # a grade of 0 that says why, as Gradescope shows it
  "$python" -c 'import json, sys; print(json.dumps({{"score": 0, "output": sys.argv[1]}}))' "$1" >"$out"
  exit 0
}}
work=$(find "$root/submission" -name '{answers}' -not -path '*/grade/*' -printf '%d %h\\n' | sort -n | head -1 \\
       | cut -d' ' -f2-)
[ -n "$work" ] || fail "no {answers} in the submission: upload your lab folder ({answers}, {scenario} and results/)"
rm -rf "$work/grade"  # a grade uploaded with the folder is not this grade
cd "$root/source/{source}"
# with the course's secret in the zip, the submitter's own seeds are required (Gradescope's metadata names them)
student=()
if [ -s "{secret}" ] && [ -f "$root/submission_metadata.json" ]; then
  id=$("$python" -c 'import json, sys; u = json.load(open(sys.argv[1]))["users"][0]
print(u.get("sid") or u["email"])' "$root/submission_metadata.json") || fail "submission_metadata.json names no student"
  student=(--student "$id")
  export {secret_env}="$(cat "{secret}")"
fi
PYTHONPATH=$PWD "$python" -m testbed.cli lab check {lab} --work "$work" --no-hidden "${{student[@]}}" \
  >"$root/results/check.log" 2>&1
[ -f "$work/grade/results.json" ] \
  || fail "testbed lab check could not grade the folder: $(tail -3 "$root/results/check.log")"
cp "$work/grade/results.json" "$out"
cat "$root/results/check.log"
"""


README = """cc-testbed's autograder for the lab {lab} (testbed lab autograder; docs/labs.md).
{check}
"""
WITH_CHECK = (
    "Built with the course's secret: each submission must run the submitter's own seeds (and value of\n"
    "the lab's variant), named by Gradescope's submission_metadata.json."
)
WITHOUT_CHECK = (
    "Built without the student check (--no-student-check): the course's secret is not in it, so a\n"
    "submission is not held to its submitter's own seeds; another student's folder grades as well\n"
    "as their own. Build it again with " + students.SECRET_ENV + " set to check them."
)


def build(name: str, out: Path, student_check: bool = True) -> Path:
    """Write the lab ``name``'s Gradescope autograder zip to ``out`` (a .zip path or a folder). Without the
    course's secret it is refused unless ``student_check`` is False (its README then says so)."""
    master = definition.lab_dir(name)
    lab = definition.load_lab(master)
    secret = students.course_secret()
    if secret is None and student_check:
        raise definition.LabError(
            f"{students.SECRET_ENV} is not set: without the course's secret the autograder "
            "cannot hold a submission to its submitter's own seeds, and another student's "
            "folder grades as well as their own. Set it, or build with "
            "--no-student-check"
        )
    path = out / f"{master.name}-autograder.zip" if out.is_dir() else out
    scenario = lab.scenario or "claim.yaml"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.txt", README.format(lab=master.name, check=WITH_CHECK if secret else WITHOUT_CHECK))
        _script(zf, "setup.sh", SETUP.format(source=SOURCE))
        _script(
            zf,
            "run_autograder",
            RUN.format(
                lab=master.name,
                answers=lab.answers,
                scenario=scenario,
                source=SOURCE,
                secret=SECRET_FILE,
                secret_env=students.SECRET_ENV,
            ),
        )
        if secret:  # on Gradescope only, never in a student's folder
            zf.writestr(f"{SOURCE}/{SECRET_FILE}", secret)
        for file in TOP_FILES:
            zf.write(PROJECT / file, f"{SOURCE}/{file}")
        for folder in CODE:
            _tree(zf, PROJECT / folder, f"{SOURCE}/{folder}")
        _tree(zf, master, f"{SOURCE}/labs/{master.name}", skip=definition.INSTRUCTOR_ONLY)
    return path


def _script(zf: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o755 << 16  # executable once unpacked
    zf.writestr(info, text)


def _tree(zf: zipfile.ZipFile, folder: Path, inside: str, skip: tuple[str, ...] = ()) -> None:
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_file() and "__pycache__" not in parts and parts[0] not in skip:
            zf.write(path, f"{inside}/{path.relative_to(folder).as_posix()}")
