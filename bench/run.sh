#!/usr/bin/env bash
# Builds release binaries and runs the core benchmarks against the scripted model
# server (zero model latency). Not part of the tests; run on demand:
#   bash bench/run.sh            # prints a Markdown table; add --record to append it to bench/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm >&2
exec python3 bench/core.py "$@"
