#!/usr/bin/env bash
# The test command: every Rust test, then the page's type check and its tests (the
# Markdown renderer under Node, the page in real Chromium). They need Debian's Chromium
# and tests/browser's npm packages (playwright-core, axe-core, typescript,
# json-schema-to-typescript, linkedom); this script installs them when they are
# missing (Chromium through apt-get, as root).
set -euo pipefail
cd "$(dirname "$0")/.."

# Every test server listens on loopback: a proxy set for the machine must not stand
# between them and their clients (reqwest and Chromium honour these).
export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"

# The fake GitHub in the Rust tests checks every request against GitHub's OpenAPI
# description and sends real webhook payloads: both npm packages, installed when missing.
if [ ! -d tests/github/node_modules/@octokit/openapi ] || [ ! -d tests/github/node_modules/@octokit/webhooks-examples ]; then
  echo "scripts/test.sh: installing GitHub's OpenAPI description and webhook examples for the Rust tests" >&2
  (cd tests/github && npm ci --no-audit --no-fund --loglevel=error)
fi

# The Kubernetes manifest is validated strictly against Kubernetes' own schemas.
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  echo "scripts/test.sh: installing kubernetes-validate for the manifest's test" >&2
  python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0
fi

# The store's tests and the fleet's run against a real PostgreSQL server: a throwaway
# one, started here (installed through apt-get when missing) and stopped at the end.
source scripts/pg.sh
trap pg_stop EXIT

echo "scripts/test.sh: the Rust tests, with $(command -v git) ($(git --version))" >&2
cargo test --workspace

# The tests of what picogent does with git, once more with the system's git (Debian's,
# /usr/bin/git) when the one on PATH is another (the newest): teams run both.
system_git=/usr/bin/git
if [ -x "$system_git" ] && [ "$(readlink -f "$system_git")" != "$(readlink -f "$(command -v git)")" ]; then
  echo "scripts/test.sh: the git tests again, with $system_git ($("$system_git" --version))" >&2
  PICOGENT_GIT=$system_git cargo test --test all -- worktrees github checkpoints seams git_support
fi

# The browser test drives the debug binaries.
cargo build --bin picogent --example scripted_llm

if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "scripts/test.sh: installing Debian's chromium for the browser test" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
missing=""
for p in playwright-core axe-core typescript json-schema-to-typescript linkedom; do
  [ -d "tests/browser/node_modules/$p" ] || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "scripts/test.sh: installing the browser test's npm packages (missing:$missing)" >&2
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
# The page's scripts, type-checked against the frames the server sends (their types
# generated from docs/chat-frames.schema.json, which a Rust test holds to the server's).
node tests/browser/gen-frames.mjs
tests/browser/node_modules/.bin/tsc -p client
# The Markdown renderer under Node, and the page in real Chromium.
node --test tests/browser/
# `picogent acp` as an editor drives it, through the protocol's own client library.
if [ ! -d tests/acp/node_modules/@agentclientprotocol/sdk ]; then
  echo "scripts/test.sh: installing the Agent Client Protocol's client library for the editor test" >&2
  (cd tests/acp && npm ci --no-audit --no-fund --loglevel=error)
fi
node --test tests/acp/
