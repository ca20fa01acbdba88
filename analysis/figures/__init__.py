"""Everything drawn, rendered to PNG bytes: a run's and a session's figures, the papers' sweeps, kernel
comparisons (docs/layout.md)."""
