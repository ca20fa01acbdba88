"""Kernel comparisons: two kernels (regress), a series and its change points, a bisection (docs/layout.md)."""
