"""Work built from sessions and reports: kernel regression verdicts (regress) and benchmarks (bench)."""
