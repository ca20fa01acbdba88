"""Work built from sessions and reports: comparing kernels (compare, regress, series, bisect), a claim
explained (explain), the sequential design run (decide), windows (lengths), virtual time's equivalence,
and the benchmarks (bench); docs/layout.md names each module."""
