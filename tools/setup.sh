#!/usr/bin/env bash
# Prepare everything needed to run flink_agents jobs and tests:
#   Java 17 (for the PyFlink mini-cluster), a Python venv in .venv, and the
#   package installed in editable mode with its test extras.
# Idempotent; safe to run from any directory and to run repeatedly.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_ROOT/.venv"
export DEBIAN_FRONTEND=noninteractive
export PIP_DISABLE_PIP_VERSION_CHECK=1

step() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

AS_ROOT_HINT="install Java 17 yourself"
# shellcheck source=tools/as_root.sh
source "$(dirname "${BASH_SOURCE[0]}")/as_root.sh"

# --- Java ---------------------------------------------------------------------
if command -v java >/dev/null 2>&1; then
    step "java found: $(java -version 2>&1 | head -n 1)"
else
    command -v apt-get >/dev/null 2>&1 \
        || die "java is missing and apt-get is unavailable; install a Java 17 runtime"
    step "java missing: installing openjdk-17-jre-headless"
    as_root apt-get update -qq </dev/null >/dev/null
    as_root apt-get install -y -qq openjdk-17-jre-headless </dev/null >/dev/null
    command -v java >/dev/null 2>&1 || die "java still not on PATH after install"
    step "java installed: $(java -version 2>&1 | head -n 1)"
fi

if [ -z "${JAVA_HOME:-}" ]; then
    java_bin="$(readlink -f "$(command -v java)")"
    JAVA_HOME="$(dirname "$(dirname "$java_bin")")"
    export JAVA_HOME
    step "JAVA_HOME set to $JAVA_HOME"
else
    step "JAVA_HOME is $JAVA_HOME"
fi

# --- Python venv ----------------------------------------------------------------
if [ -x "$VENV/bin/python" ]; then
    step "venv exists: $VENV ($("$VENV/bin/python" --version 2>&1))"
else
    PYTHON=""
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" --version >/dev/null 2>&1; then
            PYTHON="$candidate"
            break
        fi
    done
    [ -n "$PYTHON" ] || die "no python3 found; install Python 3.11"
    if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
        die "$PYTHON is $("$PYTHON" --version 2>&1); Python 3.11 is required (the version tested: docs/compatibility.md)"
    fi
    step "creating venv with $PYTHON ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv' failed (on Debian/Ubuntu install the python3-venv package)"
fi

"$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || die "$VENV uses $("$VENV/bin/python" --version 2>&1); Python 3.11 is required (delete .venv and rerun)"

step "upgrading pip"
"$VENV/bin/python" -m pip install -qq --upgrade pip </dev/null

# The package accepts apache-flink 1.20 to 2.3; this venv runs the default
# (the version the whole suite is tested on; tools/test_matrix.sh the others).
FLINK_VERSION="${FLINK_AGENTS_FLINK_VERSION:-2.3.0}"
step "installing flink-agents (editable, with test extras) on apache-flink $FLINK_VERSION"
(cd "$REPO_ROOT" && "$VENV/bin/python" -m pip install -qq -e '.[test]' "apache-flink==$FLINK_VERSION" </dev/null)

step "ready: $VENV"
