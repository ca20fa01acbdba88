"""Where the experiment runs (a virtme-ng guest, the lab VM, or this machine's kernel): the runner
and what it drives: namespaces and links, qdiscs and tc-BPF programs, iperf3, captures, fidelity
checks. Never imports the host side, the analysis or the reports (make lint)."""
