"""The live page: its feed, its server, and the analysis done ahead while a session runs (docs/layout.md)."""
