#!/usr/bin/env bash
# Run one test tier (unit, netns, guest, vagrant) or all of them, in that order, each in its own pytest.
# pytest's exit code 5 ("no tests collected") fails `all` (a suite that runs nothing is broken)
# but only warns for a single tier whose tests all live elsewhere.
set -uo pipefail
cd "$(dirname "$0")/.."
tier=${1:-all}
py=.venv/bin/python
declare -A select=(
  [unit]="tests/unit"
  [netns]="tests/netns"
  [guest]="tests/guest"
  [vagrant]="tests/vagrant"
)
run_tier() {
  local name=$1
  echo "== test tier: $name"
  $py -m pytest ${select[$name]} --durations=12 ${PYTEST_ARGS:-}
  local rc=$?
  if [ $rc -eq 5 ]; then
    echo "== tier $name: no tests collected"
    return 5
  fi
  return $rc
}
if [ "$tier" = all ]; then
  status=0
  for t in unit netns guest vagrant; do
    run_tier "$t"; rc=$?
    [ $rc -ne 0 ] && status=1
  done
  exit $status
fi
[ -n "${select[$tier]:-}" ] || { echo "unknown tier '$tier'; valid: unit netns guest vagrant all" >&2; exit 2; }
run_tier "$tier"; rc=$?
[ $rc -eq 5 ] && exit 0
exit $rc
