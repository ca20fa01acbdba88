"""The controlling machine: Debian kernels, guests under virtme-ng, the lab VM over ssh, the
guardian that stops a guest with its controller, the host's contention, and sessions that tie a
plan to one of these backends."""
