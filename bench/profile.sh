#!/usr/bin/env bash
# The release profile against the dist profile: what thin LTO over parallel codegen
# units (`[profile.release]`, what `cargo run --release` builds) costs at run time
# against fat LTO with one codegen unit (`[profile.dist]`). Builds the tests' scripted
# model server (debug) and runs bench/profile.py: a 300-step `picogent run`, the two
# binaries in turn, pair by pair. Not a test.
#   bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS]            # prints the table
#   bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS] --record   # also records it in
#       bench/RESULTS.md (the table it replaces moves to bench/HISTORY.md)
# Build the two first, each into a target folder of its own, e.g.
#   CARGO_TARGET_DIR=/tmp/rel cargo build --release --bin picogent
#   CARGO_TARGET_DIR=/tmp/dist cargo build --profile dist --bin picogent
# The scripted server is built and found under $CARGO_TARGET_DIR when it is set, else target/.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS] [--record]" >&2
  exit 2
fi
# The binaries from where the command was given, before moving to the checkout.
rel=$(realpath "$1") dist=$(realpath "$2")
shift 2
cd "$(dirname "$0")/.."
cargo build --example scripted_llm >&2
exec python3 bench/profile.py "$rel" "$dist" "$@"
