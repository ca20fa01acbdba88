#!/usr/bin/env bash
# Install what this machine needs, through the project's Ansible playbook against localhost.
# Idempotent: running it again changes nothing.
# Usage: scripts/setup.sh [experiment|all] [--check]
#   experiment  what runs need (make experiment, run, reproduce, regress, bench): the tools, qemu
#               and virtiofsd for virtme-ng guests, the virtualenv
#   all         (the default) that, plus what the tests, make lint and the lab VM need: Vagrant,
#               libvirt and mmdebstrap (the vagrant tier, make box), openssh-server, slurm-wlm and
#               munge (the cluster tests), yamllint and ansible-lint (make lint)
#   --check     only report what is missing; exit 1 if anything is
set -euo pipefail
cd "$(dirname "$0")/.."

purpose=all
check=0
for arg in "$@"; do
  case "$arg" in
    experiment|all) purpose=$arg ;;
    --check) check=1 ;;
    *) echo "setup: unknown argument '$arg'; valid: experiment, all, --check" >&2; exit 2 ;;
  esac
done

experiment_tools=(mn iperf3 tcpdump tcptrace ethtool brctl ping ip tc clang bpftool)
if [ -f /etc/cc-testbed/provisioned ]; then
  # The lab VM or a lab host (playbooks/site.yml): experiments run on this machine's own kernel.
  where="this lab machine (its own kernel runs the experiments)"
  required_commands=("${experiment_tools[@]}")
  playbook=playbooks/site.yml
  playbook_args=(-e "testbed_src=$PWD")
else
  # A host: virtme-ng guests (qemu); for "all" also the lab VM (Vagrant + libvirt, box built
  # with mmdebstrap), the cluster tests' sshd and Slurm, and make lint's linters.
  where="localhost"
  required_commands=("${experiment_tools[@]}" qemu-system-x86_64 busybox)
  if [ "$purpose" = all ]; then
    required_commands+=(vagrant virsh libvirtd mmdebstrap yamllint ansible-lint sshd slurmctld slurmd munged)
  fi
  playbook=playbooks/host.yml
  playbook_args=(-e "host_purpose=$purpose")
fi
missing=()
for c in "${required_commands[@]}"; do
  command -v "$c" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
[ -x .venv/bin/testbed ] || missing+=(".venv (the project's Python environment)")
[ "$playbook" = playbooks/site.yml ] || [ -x .venv/bin/vng ] || missing+=("virtme-ng (vng)")
if [ -x .venv/bin/python ] && ! cmp -s requirements.lock .venv/.requirements.lock \
   && ! { [ "$purpose" = experiment ] && cmp -s requirements.lock .venv/.requirements-runtime.lock; }; then
  missing+=("Python packages from requirements.lock ($purpose; changed or not installed since the last setup)")
fi

if [ "$check" = 1 ]; then
  if [ ${#missing[@]} -eq 0 ]; then echo "setup: everything is installed"; exit 0; fi
  echo "setup ($purpose): missing: $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g')"; exit 1
fi
if [ ${#missing[@]} -eq 0 ] && [ "${FORCE_SETUP:-0}" != 1 ]; then
  echo "setup ($purpose): everything is installed (FORCE_SETUP=1 re-runs the playbook)"; exit 0
fi
[ ${#missing[@]} -gt 0 ] && echo "setup ($purpose): will install: $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g')"

if [ "$(id -u)" != 0 ]; then
  echo "setup: installing system packages needs root: run 'sudo make setup'" >&2; exit 1
fi
if ! command -v ansible-playbook >/dev/null 2>&1; then
  echo "setup: installing Ansible (apt: ansible) to run playbooks/host.yml"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ansible >/dev/null
fi
if [ "$purpose" = experiment ]; then
  echo "setup (experiment): running $playbook against $where: virtiofsd (built), the default guest kernel (fetched), apt mininet iperf3 tcpdump clang bpftool qemu ..., .venv (uv) ('make setup' adds the test, lint and lab VM tools)"
else
  echo "setup (all): running $playbook against $where: the experiment tools, and for the tests, make lint and the lab VM: vagrant libvirt mmdebstrap openssh-server slurm-wlm munge yamllint ansible-lint"
fi
ANSIBLE_CONFIG=playbooks/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_STDOUT_CALLBACK=${ANSIBLE_STDOUT_CALLBACK:-default} \
  ansible-playbook -i playbooks/inventory/localhost.ini "${playbook_args[@]}" "$playbook"
echo "setup: done"
