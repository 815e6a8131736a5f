#!/usr/bin/env bash
# Per-step cost and RSS of one session through 2,000 scripted steps. Not a test.
#   bash bench/growth.sh            # prints the table
#   bash bench/growth.sh --record   # also records it in bench/RESULTS.md (the table it
#                                   # replaces moves to bench/HISTORY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm >&2
exec python3 bench/growth.py "$@"
