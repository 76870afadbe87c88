#!/usr/bin/env bash
# A real pgbouncer in transaction pooling mode for the database tests:
# 127.0.0.1:6432 -> Postgres at 127.0.0.1:5432, trust auth, user postgres.
#
#   scripts/pgbouncer-test.sh start   # idempotent; waits until 6432 answers
#   scripts/pgbouncer-test.sh stop
#   scripts/pgbouncer-test.sh status
#
# Any database name is routed to the same-named Postgres database ("*"), so
# the tests can create a fresh database per run. Environment overrides:
# PGBOUNCER_DIR, PGBOUNCER_PORT, PGBOUNCER_POOL_SIZE, POSTGRES_HOST, POSTGRES_PORT.
set -euo pipefail

DIR="${PGBOUNCER_DIR:-/tmp/teleuploader-pgbouncer}"
PORT="${PGBOUNCER_PORT:-6432}"
# Deliberately small: more clients than server connections is exactly the
# situation in which statements of different clients share a server session.
POOL_SIZE="${PGBOUNCER_POOL_SIZE:-5}"
PG_HOST="${POSTGRES_HOST:-127.0.0.1}"
PG_PORT="${POSTGRES_PORT:-5432}"
BIN=/usr/sbin/pgbouncer
# pgbouncer refuses to run as root; as root we start it with -u.
RUN_AS="$(id -u postgres >/dev/null 2>&1 && echo postgres || echo nobody)"

log() { echo "pgbouncer-test: $*" >&2; }

pid_alive() {
    [[ -f "$DIR/pgbouncer.pid" ]] && kill -0 "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null
}

port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

install_if_missing() {
    [[ -x "$BIN" ]] && return
    log "installing pgbouncer"
    local was_running=no
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >&2; }
    # The package may start its own instance on 6432; it is ours, we just installed it.
    if command -v service >/dev/null && service pgbouncer status >/dev/null 2>&1; then
        was_running=yes
        service pgbouncer stop >&2 || true
    fi
    log "installed (package service was running: $was_running)"
}

write_config() {
    mkdir -p "$DIR"
    cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
* = host=$PG_HOST port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
max_client_conn = 500
default_pool_size = $POOL_SIZE
max_db_connections = 20
; Some drivers send it at startup; pgbouncer rejects startup parameters it does not know.
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
EOF
    # trust auth still needs the user listed.
    echo '"postgres" ""' >"$DIR/userlist.txt"
    if [[ "$(id -u)" == 0 ]]; then
        chown -R "$RUN_AS" "$DIR"
    fi
}

start() {
    if pid_alive && port_open; then
        log "already running (pid $(cat "$DIR/pgbouncer.pid")) on 127.0.0.1:$PORT"
        return
    fi
    if port_open; then
        log "port $PORT is taken by another process; stop it or set PGBOUNCER_PORT"
        exit 1
    fi
    install_if_missing
    write_config
    if [[ "$(id -u)" == 0 ]]; then
        "$BIN" -d -u "$RUN_AS" "$DIR/pgbouncer.ini"
    else
        "$BIN" -d "$DIR/pgbouncer.ini"
    fi
    for _ in $(seq 100); do
        if port_open; then
            log "running (pid $(cat "$DIR/pgbouncer.pid" 2>/dev/null || echo '?')) on 127.0.0.1:$PORT"
            return
        fi
        sleep 0.1
    done
    log "did not start listening on $PORT; log follows"
    tail -n 30 "$DIR/pgbouncer.log" >&2 || true
    exit 1
}

stop() {
    if ! pid_alive; then
        log "not running"
        return
    fi
    local pid
    pid="$(cat "$DIR/pgbouncer.pid")"
    kill -TERM "$pid"
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || { log "stopped"; return; }
        sleep 0.1
    done
    log "pid $pid did not stop within 5 s"
    exit 1
}

status() {
    if pid_alive && port_open; then
        log "running (pid $(cat "$DIR/pgbouncer.pid")) on 127.0.0.1:$PORT"
    else
        log "not running"
        return 1
    fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
