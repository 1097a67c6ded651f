#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest.
# Starts a throwaway PostgreSQL (tools/postgres.sh) for the journal store tests
# and exports its DSN as FLINK_AGENTS_POSTGRES_DSN, unless that is already set.
# Without PostgreSQL those tests skip, except under CI=true, where it is an error.
# Under CI=true (or FLINK_AGENTS_MATRIX=1) the version matrix follows.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/setup.sh
source "$REPO_ROOT/tools/setup.sh"

cd "$REPO_ROOT"

# --- Chromium: the tests' only (the web inspector's browser test) -----------------
# Debian's chromium and its matching chromedriver, driven by selenium
# (tests/e2e/test_inspector_browser.py); no browser is downloaded.
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    step "chromium found: $(/usr/bin/chromium --version 2>/dev/null | head -n 1)"
elif command -v apt-get >/dev/null 2>&1; then
    step "chromium missing: installing chromium and chromium-driver"
    AS_ROOT_HINT="install Debian's chromium and chromium-driver yourself"
    as_root apt-get update -qq </dev/null >/dev/null
    as_root apt-get install -y -qq chromium chromium-driver </dev/null >/dev/null
    [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || die "chromium or chromedriver still missing after install"
else
    step "chromium missing and apt-get unavailable: the inspector's browser test will skip"
fi

# --- Flink Agents 0.3.1's source: the recorded 0.3.1 surfaces are checked against it --
# (tests/compat/test_recorded031_surfaces.py). Its source distribution from the
# package index, unpacked into the user's cache once; nothing of it is installed
# or imported. (pip prepares an sdist's metadata with its build backend, as any
# install from source does; its jar download is switched off.) Without it the
# check skips, saying why; under CI=true that is an error.
if [ -z "${FLINK_AGENTS_031_SOURCE:-}" ]; then
    source_031="${XDG_CACHE_HOME:-$HOME/.cache}/flink-agents/flink-agents-0.3.1"
    if [ ! -f "$source_031/flink_agents/__init__.py" ]; then
        step "fetching Flink Agents 0.3.1's source distribution into $source_031 (the compat tests read it)"
        download="$(mktemp -d)"
        if (cd / && FLINK_AGENTS_SKIP_JAR_DOWNLOAD=1 "$VENV/bin/python" -m pip download -qq --no-deps \
                --no-binary=:all: --no-build-isolation -d "$download" "flink-agents==0.3.1" </dev/null) \
            && tar -xzf "$download/flink_agents-0.3.1.tar.gz" -C "$download" \
            && [ -f "$download/flink_agents-0.3.1/flink_agents/__init__.py" ]; then
            mkdir -p "$(dirname "$source_031")"
            rm -rf "$source_031"
            mv "$download/flink_agents-0.3.1" "$source_031"
        fi
        rm -rf "$download"
    fi
    if [ -f "$source_031/flink_agents/__init__.py" ]; then
        export FLINK_AGENTS_031_SOURCE="$source_031"
    elif [ "${CI:-}" = "true" ]; then
        printf '[test] ERROR: could not fetch flink-agents 0.3.1 (see above); CI checks the recorded 0.3.1 surfaces\n' >&2
        exit 1
    else
        printf '[test] WARNING: could not fetch flink-agents 0.3.1 (see above); the recorded-surface check will skip\n' >&2
    fi
fi

if [ -z "${FLINK_AGENTS_POSTGRES_DSN:-}" ]; then
    if pg_dsn="$(bash "$REPO_ROOT/tools/postgres.sh")"; then
        export FLINK_AGENTS_POSTGRES_DSN="$pg_dsn"
        printf '[test] PostgreSQL journal tests use %s\n' "$pg_dsn"
    elif [ "${CI:-}" = "true" ]; then
        printf '[test] ERROR: tools/postgres.sh could not start PostgreSQL (see above); CI needs it\n' >&2
        exit 1
    else
        printf '[test] WARNING: tools/postgres.sh could not start PostgreSQL (see above); the PostgreSQL journal tests will skip\n' >&2
        export FLINK_AGENTS_POSTGRES_UNAVAILABLE="tools/postgres.sh could not start PostgreSQL (see its output before the tests)"
    fi
fi

# The version matrix (tools/test_matrix.sh: apache-flink 1.20.5 and 2.0.2, and
# Python 3.12, each in a cached venv) after the whole suite: under CI=true or
# FLINK_AGENTS_MATRIX=1, and only for a whole run (no pytest arguments);
# FLINK_AGENTS_MATRIX=0 skips it. Under CI=true a missing Python 3.12 fails it.
matrix="${FLINK_AGENTS_MATRIX:-}"
if [ -z "$matrix" ]; then
    [ "${CI:-}" = "true" ] && matrix=1 || matrix=0
fi
# The whole suite runs on two pytest-xdist workers: the e2e tests in two xdist
# groups (tests/conftest.py), each one test after another on one worker, so
# at most two mini-clusters run at once; the fast tests on both.
WHOLE_SUITE=(-n "${FLINK_AGENTS_TEST_WORKERS:-2}" --dist loadgroup --durations=25 -rfEs)
if [ "$#" -gt 0 ]; then
    exec "$REPO_ROOT/.venv/bin/python" -m pytest -q "$@"
fi
if [ "$matrix" != "1" ]; then
    exec "$REPO_ROOT/.venv/bin/python" -m pytest -q "${WHOLE_SUITE[@]}"
fi

started=$(date +%s)
"$REPO_ROOT/.venv/bin/python" -m pytest -q "${WHOLE_SUITE[@]}"
printf '[test] whole suite on apache-flink %s, %s: %d s\n' "$FLINK_VERSION" "$("$REPO_ROOT/.venv/bin/python" --version 2>&1)" "$(( $(date +%s) - started ))"
exec bash "$REPO_ROOT/tools/test_matrix.sh"
