"""What a report keeps between runs: each run's analysis and the figures, signed with this machine's key
(docs/layout.md)."""
