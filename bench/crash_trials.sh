#!/usr/bin/env bash
# Crash trials (issue 25): each kill -9 test of a task's delivery, N times (default 30),
# counting the trials that lost a commit, a push or a report (a failed test).
#   bash bench/crash_trials.sh [N]
# Each trial stops a stand-in git at the exact step, kills the daemon by pid, restarts
# it and checks the branch, the remote and the comments (tests/suite/worktrees.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-30}"
cargo test --quiet --test all --no-run 2>/dev/null
bin=$(cargo test --test all --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("target", {}).get("name") == "all" and m.get("executable"):
        print(m["executable"])')
for phase in a_kill_during_worktree_add_never_leaves_a_half_made_worktree_in_use \
             a_kill_during_the_commit_loses_no_work \
             a_kill_right_after_the_commit_still_names_it \
             a_kill_during_the_push_still_pushes_and_reports_the_commit; do
  ok=0; lost=0
  for _ in $(seq "$n"); do
    if "$bin" --exact "suite::worktrees::$phase" --quiet >/dev/null 2>&1; then
      ok=$((ok + 1))
    else
      lost=$((lost + 1))
    fi
  done
  echo "| $phase | $n | $ok | $lost |"
done
