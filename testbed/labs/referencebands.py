"""A lab's bands made from reference runs (``testbed lab bands``): what ``lab check`` grades against.

For each band of ``expected.yaml`` (its task, point, algorithm and metric), the reference runs'
values give the band: from the lowest less a margin to the highest plus it, the margin
:data:`MARGIN` of their mean. The margin is wide on purpose: a student's runs are other runs (other
machines, other load), and the band is to catch a broken experiment (a knob set wrong, a run that
did not do what it should), not the noise between seeds. The file records how the runs were made.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from testbed.labs import definition, studentruns

#: the band's margin on each side, as a share of the reference runs' mean
MARGIN = 0.25
#: wider margins for metrics that count rare events: the retransmissions of one seed of the wireless
#: lab (its loss timeline fixed by the seed) were 59 and 36 (New Reno), 56 and 26 (Westwood+) in two
#: sessions at the same commit, 5.1 % and 3.2 % of the packets: a factor of 2 that 25 % would fail
MARGINS = {"retrans_ratio": 0.6}
#: metrics bounded by nature (Jain's index is at most 1, none of them below 0)
CEILING = {"jain": 1.0}


def make_bands(master: Path, results: Path, how: str, commit: str) -> definition.Expected:
    """The lab's expected.yaml with every band's values from the reference runs under ``results``."""
    lab = definition.load_lab(master)
    expected = definition.load_expected(master, lab)
    found = studentruns.load_results(master / "solution", lab, results, every_variant=True)
    if found.runs.empty:
        raise definition.LabError(f"no runs of the lab's scenario under {results}: run the lab's solution/ first")
    bands = [_band(band, found) for band in _templates(expected.bands, lab.variant)]
    complete = found.runs[found.runs["status"] == "complete"]
    kernels = ", ".join(sorted(set(complete["kernel_release"].dropna())))
    fingerprints = sorted(set().union(*(studentruns.run_fingerprints(Path(path)) for path in complete["path"])))
    seeds = sorted({int(seed) for seed in complete["seed"]})
    reference = definition.Reference(
        how=how, kernel=kernels, commit=commit, runs=len(complete), seeds=seeds, fingerprints=fingerprints
    )
    return definition.Expected(reference=reference, bands=bands)


def _templates(bands: list[definition.Band], variant: definition.Variant | None) -> list[definition.Band]:
    """The bands to make: each of expected.yaml's once, and in a lab with a variant once per value of
    its knob (a student's runs at 4 Mbit/s are held to the reference runs at 4 Mbit/s)."""
    blank = {"variant": None, "min": None, "max": None, "reference": None}
    unique = list({b.model_copy(update=blank): None for b in bands})
    if variant is None:
        return unique
    return [band.model_copy(update={"variant": value}) for band in unique for value in variant.values]


def _band(band: definition.Band, found: studentruns.Results) -> definition.Band:
    runs = found.runs[(found.runs["point_id"] == band.point) & (found.runs["status"] == "complete")]
    if band.variant is not None:
        runs = runs[runs["variant"] == band.variant]
    values = [v for v in (studentruns.run_metric(band, r, found) for r in runs["run_id"]) if not math.isnan(v)]
    if not values:
        at = f" with {band.variant:g} (the lab's variant)" if band.variant is not None else ""
        raise definition.LabError(f"no reference value of {band.metric} at {band.point}{at}: its runs are missing")
    mean = sum(values) / len(values)
    margin = MARGINS.get(band.metric, MARGIN) * abs(mean)
    low, high = max(0.0, min(values) - margin), min(CEILING.get(band.metric, math.inf), max(values) + margin)
    return band.model_copy(update={"min": round(low, 4), "max": round(high, 4), "reference": round(mean, 4)})


def write_expected(path: Path, expected: definition.Expected) -> None:
    """expected.yaml, with a header that says what it is."""
    header = (
        "# The bands `testbed lab check` grades against, made by `testbed lab bands` from the reference\n"
        "# runs below (testbed/labs/referencebands.py: from the lowest value less 25 % of the mean to the\n"
        "# highest plus it; 60 % for the retransmission ratio).\n"
    )
    body = yaml.safe_dump(expected.model_dump(mode="json"), sort_keys=False, width=110)
    path.write_text(header + body)
