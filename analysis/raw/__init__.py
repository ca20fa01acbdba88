"""A run's raw files read into frames and dicts: the loaders and the captures' accounting (docs/layout.md)."""
