"""Pages people read: a run's report.html and a session's report.html and summary.md."""
