#!/usr/bin/env bash
# The release profile against the dist profile: what thin LTO over parallel codegen
# units (`[profile.release]`, what `cargo run --release` builds) costs at run time
# against fat LTO with one codegen unit (`[profile.dist]`). Times a 300-step
# `picogent run` (299 `read` calls, then an answer) against the tests' scripted model
# server, the two binaries in turn, pair by pair (farm-bench).
#   bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS]
# Build the two first, each into a target folder of its own, e.g.
#   CARGO_TARGET_DIR=/tmp/rel cargo build --release --bin picogent
#   CARGO_TARGET_DIR=/tmp/dist cargo build --profile dist --bin picogent
set -euo pipefail
cd "$(dirname "$0")/.."
rel=$(realpath "$1") dist=$(realpath "$2") runs=${3:-15}
target=${CARGO_TARGET_DIR:-target}
cargo build --example scripted_llm >&2
server="$target/debug/examples/scripted_llm"
work=$(mktemp -d)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
printf "print('Hello, world')\n" >"$work/greet.py"
python3 - "$work/script.json" <<'PY'
import json, sys
# Arguments that differ from call to call: the repeat guard stops a loop of identical ones.
turns = [{"tool": "read", "args": {"path": "greet.py", "limit": i + 1}} for i in range(299)]
turns.append({"text": "done"})
json.dump(turns, open(sys.argv[1], "w"))
PY
# ./agent.json in the working folder: room for the 300 steps.
printf '{"max_steps": 400}\n' >"$work/agent.json"
"$server" "$work/script.json" >"$work/server.out" &
pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/server.out" 2>/dev/null && break; sleep 0.05; done
addr=$(awk '/listening on/ {print $NF}' "$work/server.out")
export PATH HOME="$work" PICOGENT_PROVIDER=anthropic PICOGENT_BASE_URL="http://$addr" \
  PICOGENT_API_KEY=test-key RUST_LOG=off
cd "$work"
farm-bench -n "$runs" --timeout 900 \
  --vs "sh -c 'exec $dist run --dir $work hi >/dev/null 2>&1'" \
  -- sh -c "exec $rel run --dir $work hi >/dev/null 2>&1"
