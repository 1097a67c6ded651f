#!/usr/bin/env bash
# A standalone Flink cluster on localhost, from the Flink distribution that the
# apache-flink wheel ships (pyflink/bin, pyflink/lib): one JobManager and N
# TaskManagers, small memory settings, Python workers on this repo's venv.
#
#   tools/cluster.sh start [--taskmanagers N] [--slots S] [--dir DIR] [--stock]
#   tools/cluster.sh stop [--dir DIR]
#   tools/cluster.sh status [--dir DIR]
#   tools/cluster.sh flink [--dir DIR] -- ARGS...   the distribution's `flink` CLI on this cluster
#
# --stock: the distribution as shipped, only what running beside other
# clusters on this host needs (free ports, addresses, memory, dirs) and the
# agents' agent.journal.sqlite.shared: no flink-python in lib/, no pemja.
# parent-first (so one thread-mode job per TaskManager lifetime), no
# python.executable (workers run the job's, or `python` on PATH).
#
# Everything lives under DIR (default out/cluster, ignored by git): conf/ (a
# copy of the wheel's conf with this cluster's config.yaml; FLINK_CONF_DIR),
# lib/ (the wheel's lib/ plus opt/flink-python, for thread mode), log/, pids/, checkpoints/, savepoints/ and cluster.env, the state file
# (REST_URL, REST_PORT, JM_PID, TM_PIDS, ...; shell syntax). The REST and RPC
# ports are free ports picked at start. `stop` ends exactly the processes
# `start` recorded (and the Python workers they spawned), nothing else.
# Idempotent: `start` on a running cluster with the same shape only reports
# it; `stop` on a stopped one says so. Exit codes: 0 ok; 1 error; 2 usage;
# 3 (status) not running or not answering.
#
# Submit a job (client and workers use the venv's Python, set in config.yaml):
#   FLINK_CONF_DIR=out/cluster/conf .venv/lib/python3.11/site-packages/pyflink/bin/flink \
#       run -py jobs/review_analysis.py -- --parallelism 2
# or: tools/cluster.sh flink -- run -py jobs/review_analysis.py
#   FLINK_CLUSTER_JM_MEMORY, FLINK_CLUSTER_TM_MEMORY  override the process
#   sizes (default 1024m and 1280m); FLINK_CLUSTER_START_TIMEOUT_S the wait
#   for all slots to register (default 90); FLINK_CLUSTER_CONF a JSON object
#   of further flat config.yaml settings, applied last (e.g.
#   '{"heartbeat.timeout": 10000}'). Metric reporters go here too: the
#   JobManager and TaskManagers load them from the wheel's plugins/ (e.g.
#   '{"metrics.reporter.prom.factory.class":
#   "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
#   "metrics.reporter.prom.port": "9249-9260"}': each process takes the next
#   free port of the range; docs/observability.md).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$REPO_ROOT/.venv/bin/python"
JM_MEMORY="${FLINK_CLUSTER_JM_MEMORY:-1024m}"
TM_MEMORY="${FLINK_CLUSTER_TM_MEMORY:-1280m}"
START_TIMEOUT_S="${FLINK_CLUSTER_START_TIMEOUT_S:-90}"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() {
    sed -n '6,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -ge 1 ] || usage
COMMAND="$1"; shift
TASKMANAGERS=1
SLOTS=2
STOCK=0
CLUSTER_DIR="$REPO_ROOT/out/cluster"
PASSTHROUGH=()
while [ $# -gt 0 ]; do
    case "$1" in
        --taskmanagers) [ $# -ge 2 ] || usage; TASKMANAGERS="$2"; shift 2 ;;
        --slots) [ $# -ge 2 ] || usage; SLOTS="$2"; shift 2 ;;
        --dir) [ $# -ge 2 ] || usage; CLUSTER_DIR="$2"; shift 2 ;;
        --stock) STOCK=1; shift ;;
        --) shift; PASSTHROUGH=("$@"); break ;;
        *) if [ "$COMMAND" = flink ]; then PASSTHROUGH=("$@"); break; fi
           log "unknown argument: $1"; usage ;;
    esac
