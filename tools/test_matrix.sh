#!/usr/bin/env bash
# The version matrix, beside the whole suite tools/test.sh runs on .venv's
# Python (3.11) and apache-flink (2.3.0), each cell in its own virtual
# environment:
# - each extra apache-flink version, on Python 3.11: the engine tests and the
#   mini-cluster e2e tests of the review job, a worker-crash failover and a
#   callback round trip;
# - each extra Python, on apache-flink 2.3.0: the engine tests and the core
#   e2e tests (the review job, and exact replay after a worker kill).
#
#   bash tools/test_matrix.sh                # Flink 1.20.5 and 2.0.2; Python 3.12
#   FLINK_MATRIX_VERSIONS="2.1.3" FLINK_MATRIX_PYTHONS="3.10 3.12" bash tools/test_matrix.sh
#   FLINK_MATRIX_VERSIONS="" bash tools/test_matrix.sh   # the Pythons only
#   bash tools/test_matrix.sh -x             # extra arguments go to every pytest run
#
# Interpreters are found by tools/find_python.sh (python3.12 on PATH, pyenv's
# versions, /usr/bin; $FLINK_AGENTS_PYTHON3_12 overrides). A Python of the
# matrix that is missing fails the run under CI=true (it is expected there)
# and is skipped with a warning otherwise.
#
# Venvs are cached outside the clone, one per cell, in
#   ${FLINK_AGENTS_VENV_CACHE:-$HOME/.cache/flink-agents/venvs}/apache-flink-<version>[-py<X.Y>]
# and reinstalled only when pyproject.toml, the versions, the interpreter or
# this script's install line changed (a stamp file holds their hash). The
# project itself is an editable install, re-pointed (no dependencies touched)
# when the venv was last used from another clone.
#
# Extras: apache-flink 1.x pins apache-beam < 2.49, hence protobuf < 4.24,
# which the mem0 extra (protobuf >= 5.29) cannot share: 1.x venvs get every
# test extra but mem0 (its tests skip). The others get '.[test]' (on Python
# 3.10 without google-adk, which needs 3.11: its tests skip).
#
# Starts the throwaway PostgreSQL (tools/postgres.sh) for the failover test's
# postgres journal unless FLINK_AGENTS_POSTGRES_DSN is set. Prints each
# cell's install and test wall times; exits non-zero if any run failed.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
# shellcheck source=tools/find_python.sh
source "$REPO_ROOT/tools/find_python.sh"
VERSIONS="${FLINK_MATRIX_VERSIONS-1.20.5 2.0.2}"
PYTHONS="${FLINK_MATRIX_PYTHONS-3.12}"
DEFAULT_FLINK="${FLINK_AGENTS_FLINK_VERSION:-2.3.0}"  # as tools/setup.sh
DEFAULT_PYTHON="3.11"
CACHE="${FLINK_AGENTS_VENV_CACHE:-$HOME/.cache/flink-agents/venvs}"
TIMEOUT_S="${FLINK_MATRIX_TIMEOUT_S:-900}"  # per pytest run
# Flink versions: the review job on the bundled sample (over the 2,700 shared
# reviews: the default version's whole suite only), a worker-crash failover,
# callbacks.
FLINK_E2E_FILES=(tests/e2e/test_review_job_e2e.py::test_job_command_on_the_bundled_sample tests/e2e/test_failover_e2e.py tests/e2e/test_callbacks_e2e.py)
# Pythons: the review job, and exact replay (asyncio branches, a worker killed
# inside journaled calls, a checkpoint restore).
PYTHON_E2E_FILES=(tests/e2e/test_review_job_e2e.py::test_job_command_on_the_bundled_sample tests/e2e/test_exact_replay_e2e.py)
TEST_PINS=("pytest>=8,<9.2" "pytest-timeout>=2.2" "pytest-xdist>=3.5" "setuptools>=77")  # as pyproject.toml's test extra
EXTRAS_1X="anthropic,ollama,tongyi,mcp,chroma,otel,pydantic-ai,openai-agents,langgraph,google-adk"  # every test extra but mem0 (see above)

log() { printf '[matrix] %s\n' "$*" >&2; }

# The default Python's interpreter: $FLINK_MATRIX_PYTHON (a command) if set.
if [ -n "${FLINK_MATRIX_PYTHON:-}" ]; then
    command -v "$FLINK_MATRIX_PYTHON" >/dev/null 2>&1 || { log "ERROR: FLINK_MATRIX_PYTHON=$FLINK_MATRIX_PYTHON not found"; exit 2; }
    DEFAULT_PYTHON="$("$FLINK_MATRIX_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
fi

interpreter() {  # the interpreter for Python $1, or return 1
    if [ -n "${FLINK_MATRIX_PYTHON:-}" ] && [ "$1" = "$DEFAULT_PYTHON" ]; then
        command -v "$FLINK_MATRIX_PYTHON"
    else
        find_python "$1"
    fi
}

install_spec() {  # the pip arguments for apache-flink $1
    case "$1" in
        1.*) echo "apache-flink==$1 -e $REPO_ROOT[$EXTRAS_1X] ${TEST_PINS[*]}" ;;
        *) echo "apache-flink==$1 -e $REPO_ROOT[test]" ;;
    esac
}

venv_of() {  # the cached venv of apache-flink $1 on Python $2
    if [ "$2" = "$DEFAULT_PYTHON" ]; then echo "$CACHE/apache-flink-$1"; else echo "$CACHE/apache-flink-$1-py$2"; fi
}

stamp_of() {  # what a venv for apache-flink $1 on interpreter $2 was built from (the clone's path aside)
    local spec
    spec="$(install_spec "$1")"
    {
        echo "version=$1"
        echo "python=$2"
        "$2" --version 2>&1
        echo "${spec//$REPO_ROOT/<repo>}"
        cat "$REPO_ROOT/pyproject.toml"
    } | sha256sum | cut -d' ' -f1
}

