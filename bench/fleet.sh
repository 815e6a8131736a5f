#!/usr/bin/env bash
# Fleet mode's benchmark (issue 39) on a throwaway PostgreSQL server (scripts/pg.sh):
#   bash bench/fleet.sh            # prints the tables
#   bash bench/fleet.sh --record   # also records them in bench/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm --example fake_tracker --example events_load >&2
source scripts/pg.sh
trap pg_stop EXIT
python3 bench/fleet.py "$@"
