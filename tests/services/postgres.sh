#!/usr/bin/env bash
# A throw-away PostgreSQL server for the tests: Debian's postgresql, initdb into a directory, a
# Unix socket in that directory (no TCP, no systemd). Idempotent: an instance already running
# there is reused. Prints the SQLAlchemy URL on stdout.
#   bash tests/services/postgres.sh start [DIR]   (default DIR: /tmp/hpcprof-pg)
#   bash tests/services/postgres.sh stop  [DIR]
set -euo pipefail
cmd="${1:-start}"
dir="${2:-/tmp/hpcprof-pg}"

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -z "$(bindir)" ]; then
  if [ "$(id -u)" != 0 ]; then echo "postgres.sh: PostgreSQL is not installed and we are not root" >&2; exit 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }
fi
bin="$(bindir)"
# the server refuses to run as root: run it as the postgres user when we are root
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$cmd" in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    [ -f "$dir/data/PG_VERSION" ] || as_pg "$bin/initdb" -D "$dir/data" -U hpcprof --auth=trust -E UTF8 >/dev/null
    if ! as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -c listen_addresses='' -c max_connections=200 -c fsync=off" start >/dev/null
    fi
    echo "postgresql+psycopg://hpcprof@/postgres?host=$dir"
    ;;
  stop)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  *) echo "usage: postgres.sh start|stop [DIR]" >&2; exit 2 ;;
esac
