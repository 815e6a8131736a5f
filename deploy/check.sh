#!/usr/bin/env bash
# Checks deploy/ on a machine without a Docker engine (run on demand, as root, on
# Debian bookworm — the image's base):
#   - the Dockerfile's build stage: its COPY lines alone are enough to build picogent
#     (`cargo build --locked` in a context holding only what the Dockerfile copies);
#   - its runtime stage: the packages it installs resolve (`apt-get --simulate`), and
#     the built binary, run as the image runs it (uid 10001, HOME, agent directory
#     under /data), answers the HEALTHCHECK command;
#   - the systemd unit passes `systemd-analyze verify`;
#   - deploy/kubernetes.yaml parses and each StatefulSet's grace period is above the
#     default drain (shutdown_grace_sec 30).
# Usage: bash deploy/check.sh [--debug]   (--debug builds faster, without --release)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
profile=(--release); dir=release
if [ "${1:-}" = "--debug" ]; then profile=(); dir=debug; fi
tmp=$(mktemp -d)
pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"; }
trap cleanup EXIT

echo "== Dockerfile build stage: only what it copies"
mkdir -p "$tmp/src"
# Build-stage COPY lines (up to the second FROM), sources relative to the context.
awk '/^FROM /{n++} n==1 && /^COPY /{for (i=2;i<NF;i++) print $i}' deploy/Dockerfile |
  while read -r path; do cp -r "$path" "$tmp/src/"; done
target=${CHECK_TARGET_DIR:-$root/target/deploy-check}
(cd "$tmp/src" && CARGO_TARGET_DIR="$target" cargo build "${profile[@]}" --locked --bin picogent)
bin="$target/$dir/picogent"

echo "== Dockerfile runtime stage: packages"
pkgs=$(sed -n 's/.*apt-get install -y --no-install-recommends \(.*\) \\$/\1/p' deploy/Dockerfile)
# shellcheck disable=SC2086
apt-get install --simulate --no-install-recommends $pkgs >/dev/null
echo "resolves: $pkgs"

echo "== Dockerfile runtime stage: run as the image does, probe as HEALTHCHECK does"
mkdir -p "$tmp/data/agent" "$tmp/work" "$tmp/home"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$tmp/data/agent/agent.json" <<EOF
{"name": "Coder", "slug": "coder", "tracker_url": "http://127.0.0.1:9", "work_dir": "$tmp/work"}
EOF
cp "$bin" "$tmp/picogent"
chown -R 10001:10001 "$tmp/data" "$tmp/work" "$tmp/home"
chmod 755 "$tmp"
HOME="$tmp/home" AGENT_PORT=$port AGENT_TOKEN=check ANTHROPIC_API_KEY=check \
  setpriv --reuid 10001 --regid 10001 --clear-groups "$tmp/picogent" "$tmp/data/agent" \
  >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 50); do
  if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/healthz" || { cat "$tmp/log"; exit 1; }
echo
kill -TERM "$pid"; wait "$pid" || true; pid=""
ls "$tmp/data/agent/state" >/dev/null  # state was written on the volume, as the non-root user

echo "== systemd unit"
# The unit names the installed binary; point it at the one just built.
sed "s#/usr/local/bin/picogent#$bin#" deploy/picogent@.service >"$tmp/picogent@coder.service"
systemd-analyze verify "$tmp/picogent@coder.service"
echo "verified"

echo "== kubernetes.yaml"
python3 - <<'EOF'
import yaml
docs = [d for d in yaml.safe_load_all(open("deploy/kubernetes.yaml")) if d]
for d in docs:
    if d["kind"] != "StatefulSet":
        continue
    spec = d["spec"]["template"]["spec"]
    grace = spec["terminationGracePeriodSeconds"]
    drain = 30  # shutdown_grace_sec's default; agent.json on the volume may raise it
    assert grace > drain, f"{d['metadata']['name']}: grace {grace} <= drain {drain}"
    print(f"{d['metadata']['name']}: grace {grace}s > drain {drain}s")
print(f"{len(docs)} documents parse")
EOF
echo "deploy/check.sh: all checks passed"
