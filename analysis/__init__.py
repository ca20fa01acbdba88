"""From run folders to numbers, verdicts and figures: pure Python, no root, no kernel.

Subpackages in the order the data passes through them (each imports only those before it; .importlinter
says so): ``raw`` (a run's raw files read), ``runs`` (one run analysed: flows, series, latency, the catalog
of runs), ``verdicts`` (the statistics, the papers' claims and their verdicts), ``kernels`` (kernel
comparisons: regress, series, bisection), ``figures`` (everything drawn). docs/layout.md names each module.
"""
