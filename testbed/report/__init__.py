"""Pages people read: a run's report.html, a session's report.html and summary.md (over the analysis,
its cache, the verdicts), and the live page with its feed and server; docs/layout.md names each module."""
