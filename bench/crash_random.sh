#!/usr/bin/env bash
# Random-instant crash trials (issue 36), run by `bench/crash_trials.sh --random [N]`:
# each trial kills the daemon with SIGKILL at a uniformly random instant of one task
# (the real git, a push to a folder remote), restarts it, and checks that nothing was
# lost or doubled (tests/suite/exactly_once.rs, a_kill_at_a_random_instant_...).
# The span is measured first: the longest of three whole tasks on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$1" n="$2" record="${3:-}"
test=suite::exactly_once::a_kill_at_a_random_instant_loses_and_doubles_nothing
span=0
for _ in 1 2 3; do
  ms=$(PICOGENT_TRIAL_CALIBRATE=1 PICOGENT_TRIAL_KILL_AT_MS=0 "$bin" --exact "$test" --nocapture 2>&1 \
        | sed -n 's/^trial: the task takes \([0-9]*\) ms.*/\1/p' | head -1)
  [ -n "$ms" ] && [ "$ms" -gt "$span" ] && span=$ms
done
[ "$span" -gt 0 ] || { echo "calibration failed: the task never finished" >&2; exit 1; }
ok=0 bad=0
declare -A phase=([none]=0 [started]=0 [commented]=0 [reviewed]=0)
declare -A phase_bad=([none]=0 [started]=0 [commented]=0 [reviewed]=0)
for _ in $(seq "$n"); do
  at=$(( RANDOM * 32768 + RANDOM ))
  at=$(( at % span ))
  if out=$(PICOGENT_TRIAL_KILL_AT_MS=$at "$bin" --exact "$test" --nocapture 2>&1); then pass=1; else pass=0; fi
  had=$(printf '%s\n' "$out" | sed -n 's/^trial: killed .* the tracker had \(.*\)$/\1/p' | head -1)
  case "$had" in
    *status:review*) p=reviewed ;;
    *comment:*) p=commented ;;
    *status:in_progress*) p=started ;;
    *) p=none ;;
  esac
  phase[$p]=$(( ${phase[$p]} + 1 ))
  if [ $pass = 1 ]; then ok=$((ok + 1)); else
    bad=$((bad + 1)); phase_bad[$p]=$(( ${phase_bad[$p]} + 1 ))
    printf '%s\n' "$out" | grep -E "panicked|trial:" -A3 | head -8 >&2
  fi
done
{
  echo "| what the tracker had at the kill | trials | lost or doubled something |"
  echo "|---|---|---|"
  for p in none started commented reviewed; do
    case $p in
      none) w="nothing yet (event accepted; the run, its commit or push under way)" ;;
      started) w="\`in_progress\` (the run, its commit or its push under way)" ;;
      commented) w="the result comment, not yet \`review\`" ;;
      reviewed) w="everything (killed after the task)" ;;
    esac
    echo "| $w | ${phase[$p]} | ${phase_bad[$p]} |"
  done
  echo "| **all** | $n | $bad |"
  echo
  echo "Each trial kills picogent (SIGKILL, by pid) at a uniformly random instant within"
  echo "${span} ms of delivering a task (the longest of three whole tasks here: the run, the"
  echo "real git's commit and a push to a folder remote), restarts it, and checks: the remote"
  echo "holds the branch's tip, the branch has one commit, the task one result comment naming"
  echo "it and saying it was pushed (comments counted as a tracker honouring the"
  echo "\`Idempotency-Key\` keeps them), ending in \`review\`. $ok of $n trials kept everything."
} | python3 bench/report.py emit --title "Random-instant crash trials" --script bench/crash_random.sh \
      --command "bash bench/crash_trials.sh --random $n${record:+ --record}" --bin - $record
[ "$bad" = 0 ]
