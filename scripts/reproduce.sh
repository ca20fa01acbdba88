#!/usr/bin/env bash
# make reproduce: every experiment's whole sweep (scenarios/*.yaml but the default suite) in one profile
# (PROFILE=quick by default, PROFILE=full for the papers' durations). Prints the estimated time first;
# a scenario that fails does not stop the others; the exit status is 1 when any did not complete.
set -uo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-quick}
testbed=.venv/bin/testbed
mapfile -t names < <(ls scenarios/*.yaml | xargs -n1 basename | sed 's/\.yaml$//' | grep -vx default)
echo "== reproduce: ${#names[@]} experiments, profile $profile"
$testbed check --profile "$profile" "${names[@]}" | grep -E '(: ok |^total:)' || exit 2
status=0
failed=()
sessions=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for i in "${!names[@]}"; do
  name=${names[$i]}
  echo "== reproduce: experiment $((i + 1))/${#names[@]}: $name"
  $testbed run "$name" --profile "$profile" ${TESTBED_ARGS:-} | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 130 ]; then  # Ctrl-C or SIGTERM: stop here (the runs done so far are kept; run again to resume)
    echo "== reproduce: interrupted during $name"
    exit 130
  elif [ "$rc" -ne 0 ]; then
    status=1
    failed+=("$name")
  fi
  report=$(sed -n 's/^report: //p' "$log" | tail -1)
  [ -n "$report" ] && sessions+=("$(dirname "$report")")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== reproduce: not complete: ${failed[*]} (their reports list the runs and reasons)"
fi
if [ ${#sessions[@]} -gt 0 ]; then
  # one report over every experiment's runs, with the verdicts on the papers' claims
  out="$(dirname "$(dirname "${sessions[0]}")")/reproduction/$(date -u +%Y%m%dT%H%M%SZ)-$profile"
  echo "== reproduce: the reproduction report of ${#sessions[@]} experiments"
  $testbed report --out "$out" "${sessions[@]}" || status=1
fi
exit $status
