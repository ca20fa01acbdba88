#!/usr/bin/env bash
# make reproduce: the papers' claims decided on this machine.
#   PROFILE=quick (the default): the suite scenarios/suites/reproduce.yaml, every claim at the points
#     where it is decided, 3 seeds each, in one session (one guest boot, networks kept between runs),
#     whose report leads with the verdicts. Run again, it resumes that session. BUDGET=60m: then more
#     seeds where they decide undecided claims, within that much time (testbed suite --decide).
#   PROFILE=full: every experiment's whole sweep in the papers' durations (scenarios/*.yaml but the
#     default suite), one session per experiment, then one report over them all.
# Prints the estimated time first; a scenario that fails does not stop the others; the exit status is
# 1 when any run did not complete.
set -uo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-quick}
testbed=.venv/bin/testbed
python=.venv/bin/python
if [ "$profile" = quick ]; then
  echo "== reproduce: the suite scenarios/suites/reproduce.yaml (every claim, 3 seeds per point)"
  exec $testbed suite reproduce ${BUDGET:+--budget "$BUDGET"} ${TESTBED_ARGS:-}
fi
mapfile -t names < <(ls scenarios/*.yaml | xargs -n1 basename | sed 's/\.yaml$//' | grep -vx default)
echo "== reproduce: ${#names[@]} experiments, profile $profile"
$testbed check --profile "$profile" "${names[@]}" | grep -E '(: ok |^total:)' || exit 2
status=0
failed=()
sessions=()
done_file=$(mktemp)
trap 'rm -f "$done_file"' EXIT
for i in "${!names[@]}"; do
  name=${names[$i]}
  echo "== reproduce: experiment $((i + 1))/${#names[@]}: $name"
  rm -f "$done_file"
  # the session's folder and report come back in --done-file (JSON: testbed.plan.progress.SessionDone)
  $testbed run "$name" --profile "$profile" --done-file "$done_file" ${TESTBED_ARGS:-}
  rc=$?
  if [ "$rc" -eq 130 ]; then  # Ctrl-C or SIGTERM: stop here (the runs done so far are kept; run again to resume)
    echo "== reproduce: interrupted during $name"
    exit 130
  elif [ "$rc" -ne 0 ]; then
    status=1
    failed+=("$name")
  fi
  report=""
  if [ -s "$done_file" ]; then
    report=$($python -c 'import json, sys; print(json.load(open(sys.argv[1]))["report"] or "")' "$done_file")
  fi
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
