#!/usr/bin/env bash
# Run one test tier (unit, netns, guest, vagrant) or all of them, in that order, each in its own pytest,
# and print each tier's wall time at the end.
# Usage: scripts/pytest-tier.sh [--require-tiers] [unit|netns|guest|vagrant|all]
#
# --require-tiers (implied by CI=true): a tier whose prerequisites are missing (root, qemu, vagrant,
# sshd, ...) fails and names them, and a tier where every test skipped fails (tests/prerequisites.py,
# tests/conftest.py). Without it a skipped test says why, and `make test` can pass on a machine that
# lacks a tier's tools. pytest's exit code 5 (no tests collected) fails `all` always, and a single
# tier under --require-tiers.
set -uo pipefail
cd "$(dirname "$0")/.."
tier=all
for arg in "$@"; do
  case "$arg" in
    --require-tiers) export CC_TESTBED_REQUIRE_TIERS=1 ;;
    -*) echo "unknown option '$arg'; valid: --require-tiers" >&2; exit 2 ;;
    *) tier=$arg ;;
  esac
done
[ "${CI:-}" = true ] && export CC_TESTBED_REQUIRE_TIERS=1
py=.venv/bin/python
declare -A select=(
  [unit]="tests/unit"
  [netns]="tests/netns"
  [guest]="tests/guest"
  [vagrant]="tests/vagrant"
)
times=()
# The unit tier runs on every core (pytest-xdist, in requirements.lock; one worker on one core): its tests
# are independent and touch no shared kernel state, and on 2 cores it takes about half the time. Tests
# that read the host's own CPU use (marked quiet_host) would see the other worker as contention, so they
# run after, alone.
unit_tier() {
  $py -m pytest tests/unit -n auto -m "not quiet_host" --durations=15 ${PYTEST_ARGS:-}
  local rc=$?
  echo "== test tier: unit, the quiet_host tests alone"
  $py -m pytest tests/unit -m quiet_host ${PYTEST_ARGS:-}
  local quiet=$?
  [ $rc -ne 0 ] && return $rc
  return $quiet
}
run_tier() {
  local name=$1 started=$SECONDS
  echo "== test tier: $name${CC_TESTBED_REQUIRE_TIERS:+ (required: missing prerequisites fail)}"
  if [ "$name" = unit ]; then
    unit_tier
  else
    $py -m pytest ${select[$name]} --durations=15 ${PYTEST_ARGS:-}
  fi
  local rc=$?
  times+=("$name $((SECONDS - started)) s (exit $rc)")
  if [ $rc -eq 5 ]; then
    echo "== tier $name: no tests collected"
    return 5
  fi
  return $rc
}
summary() { echo "== tier times: $(IFS=';'; echo "${times[*]}")"; }
# The vagrant tier's box (scripts/build-box.sh: mmdebstrap, pip, DKMS, qcow2; about 4 min here, mostly
# downloads and disk) is built while the unit tier runs, which measures nothing: the tiers after it
# time real traffic, so the build is waited for before the netns tier starts. The tier's own
# `vagrant up` builds the box when this did not (not root, no vagrant: the tier says what is missing).
box_pid="" box_log=""
trap '[ -n "$box_pid" ] && kill "$box_pid" 2>/dev/null' EXIT
prebuild_box() {
  [ "$(id -u)" = 0 ] && command -v vagrant >/dev/null && PATH="$PATH:/usr/sbin" command -v mmdebstrap >/dev/null || return 0
  box_log=$(mktemp)
  echo "== vagrant tier's box: scripts/build-box.sh --if-stale, in the background during the unit tier"
  scripts/build-box.sh --if-stale >"$box_log" 2>&1 &
  box_pid=$!
}
wait_box() {
  [ -n "$box_pid" ] || return 0
  local started=$SECONDS
  wait "$box_pid"; local rc=$?
  echo "== vagrant tier's box: exit $rc, waited $((SECONDS - started)) s after the unit tier; its output:"
  sed 's/^/   /' "$box_log"; rm -f "$box_log"; box_pid=""
}
if [ "$tier" = all ]; then
  status=0
  prebuild_box
  for t in unit netns guest vagrant; do
    [ "$t" = netns ] && wait_box
    run_tier "$t"; rc=$?
    [ $rc -ne 0 ] && status=1
  done
  summary
  exit $status
fi
[ -n "${select[$tier]:-}" ] || { echo "unknown tier '$tier'; valid: unit netns guest vagrant all" >&2; exit 2; }
run_tier "$tier"; rc=$?
summary
[ $rc -eq 5 ] && [ -z "${CC_TESTBED_REQUIRE_TIERS:-}" ] && exit 0
[ $rc -eq 5 ] && exit 1
exit $rc
