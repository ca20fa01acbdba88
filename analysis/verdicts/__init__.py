"""The statistics and the papers' claims: verdicts, their windows, ablations, sequential looks, the next seeds,
and the equivalence of a faster way of running (docs/layout.md)."""
