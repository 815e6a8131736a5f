#!/bin/sh
# The image's entry point: an agent directory on a fresh (empty) volume gets an empty
# agent.json, so the configuration comes from the environment alone (TRACKER_URL,
# AGENT_TOKEN, ANTHROPIC_API_KEY, ...) instead of failing at start.
set -eu
for arg in "$@"; do
  case "$arg" in
    /data/*)
      if [ ! -e "$arg" ] || { [ -d "$arg" ] && [ ! -e "$arg/agent.json" ]; }; then
        mkdir -p "$arg"
        [ -e "$arg/agent.json" ] || printf '{}\n' > "$arg/agent.json"
      fi
      ;;
  esac
done
exec /usr/local/bin/picogent "$@"
