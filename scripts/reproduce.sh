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
for i in "${!names[@]}"; do
  name=${names[$i]}
  echo "== reproduce: experiment $((i + 1))/${#names[@]}: $name"
  if ! $testbed run "$name" --profile "$profile" ${TESTBED_ARGS:-}; then
    status=1
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== reproduce: not complete: ${failed[*]} (their reports list the runs and reasons)"
fi
exit $status
