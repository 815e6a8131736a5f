#!/usr/bin/env bash
# picogent beside pi, Claude Code and Codex on the same scripted task. Not a test.
#   bash bench/compare.sh            # prints the tables
#   bash bench/compare.sh --record   # also records them in bench/RESULTS.md (the section
#                                    # they replace moves to bench/HISTORY.md)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm --example chat_load >&2
exec python3 bench/compare.py "$@"
