"""JUnit XML, the one format every CI system reads: regress, series and the labs' grading write it here.

A report is test suites of test cases; a case passed (its detail as ``system-out``), failed, was skipped
(it could not be judged, with why) or is an error (the run itself failed). The suite's counts follow
from its cases. The standard library writes the XML: the format is four elements and needs nothing more.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Outcome = Literal["passed", "failure", "skipped", "error"]


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    outcome: Outcome
    message: str = ""  # one line: why it failed, was skipped or is an error
    detail: str = ""  # the evidence: the numbers behind the outcome


def write(path: Path, name: str, suites: dict[str, list[Case]]) -> None:
    """``path`` with one ``testsuite`` per entry of ``suites`` (name -> its cases), in their order."""
    root = ET.Element("testsuites", name=name)
    for suite_name, cases in suites.items():
        count = {outcome: sum(c.outcome == outcome for c in cases) for outcome in ("failure", "skipped", "error")}
        suite = ET.SubElement(
            root,
            "testsuite",
            name=suite_name,
            tests=str(len(cases)),
            failures=str(count["failure"]),
            skipped=str(count["skipped"]),
            errors=str(count["error"]),
        )
        for c in cases:
            case = ET.SubElement(suite, "testcase", classname=c.classname, name=c.name)
            if c.outcome == "passed":
                ET.SubElement(case, "system-out").text = c.detail
            elif c.outcome == "skipped":
                ET.SubElement(case, "skipped", message=c.message)
            else:
                ET.SubElement(case, c.outcome, message=c.message).text = c.detail
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
