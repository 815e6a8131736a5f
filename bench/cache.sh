#!/usr/bin/env bash
# Billed-equivalent input tokens of a scripted 20-step task under prompt caching
# (picogent, and pi / Claude Code when installed in bench/cache/). Not a test.
#   bash bench/cache.sh            # prints the table
#   bash bench/cache.sh --record   # also records it in bench/RESULTS.md (the table it
#                                  # replaces moves to bench/HISTORY.md)
#   bash bench/cache.sh --peers    # installs pi and Claude Code from npm first
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin picogent --example scripted_llm >&2
exec python3 bench/cache.py "$@"