done
[[ "$TASKMANAGERS" =~ ^[1-9][0-9]*$ ]] || die "--taskmanagers must be a positive integer, not '$TASKMANAGERS'"
[[ "$SLOTS" =~ ^[1-9][0-9]*$ ]] || die "--slots must be a positive integer, not '$SLOTS'"
if [ "$COMMAND" = start ]; then mkdir -p "$CLUSTER_DIR"; fi
if [ -d "$CLUSTER_DIR" ]; then CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"; fi
CONF_DIR="$CLUSTER_DIR/conf"
LOG_DIR="$CLUSTER_DIR/log"
PID_DIR="$CLUSTER_DIR/pids"
LIB_DIR="$CLUSTER_DIR/lib"
STATE="$CLUSTER_DIR/cluster.env"

[ -x "$PYTHON" ] || die "no venv at $REPO_ROOT/.venv: run tools/setup.sh first"
FLINK_HOME="$("$PYTHON" -c 'import os, pyflink; print(os.path.dirname(os.path.abspath(pyflink.__file__)))')" \
    || die "the venv has no pyflink (apache-flink): run tools/setup.sh first"
[ -x "$FLINK_HOME/bin/jobmanager.sh" ] || die "$FLINK_HOME/bin has no jobmanager.sh: the apache-flink wheel lacks its distribution"
command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] || die "no java on PATH and no JAVA_HOME: Flink needs Java 11 or 17"

# Is pid alive and one of this cluster's JVMs (not a reused pid)?
ours() {
    local pid="$1"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$CONF_DIR"
}

# Every descendant of the given pids (Python workers of the TaskManagers).
descendants() {
    local pid child
    for pid in "$@"; do
        for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
            echo "$child"
            descendants "$child"
        done
    done
}

rest_answers() {  # rest_answers URL -> prints the /overview JSON, fails if no answer
    "$PYTHON" -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1] + "/overview", timeout=3).read().decode())
except Exception:
    sys.exit(1)' "$1" 2>/dev/null
}

load_state() {
    [ -f "$STATE" ] || return 1
    # shellcheck disable=SC1090
    source "$STATE"
}

