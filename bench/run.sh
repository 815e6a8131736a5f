#!/usr/bin/env bash
# Builds release binaries and runs the benchmarks against the tests' scripted model
# server and fake tracker (zero model latency). Not part of the tests; run on demand:
#   bash bench/run.sh            # prints Markdown tables
#   bash bench/run.sh --record   # also records them in bench/RESULTS.md (bench/report.py:
#                                # the tables they replace move to bench/HISTORY.md)
# Binaries are built and found under $CARGO_TARGET_DIR when it is set, else target/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm --example fake_tracker --example chat_load --example events_load >&2
python3 bench/core.py "$@"
python3 bench/agent.py "$@"
python3 bench/chat.py "$@"
