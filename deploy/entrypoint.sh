#!/bin/sh
# The image's entry point. Its first argument, when it is an agent directory under
# /data, is made ready: the configuration mounted at /etc/picogent/agent.json (a
# Kubernetes ConfigMap) is copied in at every start, and a fresh, empty volume without
# one gets an empty agent.json, so the environment configures the agent (TRACKER_URL,
# AGENT_TOKEN, ANTHROPIC_API_KEY, ...) instead of failing at start.
set -eu
if [ "$#" -ge 1 ]; then
  case "$1" in
    /data/*)
      mkdir -p "$1"
      if [ -f /etc/picogent/agent.json ]; then
        cp /etc/picogent/agent.json "$1/agent.json"
      elif [ ! -e "$1/agent.json" ]; then
        printf '{}\n' > "$1/agent.json"
      fi
      ;;
  esac
fi
exec /usr/local/bin/picogent "$@"
