#!/usr/bin/env bash
# A local PostgreSQL for the tests: `start` installs Debian's postgresql if missing, starts a
# cluster of its own on 127.0.0.1 and prints its URL (the last line of stdout); `stop` stops it.
# The cluster only ever holds test data, so it trades durability for speed (fsync off).
set -euo pipefail
PORT="${TRAINFLEET_PG_PORT:-54329}"
CLUSTER=trainfleet
ROLE=trainfleet
PASSWORD=trainfleet
DATABASE=trainfleet

say() { echo "postgres.sh: $*" >&2; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }
root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
version() { ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1; }
psql_admin() { as_postgres psql -X -q -p "$PORT" -v ON_ERROR_STOP=1 "$@"; }

install() {
    if command -v pg_ctlcluster >/dev/null && [ -n "$(version)" ]; then return; fi
    say "installing postgresql"
    root apt-get update -qq >&2
    root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
}

start() {
    install
    local ver
    ver="$(version)"
    if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$ver $CLUSTER"; then
        say "creating cluster $ver/$CLUSTER on port $PORT"
        root pg_createcluster "$ver" "$CLUSTER" --port "$PORT" >&2
        root tee "/etc/postgresql/$ver/$CLUSTER/conf.d/trainfleet.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
ssl = off
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
    fi
    if ! pg_lsclusters -h | awk '{print $1, $2, $4}' | grep -qx "$ver $CLUSTER online"; then
        root pg_ctlcluster "$ver" "$CLUSTER" start >&2
    fi
    psql_admin -d postgres <<SQL
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
        CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
    END IF;
END \$\$;
-- Tests drop their databases WITH (FORCE), which must end an autovacuum worker found there.
GRANT pg_signal_backend TO $ROLE;
SQL
    if [ -z "$(psql_admin -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" ]; then
        as_postgres createdb -p "$PORT" -O "$ROLE" "$DATABASE"
    fi
    echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE"
}

stop() {
    local ver
    ver="$(version)"
    if [ -n "$ver" ] && pg_lsclusters -h | awk '{print $1, $2, $4}' | grep -qx "$ver $CLUSTER online"; then
        root pg_ctlcluster "$ver" "$CLUSTER" stop >&2
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
