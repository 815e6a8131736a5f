#!/usr/bin/env bash
# Fleet mode's benchmark (issue 39) on a throwaway PostgreSQL server (scripts/pg.sh):
#   bash bench/fleet.sh            # prints the tables
#   bash bench/fleet.sh --record   # also records them in bench/RESULTS.md
#   bash bench/fleet.sh --github [--record]   # GitHub webhook acknowledgement only
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm --example fake_tracker --example events_load --example webhook_load >&2
source scripts/pg.sh
trap pg_stop EXIT
if [[ " $* " == *" --github "* ]]; then
  args=()
  for a in "$@"; do [[ "$a" == --github ]] || args+=("$a"); done
  python3 bench/github_acks.py "${args[@]}"
else
  python3 bench/fleet.py "$@"
fi
