#!/usr/bin/env bash
# Does KVM work here? Prints "usable" or "unusable" (exit 0 either way).
#
# /dev/kvm existing is not enough: under nested virtualization a KVM guest can hang before the
# kernel prints anything (MACHINE.md). So a kernel is booted with -accel kvm and we wait for its
# first line ("Linux version") for at most $KVM_PROBE_TIMEOUT_S seconds. The answer is cached
# until the host reboots. CC_TESTBED_ACCEL=kvm|tcg skips the probe.
# Usage: scripts/kvm-probe.sh [VMLINUZ]   (default: the host's own kernel in /boot)
# Used by testbed.host.virtme (virtme-ng guests) and the Vagrantfile (libvirt domain type).
set -euo pipefail

case "${CC_TESTBED_ACCEL:-}" in
  kvm) echo usable; exit 0 ;;
  tcg) echo unusable; exit 0 ;;
esac
if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then echo unusable; exit 0; fi

kernel=${1:-}
if [ -z "$kernel" ]; then
  kernel=$(ls -1 /boot/vmlinuz-"$(uname -r)" /boot/vmlinuz-* 2>/dev/null | head -1 || true)
fi
if [ -z "$kernel" ] || [ ! -r "$kernel" ]; then
  echo "kvm-probe: no kernel to boot (give a vmlinuz as argument): assuming KVM is unusable" >&2
  echo unusable; exit 0
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/cc-testbed
boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
key=$(printf '%s' "$kernel" | sha256sum | cut -c1-12)
stamp="$cache/kvm-probe-$boot_id-$key"
# answers of earlier boots say nothing now: remove them rather than let them pile up
find "$cache" -maxdepth 1 -name 'kvm-probe-*' ! -name "kvm-probe-$boot_id-*" -delete 2>/dev/null || true
if [ -s "$stamp" ]; then cat "$stamp"; exit 0; fi

timeout_s=${KVM_PROBE_TIMEOUT_S:-20}
echo "kvm-probe: booting $kernel with -accel kvm (${timeout_s} s at most; cached until the host reboots)" >&2
out=$(mktemp)
trap 'rm -f "$out" "$out.pid"' EXIT
pidfile="$out.pid"
# in a subshell: a qemu that aborts is not our job, so bash prints no "Aborted" notice
( qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -no-reboot -display none -pidfile "$pidfile" \
    -serial "file:$out" -kernel "$kernel" -append "console=ttyS0 panic=-1 earlyprintk=serial" \
    >/dev/null 2>&1 || true ) 2>/dev/null &
qemu=$!
answer=unusable
for _ in $(seq $((timeout_s * 10))); do
  if grep -q "Linux version" "$out" 2>/dev/null; then answer=usable; break; fi
  kill -0 "$qemu" 2>/dev/null || break
  sleep 0.1
done
grep -q "Linux version" "$out" 2>/dev/null && answer=usable
[ -s "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
wait "$qemu" 2>/dev/null || true
mkdir -p "$cache"
echo "$answer" > "$stamp"
echo "kvm-probe: KVM is $answer" >&2
echo "$answer"
