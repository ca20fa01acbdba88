#!/usr/bin/env bash
# Make sure libvirt (qemu:///system) answers, for the lab VM; stop only what this script started.
#
#   scripts/libvirt-daemons.sh start    libvirt already answers: nothing to do. systemd runs the
#                                       machine: systemctl start libvirtd. Neither (containers,
#                                       CI machines): start virtlogd and libvirtd by hand.
#   scripts/libvirt-daemons.sh stop     stop the daemons `start` started by hand (after their
#                                       networks), refusing while domains still run
#   scripts/libvirt-daemons.sh status
#
# Where /dev/kvm exists but KVM does not work (scripts/kvm-probe.sh), libvirtd re-probes QEMU on
# every call (~40 s each, MACHINE.md): started by hand, it runs in a private mount namespace in
# which /dev/kvm is a mode-000 device node, so it consistently sees no KVM.
set -euo pipefail
cd "$(dirname "$0")/.."
state=${CC_TESTBED_LIBVIRT_STATE:-/run/cc-testbed/libvirt}
uri=qemu:///system
PATH=$PATH:/usr/sbin:/sbin

fail() { echo "libvirt-daemons: $*" >&2; exit 1; }
answers() { virsh -c "$uri" version >/dev/null 2>&1; }
started_by_us() { [ -s "$state/libvirtd.pid" ] || [ -s "$state/virtlogd.pid" ]; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  if answers; then
    echo "libvirt-daemons: libvirt already answers at $uri"; return 0
  fi
  command -v libvirtd >/dev/null || fail "libvirtd is not installed: run 'make setup' (apt: libvirt-daemon-system)"
  if [ -d /run/systemd/system ]; then
    echo "libvirt-daemons: starting the system's libvirtd service"
    systemctl start libvirtd.service || fail "systemctl start libvirtd failed: see 'journalctl -u libvirtd'"
  else
    [ "$(id -u)" = 0 ] || fail "starting libvirtd by hand needs root: run it with sudo"
    mkdir -p "$state"
    if ! pgrep -x virtlogd >/dev/null; then
      virtlogd -d -p "$state/virtlogd.pid" || fail "virtlogd did not start"
    fi
    if [ -e /dev/kvm ] && [ "$(scripts/kvm-probe.sh 2>/dev/null)" != usable ]; then
      [ -c "$state/kvm-mask" ] || mknod -m 000 "$state/kvm-mask" c 1 3
      echo "libvirt-daemons: starting libvirtd (KVM unusable here: /dev/kvm masked for libvirtd)"
      unshare -m --propagation private \
        sh -c "mount --bind '$state/kvm-mask' /dev/kvm && exec libvirtd -d -p '$state/libvirtd.pid'"
    else
      echo "libvirt-daemons: starting libvirtd"
      libvirtd -d -p "$state/libvirtd.pid"
    fi
  fi
  for _ in $(seq 60); do answers && break; sleep 0.5; done
  answers || fail "libvirtd does not answer at $uri after 30 s: see /var/log/libvirt/libvirtd.log"
  virsh -c "$uri" version | sed 's/^/libvirt-daemons: /'
}

stop() {
  if ! started_by_us; then
    echo "libvirt-daemons: this script started no daemons: nothing to stop"; return 0
  fi
  if answers; then
    running=$(virsh -c "$uri" list --name | sed '/^$/d')
    if [ -n "$running" ]; then
      fail "domains still run ($(echo "$running" | tr '\n' ' ')): 'vagrant destroy' them first"
    fi
    # an active network keeps its dnsmasq and iptables rules after libvirtd is gone
    for network in $(virsh -c "$uri" net-list --name | sed '/^$/d'); do
      virsh -c "$uri" net-destroy "$network" >/dev/null && echo "libvirt-daemons: stopped network $network"
    done
  fi
  for daemon in libvirtd virtlogd; do
    pidfile=$state/$daemon.pid
    if alive "$pidfile"; then
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "libvirt-daemons: stopped $daemon ($pid)"
    fi
    rm -f "$pidfile"
  done
}

status() {
  if answers; then echo "libvirt answers at $uri"; else echo "libvirt does not answer at $uri"; fi
  for daemon in libvirtd virtlogd; do
    alive "$state/$daemon.pid" && echo "$daemon $(cat "$state/$daemon.pid") (started by this script)"
  done
  return 0
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