live_pids() {  # the recorded pids that still run as this cluster's JVMs
    local pid
    for pid in ${JM_PID:-} ${TM_PIDS:-}; do
        if ours "$pid"; then echo "$pid"; fi
    done
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

write_conf() {  # write_conf REST_PORT RPC_PORT
    rm -rf "$CONF_DIR"
    cp -r "$FLINK_HOME/conf" "$CONF_DIR"
    printf 'localhost\n' > "$CONF_DIR/masters"
    : > "$CONF_DIR/workers"
    for _ in $(seq "$TASKMANAGERS"); do printf 'localhost\n' >> "$CONF_DIR/workers"; done
    # One flat config.yaml: the wheel's settings (its JVM options) with this
    # cluster's on top; flat keys only, so none is given twice.
    "$PYTHON" - "$FLINK_HOME/conf/config.yaml" "$CONF_DIR/config.yaml" <<EOF
import json, os, sys, yaml

def flat(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value

with open(sys.argv[1], encoding="utf-8") as source:
    settings = dict(flat(yaml.safe_load(source) or {}))
settings.update({
    "jobmanager.rpc.address": "localhost",
    "jobmanager.bind-host": "localhost",
    "jobmanager.rpc.port": $2,
    "jobmanager.memory.process.size": "$JM_MEMORY",
    "taskmanager.host": "localhost",
    "taskmanager.bind-host": "localhost",
    "taskmanager.numberOfTaskSlots": $SLOTS,
    "taskmanager.memory.process.size": "$TM_MEMORY",
    "rest.address": "localhost",
    "rest.bind-address": "localhost",
    "rest.port": $1,
    "parallelism.default": 1,
    "env.log.dir": "$LOG_DIR",
    "env.pid.dir": "$PID_DIR",
    "execution.checkpointing.dir": "file://$CLUSTER_DIR/checkpoints",
    "execution.checkpointing.savepoint-dir": "file://$CLUSTER_DIR/savepoints",
    # Every TaskManager of this cluster runs on this host, so an absolute
    # SQLite journal path is shared by all of them (the runtime refuses an
    # SQLite journal on a cluster without this: runtime/flink/journal_placement.py).
    "agent.journal.sqlite.shared": True,
})
if not $STOCK:
    settings.update({
        # pemja from lib/ (see link_lib), not from each job's flink-python jar.
        "classloader.parent-first-patterns.additional": "pemja.",
        # The client (flink run -py) and the workers run the venv's Python.
        "python.executable": "$PYTHON",
        "python.client.executable": "$PYTHON",
    })
extra = json.loads(os.environ.get("FLINK_CLUSTER_CONF") or "{}")
if not isinstance(extra, dict):
    sys.exit("FLINK_CLUSTER_CONF must be a JSON object of flat config.yaml settings")
settings.update(extra)
with open(sys.argv[2], "w", encoding="utf-8") as sink:
    sink.write("# Written by tools/cluster.sh start; rewritten at every start.\n")
    yaml.safe_dump(settings, sink, default_flow_style=False, sort_keys=True, width=100000)
EOF
}

flink_env() {  # the environment the distribution's scripts need for this cluster
    export FLINK_CONF_DIR="$CONF_DIR" FLINK_LOG_DIR="$LOG_DIR" FLINK_PID_DIR="$PID_DIR" FLINK_IDENT_STRING=cluster
}

# The wheel's lib/ plus opt/flink-python: thread mode loads libpython into
# the classloader of pemja's classes, and the JVM lets one classloader load
# a native library; from lib/ (and parent-first, see config.yaml) pemja is
# loaded once per TaskManager, not once per job, so a second thread-mode
# job on the same TaskManager does not fail with "loadedLibraryNames".
link_lib() {
    rm -rf "$LIB_DIR"
    mkdir -p "$LIB_DIR"
    ln -s "$FLINK_HOME"/lib/*.jar "$LIB_DIR"/
    [ "$STOCK" = 1 ] && return 0  # as shipped: flink-python only in opt/
    ln -s "$FLINK_HOME"/opt/flink-python-*.jar "$LIB_DIR"/ || die "no flink-python jar in $FLINK_HOME/opt"
}

cmd_status() {
    if ! load_state; then
        log "not running (no state file $STATE)"
        return 3
    fi
    local alive
    alive="$(live_pids | xargs)"
    echo "rest: $REST_URL"
    echo "conf: $CONF_DIR"
    echo "processes: ${alive:-none} (recorded: JobManager ${JM_PID:-?}, TaskManagers ${TM_PIDS:-?})"
    local overview
    if overview="$(rest_answers "$REST_URL")"; then
        echo "answers: yes $overview"
        return 0
    fi
    echo "answers: no"
    return 3
}

cmd_stop() {
    if ! load_state; then
        log "not running (no state file $STATE)"
        return 0
    fi
    local pids workers pid
    pids="$(live_pids | xargs)"
    if [ -z "$pids" ]; then
        log "not running (recorded processes ${JM_PID:-} ${TM_PIDS:-} are gone)"
        rm -f "$STATE" "$PID_DIR"/*.pid
        return 0
    fi
    workers="$(descendants $pids | xargs)"
    log "stopping JobManager and TaskManagers: $pids"
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 150); do  # up to 15 s, then SIGKILL
        [ -z "$(live_pids)" ] && break
        sleep 0.1
    done
    pids="$(live_pids | xargs)"
    if [ -n "$pids" ]; then
        log "still running after 15 s, killing: $pids"
        kill -KILL $pids 2>/dev/null || true
    fi
    # Python workers the TaskManagers started and left behind.
    for pid in $workers; do
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    rm -f "$STATE" "$PID_DIR"/*.pid
    log "stopped"
}

cmd_start() {
    if load_state; then
        if [ -n "$(live_pids)" ]; then
            if [ "${TASKMANAGERS_STARTED:-}" != "$TASKMANAGERS" ] || [ "${SLOTS_STARTED:-}" != "$SLOTS" ] \
                || [ "${STOCK_STARTED:-0}" != "$STOCK" ]; then
                die "a cluster with ${TASKMANAGERS_STARTED:-?} TaskManager(s) x ${SLOTS_STARTED:-?} slot(s) (stock: ${STOCK_STARTED:-0}) already runs at $REST_URL; stop it first (tools/cluster.sh stop --dir $CLUSTER_DIR)"
            fi
            log "already running at $REST_URL"
            echo "$REST_URL"
            return 0
        fi
        log "stale state (processes gone): starting afresh"
        rm -f "$STATE"
    fi
    mkdir -p "$LOG_DIR" "$PID_DIR" "$CLUSTER_DIR/checkpoints" "$CLUSTER_DIR/savepoints"
    rm -f "$PID_DIR"/*.pid
    local rest_port rpc_port started_ms
    rest_port="$(free_port)"
    rpc_port="$(free_port)"
    while [ "$rpc_port" = "$rest_port" ]; do rpc_port="$(free_port)"; done
    write_conf "$rest_port" "$rpc_port"
    link_lib
    flink_env
    export FLINK_LIB_DIR="$LIB_DIR"
    started_ms=$(date +%s%3N)
    log "starting 1 JobManager and $TASKMANAGERS TaskManager(s) x $SLOTS slot(s) (conf $CONF_DIR, logs $LOG_DIR)"
    "$FLINK_HOME/bin/jobmanager.sh" start >/dev/null
    for _ in $(seq "$TASKMANAGERS"); do "$FLINK_HOME/bin/taskmanager.sh" start >/dev/null; done
    JM_PID="$(xargs < "$PID_DIR/flink-cluster-standalonesession.pid")" || die "the JobManager did not start (see $LOG_DIR)"
    TM_PIDS="$(xargs < "$PID_DIR/flink-cluster-taskexecutor.pid")" || die "no TaskManager started (see $LOG_DIR)"
    REST_URL="http://localhost:$rest_port"
    cat > "$STATE" <<EOF
# Written by tools/cluster.sh start; read by stop and status.
REST_URL=$REST_URL
REST_PORT=$rest_port
RPC_PORT=$rpc_port
CONF_DIR=$CONF_DIR
LOG_DIR=$LOG_DIR
FLINK_HOME=$FLINK_HOME
JM_PID=$JM_PID
TM_PIDS="$TM_PIDS"
TASKMANAGERS_STARTED=$TASKMANAGERS
SLOTS_STARTED=$SLOTS
STOCK_STARTED=$STOCK
EOF
    local want=$((TASKMANAGERS * SLOTS)) deadline overview=""
    deadline=$(( $(date +%s) + START_TIMEOUT_S ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if [ "$(live_pids | wc -l)" -lt $((1 + TASKMANAGERS)) ]; then
            break  # a process died: no point waiting
        fi
        if overview="$(rest_answers "$REST_URL")" \
            && [ "$(printf '%s' "$overview" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["slots-total"])')" = "$want" ]; then
            log "up at $REST_URL: $want slot(s) in $(( ($(date +%s%3N) - started_ms) / 1000 )).$(( ($(date +%s%3N) - started_ms) % 1000 / 100 )) s"
            echo "$REST_URL"
            return 0
        fi
        sleep 0.5
    done
    log "the cluster did not come up with $want slot(s) within ${START_TIMEOUT_S} s; last log lines:"
    tail -n 20 "$LOG_DIR"/*.log "$LOG_DIR"/*.out 2>/dev/null >&2 || true
    cmd_stop
    exit 1
}

cmd_flink() {
    load_state || die "no cluster running (no state file $STATE): tools/cluster.sh start first"
    flink_env
    exec "$FLINK_HOME/bin/flink" "${PASSTHROUGH[@]}"
}

case "$COMMAND" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    flink) cmd_flink ;;
    -h|--help|help) usage ;;
    *) log "unknown command: $COMMAND"; usage ;;
esac
