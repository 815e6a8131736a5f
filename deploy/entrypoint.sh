#!/bin/sh
# The image's entry point.
# - `chat`: chat mode on the mounted project (/work), listening on every interface of
#   the container (PICOGENT_HOST=0.0.0.0 unless set), which picogent allows only with
#   PICOGENT_CHAT_TOKEN.
# - an agent directory under /data (the default, /data/agent): made ready. The
#   configuration mounted at /etc/picogent/agent.json (a Kubernetes ConfigMap) is copied
#   in at every start; a fresh, empty volume without one gets an agent.json that works
#   on /work, so the environment configures the agent (TRACKER_URL, AGENT_TOKEN,
#   ANTHROPIC_API_KEY, ...) instead of failing at start.
# - anything else: picogent with those arguments (`run "task"`, `sandbox-check`, ...).
set -eu
mkdir -p "${HOME:-/data/home}"
if [ "$#" -ge 1 ] && [ "$1" = chat ]; then
  shift
  export PICOGENT_HOST="${PICOGENT_HOST:-0.0.0.0}"
  cd /work
  exec /usr/local/bin/picogent "$@"
fi
if [ "$#" -ge 1 ]; then
  case "$1" in
    /data/*)
      mkdir -p "$1"
      if [ -f /etc/picogent/agent.json ]; then
        cp /etc/picogent/agent.json "$1/agent.json"
      elif [ ! -e "$1/agent.json" ]; then
        printf '{"work_dir": "/work"}\n' > "$1/agent.json"
      fi
      ;;
  esac
fi
exec /usr/local/bin/picogent "$@"
