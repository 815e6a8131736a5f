#!/usr/bin/env bash
# Build times of a checkout, from an empty target folder and after touching one file
# in src/tools/ (issue 38: the workspace's split may cost neither more than 10 %):
#   bash bench/build_times.sh CHECKOUT [LABEL]
# prints one line: LABEL build-clean build-touched tests-clean tests-touched (seconds),
# for `cargo build` and `cargo test --no-run` (dev profile), each in a fresh target
# folder under /tmp. Run it alone on the machine: a build beside it skews both.
set -euo pipefail
dir=$(cd "$1" && pwd)
label=${2:-$(git -C "$dir" rev-parse --short HEAD)}
target=$(mktemp -d /tmp/picogent-build-times.XXXXXX)
trap 'rm -rf "$target"' EXIT
cd "$dir"
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
touched_file=src/tools/read.rs
b_clean=$(secs env CARGO_TARGET_DIR="$target/b" cargo build -q)
touch "$touched_file"
b_touched=$(secs env CARGO_TARGET_DIR="$target/b" cargo build -q)
t_clean=$(secs env CARGO_TARGET_DIR="$target/t" cargo test --no-run -q)
touch "$touched_file"
t_touched=$(secs env CARGO_TARGET_DIR="$target/t" cargo test --no-run -q)
printf '%s %.1f %.1f %.1f %.1f\n' "$label" "$b_clean" "$b_touched" "$t_clean" "$t_touched"
