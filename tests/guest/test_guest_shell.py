"""``testbed shell`` in a virtme-ng guest, through a real pseudo-terminal (pexpect): the guest's
console is the terminal; l0 reaches r0, a flow is seen in the bottleneck's counters and its cwnd, and
``exit`` powers the guest off: no vng, qemu or virtiofsd of this checkout is left."""

from __future__ import annotations

from tests.conftest import guest_processes
from tests.shelldialogue import reachability_flow_and_exit, spawned


def test_the_shell_in_a_guest_reaches_starts_a_flow_and_leaves_no_guest(tmp_path):
    with spawned(tmp_path, "guest", rtt_ms=20, boot_timeout_s=300) as child:
        reachability_flow_and_exit(child)
    assert guest_processes() == [], "the guest outlived the shell's exit"
