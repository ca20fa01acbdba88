#!/usr/bin/env bash
# Install what this machine needs to run experiments, through the project's Ansible
# playbook against localhost. Idempotent: running it again changes nothing.
# Usage: scripts/setup.sh [--check]   (--check: only report what is missing; exit 1 if anything is)
set -euo pipefail
cd "$(dirname "$0")/.."

experiment_tools=(mn iperf3 tcpdump tcptrace ethtool brctl ping ip tc clang bpftool)
if [ -f /etc/cc-testbed/provisioned ]; then
  # The lab VM or a lab host (playbooks/site.yml): experiments run on this machine's own kernel.
  where="this lab machine (its own kernel runs the experiments)"
  required_commands=("${experiment_tools[@]}")
  playbook=playbooks/site.yml
  playbook_args=(-e "testbed_src=$PWD")
else
  # A host: virtme-ng guests (qemu), the lab VM (Vagrant + libvirt, box built with mmdebstrap), make lint.
  where="localhost"
  required_commands=("${experiment_tools[@]}" qemu-system-x86_64 busybox vagrant virsh libvirtd mmdebstrap
                     yamllint ansible-lint sshd slurmctld slurmd munged)
  playbook=playbooks/host.yml
  playbook_args=()
fi
missing=()
for c in "${required_commands[@]}"; do
  command -v "$c" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ -x .venv/bin/testbed ] || missing+=(".venv (the project's Python environment)")
[ "$playbook" = playbooks/site.yml ] || [ -x .venv/bin/vng ] || missing+=("virtme-ng (vng)")
if [ -x .venv/bin/python ] && ! cmp -s requirements.lock .venv/.requirements.lock; then
  missing+=("Python packages from requirements.lock (changed since the last setup)")
fi

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -eq 0 ]; then echo "setup: everything is installed"; exit 0; fi
  printf 'setup: missing: %s\n' "${missing[@]}"; exit 1
fi
if [ ${#missing[@]} -eq 0 ] && [ "${FORCE_SETUP:-0}" != 1 ]; then
  echo "setup: everything is installed (FORCE_SETUP=1 re-runs the playbook)"; exit 0
fi
[ ${#missing[@]} -gt 0 ] && printf 'setup: will install: %s\n' "${missing[@]}"

if [ "$(id -u)" != 0 ]; then
  echo "setup: installing system packages needs root: run 'sudo make setup'" >&2; exit 1
fi
if ! command -v ansible-playbook >/dev/null 2>&1; then
  echo "setup: installing Ansible (apt: ansible) to run playbooks/host.yml"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ansible >/dev/null
fi
echo "setup: running $playbook against $where (apt: mininet iperf3 tcpdump tcptrace ...; pip: .venv)"
ANSIBLE_CONFIG=playbooks/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=${ANSIBLE_STDOUT_CALLBACK:-default} \
  ansible-playbook -i playbooks/inventory/localhost.ini "${playbook_args[@]}" "$playbook"
echo "setup: done"
