#!/usr/bin/env bash
# Install what this machine needs to run experiments, through the project's Ansible
# playbook against localhost. Idempotent: running it again changes nothing.
# Usage: scripts/setup.sh [--check]   (--check: only report what is missing; exit 1 if anything is)
set -euo pipefail
cd "$(dirname "$0")/.."

required_commands=(mn iperf3 tcpdump tcptrace ethtool brctl ping ip tc qemu-system-x86_64 busybox yamllint ansible-lint)
missing=()
for c in "${required_commands[@]}"; do
  command -v "$c" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ -x .venv/bin/testbed ] || missing+=(".venv (the project's Python environment)")
[ -x .venv/bin/vng ] || missing+=("virtme-ng (vng)")
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
echo "setup: running playbooks/host.yml against localhost (apt: mininet iperf3 tcpdump tcptrace qemu ...; pip: .venv)"
ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=${ANSIBLE_STDOUT_CALLBACK:-default} \
  ansible-playbook -i playbooks/inventory/localhost.ini playbooks/host.yml
cp requirements.lock .venv/.requirements.lock
echo "setup: done"
