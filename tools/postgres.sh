#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the journal store tests and CI, and
# print its DSN on stdout (progress goes to stderr):
#     postgresql://postgres@127.0.0.1:54329/flink_agents
# Installs the Debian 'postgresql' package if no server binaries are found
# (root or password-less sudo needed for that). The cluster lives in
# /tmp/flink_agents_pg, listens on 127.0.0.1:54329 only, trusts every loopback
# connection, and keeps running after this script exits. Idempotent: if the
# server already runs, it only makes sure the database exists.
#   FLINK_AGENTS_PG_PORT, FLINK_AGENTS_PG_DATA  override port and data directory.
# Stop it with: pg_ctl -D /tmp/flink_agents_pg stop  (as the postgres user when root).
set -euo pipefail

PORT="${FLINK_AGENTS_PG_PORT:-54329}"
DATA_DIR="${FLINK_AGENTS_PG_DATA:-/tmp/flink_agents_pg}"
DB="flink_agents"
DSN="postgresql://postgres@127.0.0.1:$PORT/$DB"
export DEBIAN_FRONTEND=noninteractive

log() { printf '[postgres] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

AS_ROOT_HINT="install PostgreSQL yourself"
# shellcheck source=tools/as_root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as_root.sh"

# The newest installed server's bin directory (Debian keeps them versioned).
find_bindir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v initdb)")"
        return 0
    fi
    return 1
}

# --- server binaries -------------------------------------------------------------
if ! BIN="$(find_bindir)"; then
    command -v apt-get >/dev/null 2>&1 \
        || die "PostgreSQL server binaries are missing and apt-get is unavailable"
    log "PostgreSQL server missing: installing the 'postgresql' package"
    as_root apt-get update -qq </dev/null >/dev/null
    as_root apt-get install -y -qq postgresql </dev/null >/dev/null
    BIN="$(find_bindir)" || die "no initdb/pg_ctl found after installing postgresql"
fi
log "server binaries: $BIN ($("$BIN/postgres" --version))"

# --- who runs the server ---------------------------------------------------------
# PostgreSQL refuses to run as root: as root, run it as the 'postgres' user the
# package created; otherwise as the current user.
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user"
    if command -v runuser >/dev/null 2>&1; then
        as_pg() { runuser -u postgres -- "$@"; }
    else
        as_pg() { su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; }
    fi
else
    as_pg() { "$@"; }
fi

# One invocation at a time (two test runs may start together).
if command -v flock >/dev/null 2>&1; then
    exec 9>"/tmp/flink_agents_pg.$PORT.lock"
    flock -w 120 9 || die "another tools/postgres.sh held the lock for 120 s"
fi

psql_admin() {
    "$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}

# --- cluster ---------------------------------------------------------------------
if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    log "a server already accepts connections on 127.0.0.1:$PORT"
else
    if [ -d "$DATA_DIR" ] && [ ! -f "$DATA_DIR/PG_VERSION" ]; then
        log "removing the half-initialized $DATA_DIR"
        rm -rf "$DATA_DIR"
    fi
    if [ ! -d "$DATA_DIR" ]; then
        log "initializing a cluster in $DATA_DIR"
        as_pg "$BIN/initdb" -D "$DATA_DIR" -U postgres --auth=trust --encoding=UTF8 \
            --no-sync >/dev/null
        cat <<EOF | as_pg tee -a "$DATA_DIR/postgresql.conf" >/dev/null
# tools/postgres.sh: a throwaway test cluster, reachable on loopback only
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA_DIR'
EOF
    fi
    log "starting the server on 127.0.0.1:$PORT (log: $DATA_DIR/server.log)"
    # 9>&-: the server must not inherit (and so hold forever) the lock.
    if ! as_pg "$BIN/pg_ctl" -D "$DATA_DIR" -l "$DATA_DIR/server.log" -w -t 60 start \
        >/dev/null 9>&-; then
        tail -n 20 "$DATA_DIR/server.log" >&2 || true
        die "the server did not start (is port $PORT taken by another program?)"
    fi
fi

# --- database --------------------------------------------------------------------
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]; then
    log "creating database $DB"
    psql_admin -c "CREATE DATABASE $DB" >/dev/null
fi

echo "$DSN"