ensure_venv() {  # create or reuse the venv of apache-flink $1 on interpreter $3 (Python $2); prints its python
    local version="$1" venv stamp want started python="$3"
    venv="$(venv_of "$1" "$2")"
    stamp="$venv/.flink-agents-stamp"
    want="$(stamp_of "$version" "$python")"
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        local where
        # From /: run in the clone, `python -c` would find its flink_agents first.
        where="$(cd / && "$venv/bin/python" -c 'import flink_agents, os; print(os.path.dirname(os.path.dirname(os.path.abspath(flink_agents.__file__))))' 2>/dev/null)"
        if [ "$where" != "$REPO_ROOT" ]; then
            log "$venv: cached, re-pointing the editable install at $REPO_ROOT"
            "$venv/bin/python" -m pip install -qq --no-deps -e "$REPO_ROOT" </dev/null >&2 || return 1
        else
            log "$venv: cached"
        fi
        echo "$venv/bin/python"
        return 0
    fi
    log "apache-flink $version on Python $2: installing into $venv"
    started=$(date +%s)
    rm -rf "$venv" && mkdir -p "$CACHE" || return 1
    "$python" -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -qq --upgrade pip </dev/null >&2 || return 1
    # shellcheck disable=SC2046  # the spec is words
    "$venv/bin/python" -m pip install -qq $(install_spec "$version") </dev/null >&2 || return 1
    echo "$want" >"$stamp"
    log "apache-flink $version on Python $2: installed in $(( $(date +%s) - started )) s, $(du -sh "$venv" | cut -f1)"
    echo "$venv/bin/python"
}

# FLINK_AGENTS_POSTGRES_UNAVAILABLE set (as tools/test.sh sets it): none started, those tests skip.
if [ -z "${FLINK_AGENTS_POSTGRES_DSN:-}" ] && [ -z "${FLINK_AGENTS_POSTGRES_UNAVAILABLE:-}" ]; then
    if dsn="$(bash "$REPO_ROOT/tools/postgres.sh")"; then
        export FLINK_AGENTS_POSTGRES_DSN="$dsn"
    else
        log "WARNING: tools/postgres.sh could not start PostgreSQL: the failover test's postgres case skips"
    fi
fi

failed=()
skipped=()
summary=()
cells=()  # "<apache-flink> <python> <which e2e files>"
for version in $VERSIONS; do cells+=("$version $DEFAULT_PYTHON flink"); done
for python in $PYTHONS; do cells+=("$DEFAULT_FLINK $python python"); done
for cell in "${cells[@]}"; do
    read -r version python kind <<<"$cell"
    name="apache-flink $version on Python $python"
    tag="$version/py$python"
    started=$(date +%s)
    if ! interpreter_bin="$(interpreter "$python")"; then
        if [ "${CI:-}" = "true" ]; then
            log "$name: ERROR: no Python $python found (tools/find_python.sh: python$python on PATH, \$PYENV_ROOT/versions/$python.*, /usr/local/bin, /usr/bin; or set FLINK_AGENTS_PYTHON${python//./_}); CI expects it"
            failed+=("$tag:no-python")
        else
            log "$name: WARNING: no Python $python found (set FLINK_AGENTS_PYTHON${python//./_}): skipped"
            skipped+=("$tag")
        fi
        continue
    fi
    if ! python_bin="$(ensure_venv "$version" "$python" "$interpreter_bin")"; then
        log "$name: ERROR: could not set up its venv"
        failed+=("$tag:install")
        continue
    fi
    installed=$(date +%s)
    actual="$("$python_bin" -c 'import sys; from pyflink.version import __version__; print(__version__, "%d.%d" % sys.version_info[:2])')"
    [ "$actual" = "$version $python" ] || { log "$name: ERROR: the venv has apache-flink and Python $actual"; failed+=("$tag:venv"); continue; }
    if [ "$kind" = "flink" ]; then e2e=("${FLINK_E2E_FILES[@]}"); else e2e=("${PYTHON_E2E_FILES[@]}"); fi
    for run in engine "${e2e[@]}"; do
        run_started=$(date +%s)
        log "$name: $run"
        if [ "$run" = "engine" ]; then
            timeout "$TIMEOUT_S" "$python_bin" -m pytest -q -p no:cacheprovider -m "not e2e" -x -n 2 "$@"
        else
            timeout "$TIMEOUT_S" "$python_bin" -m pytest -q -p no:cacheprovider "$run" "$@"
        fi
        rc=$?
        label="$(basename "$run" .py)"
        summary+=("$tag $label: rc=$rc $(( $(date +%s) - run_started )) s")
        [ "$rc" -eq 0 ] || failed+=("$tag:$label")
    done
    summary+=("$tag total: $(( $(date +%s) - started )) s (venv $(( installed - started )) s, tests $(( $(date +%s) - installed )) s)")
done

printf '\n[matrix] wall times\n'
[ "${#summary[@]}" -eq 0 ] || printf '  %s\n' "${summary[@]}"
[ "${#skipped[@]}" -eq 0 ] || printf '[matrix] SKIPPED (no such Python): %s\n' "${skipped[*]}"
if [ "${#failed[@]}" -gt 0 ]; then
    printf '[matrix] FAILED: %s\n' "${failed[*]}"
    exit 1
fi
printf '[matrix] every cell run passed: apache-flink %s on Python %s; Python %s on apache-flink %s\n' \
    "${VERSIONS:-(none)}" "$DEFAULT_PYTHON" "${PYTHONS:-(none)}" "$DEFAULT_FLINK"
