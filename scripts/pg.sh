# Sourced by scripts/test.sh: a throwaway PostgreSQL server for the store's tests and
# the fleet's (Debian's `postgresql`, installed through apt-get when missing). Its data
# is in a temporary folder, it listens on a free private port of 127.0.0.1 only, with
# password authentication, and `pg_stop` (the caller's EXIT trap) stops and removes it.
#
# Exports PICOGENT_TEST_PG_URL (a superuser's URL; each test makes a database of its own)
# and PICOGENT_TEST_PG_BIN (the server's programs, for the tests that start a server of
# their own to stop and start it).

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

if ! pg_bin >/dev/null; then
  echo "scripts/pg.sh: installing Debian's postgresql for the store's tests" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  # Only the server's files: Debian's default cluster is not wanted (policy-rc.d keeps
  # the service from starting where there is no init).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
PG_BIN=$(pg_bin)
export PICOGENT_TEST_PG_BIN=$PG_BIN

# initdb refuses to run as root: the cluster belongs to the `postgres` user then.
if [ "$(id -u)" -eq 0 ]; then
  PG_AS=(runuser -u postgres --)
else
  PG_AS=()
fi

PG_DIR=$(mktemp -d /tmp/picogent-pg.XXXXXX)
chmod 755 "$PG_DIR"
PG_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
printf '%s\n' "$PG_PASSWORD" >"$PG_DIR/pw"
PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [ "$(id -u)" -eq 0 ]; then chown -R postgres "$PG_DIR"; fi

"${PG_AS[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U picogent --pwfile="$PG_DIR/pw" \
  --auth=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 ||
  { cat "$PG_DIR/initdb.log" >&2; exit 1; }
PG_CTL="${PG_AS[*]} $PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/server.log -w -o '-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PG_DIR -c max_connections=300 -c fsync=on'"
eval "$PG_CTL start" >/dev/null
export PICOGENT_TEST_PG_URL="postgres://picogent:$PG_PASSWORD@127.0.0.1:$PG_PORT/postgres"
echo "scripts/pg.sh: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT ($PG_DIR)" >&2

pg_stop() {
  eval "$PG_CTL stop -m immediate" >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
}
