"""The pages and tables drawn from analysed runs: a run's, a session's, the claims' verdicts, JUnit
(docs/layout.md)."""
