#!/usr/bin/env bash
# The Flink version matrix: for each extra apache-flink version, the engine
# tests and the mini-cluster e2e tests of the review job, a worker-crash
# failover and a callback round trip, each version in its own virtual
# environment. (The default version, the one .venv has, runs the whole suite
# through tools/test.sh.)
#
#   bash tools/test_matrix.sh                # 1.20.5 and 2.0.2
#   FLINK_MATRIX_VERSIONS="2.1.3" bash tools/test_matrix.sh
#   bash tools/test_matrix.sh -x             # extra arguments go to every pytest run
#
# Venvs are cached outside the clone, one per version, in
#   ${FLINK_AGENTS_VENV_CACHE:-$HOME/.cache/flink-agents/venvs}/apache-flink-<version>
# and reinstalled only when setup.py, the version, the interpreter or this
# script's install line changed (a stamp file holds their hash). The project
# itself is an editable install, re-pointed (no dependencies touched) when the
# venv was last used from another clone.
#
# Extras: apache-flink 1.x pins apache-beam < 2.49, hence protobuf < 4.24,
# which the mem0 extra (protobuf >= 5.29) cannot share: 1.x venvs get every
# test extra but mem0 (its tests skip). 2.x venvs get '.[test]'.
#
# Starts the throwaway PostgreSQL (tools/postgres.sh) for the failover test's
# postgres journal unless FLINK_AGENTS_POSTGRES_DSN is set. Prints each
# version's install and test wall times; exits non-zero if any run failed.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
VERSIONS="${FLINK_MATRIX_VERSIONS:-1.20.5 2.0.2}"
CACHE="${FLINK_AGENTS_VENV_CACHE:-$HOME/.cache/flink-agents/venvs}"
PYTHON="${FLINK_MATRIX_PYTHON:-python3.11}"
TIMEOUT_S="${FLINK_MATRIX_TIMEOUT_S:-900}"  # per pytest run
# The review job on the bundled sample (over the 2,700 shared reviews: the
# default version's whole suite only), a worker-crash failover, callbacks.
E2E_FILES=(tests/e2e/test_review_job_e2e.py::test_job_command_on_the_bundled_sample tests/e2e/test_failover_e2e.py tests/e2e/test_callbacks_e2e.py)
TEST_PINS=("pytest>=8" "pytest-timeout>=2.2" "pytest-xdist>=3.5")  # as setup.py's test extra
EXTRAS_1X="anthropic,ollama,tongyi,mcp,chroma,otel,pydantic-ai,openai-agents,langgraph,google-adk"  # every test extra but mem0 (see above)

log() { printf '[matrix] %s\n' "$*" >&2; }

command -v "$PYTHON" >/dev/null 2>&1 || { log "ERROR: $PYTHON not found (set FLINK_MATRIX_PYTHON)"; exit 2; }

install_spec() {  # the pip arguments for version $1
    case "$1" in
        1.*) echo "apache-flink==$1 -e $REPO_ROOT[$EXTRAS_1X] ${TEST_PINS[*]}" ;;
        *) echo "apache-flink==$1 -e $REPO_ROOT[test]" ;;
    esac
}

stamp_of() {  # what a venv for version $1 was built from (the clone's path aside)
    local spec
    spec="$(install_spec "$1")"
    {
        echo "version=$1"
        "$PYTHON" --version 2>&1
        echo "${spec//$REPO_ROOT/<repo>}"
        cat "$REPO_ROOT/setup.py"
    } | sha256sum | cut -d' ' -f1
}

ensure_venv() {  # create or reuse the venv of version $1; prints its python
    local version="$1" venv="$CACHE/apache-flink-$1" stamp want started
    stamp="$venv/.flink-agents-stamp"
    want="$(stamp_of "$version")"
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        local where
        # From /: run in the clone, `python -c` would find its flink_agents first.
        where="$(cd / && "$venv/bin/python" -c 'import flink_agents, os; print(os.path.dirname(os.path.dirname(os.path.abspath(flink_agents.__file__))))' 2>/dev/null)"
        if [ "$where" != "$REPO_ROOT" ]; then
            log "apache-flink $version: venv cached, re-pointing the editable install at $REPO_ROOT"
            "$venv/bin/python" -m pip install -qq --no-deps -e "$REPO_ROOT" </dev/null >&2 || return 1
        else
            log "apache-flink $version: venv cached ($venv)"
        fi
        echo "$venv/bin/python"
        return 0
    fi
    log "apache-flink $version: installing into $venv"
    started=$(date +%s)
    rm -rf "$venv" && mkdir -p "$CACHE" || return 1
    "$PYTHON" -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -qq --upgrade pip </dev/null >&2 || return 1
    # shellcheck disable=SC2046  # the spec is words
    "$venv/bin/python" -m pip install -qq $(install_spec "$version") </dev/null >&2 || return 1
    echo "$want" >"$stamp"
    log "apache-flink $version: installed in $(( $(date +%s) - started )) s, $(du -sh "$venv" | cut -f1)"
    echo "$venv/bin/python"
}

if [ -z "${FLINK_AGENTS_POSTGRES_DSN:-}" ]; then
    if dsn="$(bash "$REPO_ROOT/tools/postgres.sh")"; then
        export FLINK_AGENTS_POSTGRES_DSN="$dsn"
    else
        log "WARNING: tools/postgres.sh could not start PostgreSQL: the failover test's postgres case skips"
    fi
fi

failed=()
summary=()
for version in $VERSIONS; do
    started=$(date +%s)
    if ! python_bin="$(ensure_venv "$version")"; then
        log "apache-flink $version: ERROR: could not set up its venv"
        failed+=("$version:install")
        continue
    fi
    installed=$(date +%s)
    actual="$("$python_bin" -c 'from pyflink.version import __version__; print(__version__)')"
    [ "$actual" = "$version" ] || { log "apache-flink $version: ERROR: the venv has $actual"; failed+=("$version:venv"); continue; }
    runs=("-m not e2e -x" "${E2E_FILES[@]}")
    for run in "${runs[@]}"; do
        run_started=$(date +%s)
        if [[ "$run" == -m* ]]; then
            log "apache-flink $version: engine tests"
            timeout "$TIMEOUT_S" "$python_bin" -m pytest -q -p no:cacheprovider -m "not e2e" -x -n 2 "$@"
        else
            log "apache-flink $version: $run"
            timeout "$TIMEOUT_S" "$python_bin" -m pytest -q -p no:cacheprovider "$run" "$@"
        fi
        rc=$?
        label="${run#-m not e2e -x}"; label="${label:-engine}"
        summary+=("$version $(basename "$label" .py): rc=$rc $(( $(date +%s) - run_started )) s")
        [ "$rc" -eq 0 ] || failed+=("$version:$(basename "$label" .py)")
    done
    summary+=("$version total: $(( $(date +%s) - started )) s (venv $(( installed - started )) s, tests $(( $(date +%s) - installed )) s)")
done

printf '\n[matrix] wall times\n'
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    printf '[matrix] FAILED: %s\n' "${failed[*]}"
    exit 1
fi
printf '[matrix] all versions passed: %s\n' "$VERSIONS"
