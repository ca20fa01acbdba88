"""``testbed shell`` on the host kernel (--backend local): Mininet's CLI on a dumbbell, through a real
pseudo-terminal; leaving it leaves no process, interface or namespace."""

from __future__ import annotations

from tests.conftest import leftovers
from tests.shelldialogue import reachability_flow_and_exit, spawned


def test_the_shell_reaches_starts_a_flow_and_ctrl_d_leaves_nothing(tmp_path, clean_kernel):
    # rtt_ms 0: the host kernel has no netem, so only the bottleneck (HTB + pfifo) is emulated
    with spawned(tmp_path, "local", rtt_ms=0, boot_timeout_s=60) as child:
        reachability_flow_and_exit(child, leave="eof")  # Ctrl-D; the guest test types exit
    assert child.exitstatus == 0, (tmp_path / "shell.log").read_text()[-2000:]
    assert leftovers() == []
