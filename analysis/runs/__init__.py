"""One run analysed: its flows, series, latency and drop checks, the papers' metrics, and the catalog of every
run under a results folder (docs/layout.md)."""
