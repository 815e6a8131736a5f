#!/usr/bin/env bash
# Crash trials (issue 25): each kill -9 test of a task's delivery, N times (default 30),
# counting the trials that lost a commit, a push or a report (a failed test).
#   bash bench/crash_trials.sh [N]            # prints the table
#   bash bench/crash_trials.sh [N] --record   # also records it in bench/RESULTS.md (the
#                                             # table it replaces moves to bench/HISTORY.md)
#   bash bench/crash_trials.sh --random [N] [--record]
#                                             # N (default 200) kills at a uniformly random
#                                             # instant of a task instead (issue 36)
# Each trial stops a stand-in git at the exact step, kills the daemon by pid, restarts
# it and checks the branch, the remote and the comments (tests/suite/worktrees.rs).
# The test binary is the one cargo builds (under $CARGO_TARGET_DIR when it is set).
set -euo pipefail
cd "$(dirname "$0")/.."
n="" record="" random=""
for arg in "$@"; do
  case "$arg" in
    --record) record="--record" ;;
    --random) random=1 ;;
    *) n="$arg" ;;
  esac
done
n="${n:-$([ -n "$random" ] && echo 200 || echo 30)}"
cargo test --quiet --test all --no-run 2>/dev/null
bin=$(cargo test --test all --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("target", {}).get("name") == "all" and m.get("executable"):
        print(m["executable"])')

if [ -n "$random" ]; then
  exec bash bench/crash_random.sh "$bin" "$n" "$record"
fi

# What each test cuts short.
phase_name() {
  case "$1" in
    a_kill_during_worktree_add_*) echo "\`git worktree add\` cut short (a file missing, git's record \`initializing\`)" ;;
    a_kill_during_the_commit_*) echo "\`git commit\`, with \`index.lock\` held" ;;
    a_kill_right_after_the_commit_*) echo "right after \`git commit\`, before picogent noted it" ;;
    a_kill_during_the_push_*) echo "between the commit and the end of \`git push\`" ;;
  esac
}

{
  echo "| phase | trials | kept everything | lost something |"
  echo "|---|---|---|---|"
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
    echo "| $(phase_name "$phase") | $n | $ok | $lost |"
  done
  echo
  echo "Each trial runs one kill test of \`tests/suite/worktrees.rs\`. A stand-in git stops at the"
  echo "exact step. The daemon is killed with SIGKILL by pid, so what it started is orphaned, not"
  echo "killed with it. The daemon is then restarted, and the branch, the remote and the comments"
  echo "are checked. A trial fails if it lost a commit, a push or a report."
} | python3 bench/report.py emit --title "Crash trials of a task's delivery" --script bench/crash_trials.sh \
      --command "bash bench/crash_trials.sh $n${record:+ --record}" --bin - $record
