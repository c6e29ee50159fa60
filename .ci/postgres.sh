#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on loopback for the store's tests and print the DSN.
# Usage: eval "$(bash .ci/postgres.sh start DIR)"   ...   bash .ci/postgres.sh stop DIR
# Installs Debian's postgresql when its binaries are missing (CI machines start bare).
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?state directory}
find_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}
if ! bin=$(find_bin); then
  if [ "$cmd" = stop ]; then exit 0; fi
  echo "ci: installing postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq postgresql >&2
  bin=$(find_bin)
fi
data="$dir/data"
if [ "$cmd" = stop ]; then
  if [ -f "$data/postmaster.pid" ]; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >&2 || true
  fi
  exit 0
fi
mkdir -p "$dir"
chown postgres: "$dir"
chmod 700 "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ ! -f "$data/PG_VERSION" ]; then
  runuser -u postgres -- "$bin/initdb" -D "$data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1
fi
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off" start >&2
runuser -u postgres -- "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE muster_test" >&2
echo "export MUSTER_TEST_PG_DSN='host=127.0.0.1 port=$port user=postgres dbname=muster_test'"
