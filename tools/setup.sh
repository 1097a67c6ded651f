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
# Python 3.10 to 3.12 (pyproject.toml's requires-python). The venv takes
# $FLINK_AGENTS_VENV_PYTHON (e.g. 3.12) if set, else the first of 3.11 (the
# version the whole suite runs on), 3.12, 3.10 found (tools/find_python.sh).
# shellcheck source=tools/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"
SUPPORTED_PYTHONS="3.10 3.11 3.12"
python_minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

if [ -x "$VENV/bin/python" ]; then
    step "venv exists: $VENV ($("$VENV/bin/python" --version 2>&1))"
else
    PYTHON=""
    for want in ${FLINK_AGENTS_VENV_PYTHON:-3.11 3.12 3.10}; do
        case " $SUPPORTED_PYTHONS " in
            *" $want "*) ;;
            *) die "FLINK_AGENTS_VENV_PYTHON=$want: supported are $SUPPORTED_PYTHONS" ;;
        esac
        if PYTHON="$(find_python "$want")"; then break; fi
        PYTHON=""
    done
    [ -n "$PYTHON" ] || die "no Python ${FLINK_AGENTS_VENV_PYTHON:-3.10, 3.11 or 3.12} found (tools/find_python.sh says where it looks); install one"
    step "creating venv with $PYTHON ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv' failed (on Debian/Ubuntu install the python3-venv package)"
fi

case " $SUPPORTED_PYTHONS " in
    *" $(python_minor "$VENV/bin/python") "*) ;;
    *) die "$VENV uses $("$VENV/bin/python" --version 2>&1); Python 3.10, 3.11 or 3.12 is required (delete .venv and rerun)" ;;
esac

step "upgrading pip"
"$VENV/bin/python" -m pip install -qq --upgrade pip </dev/null

# The package accepts apache-flink 1.20 to 2.3; this venv runs the default
# (the version the whole suite is tested on; tools/test_matrix.sh the others).
FLINK_VERSION="${FLINK_AGENTS_FLINK_VERSION:-2.3.0}"
# This project's distribution was called flink-agents before it took a name of
# its own; a venv from then has it, and Apache's flink-agents is that name too.
# Either owns flink_agents beside this one: removed first.
# (pip runs from /: in the clone it would also see the clone's own metadata.)
if (cd / && "$VENV/bin/python" -m pip show -qq flink-agents >/dev/null 2>&1); then
    step "removing the flink-agents distribution (it owns flink_agents too: docs/compatibility.md)"
    (cd / && "$VENV/bin/python" -m pip uninstall -qq -y flink-agents </dev/null)
fi
# The old name's build metadata in the clone: on sys.path in the tests
# (pytest.ini's pythonpath), it would answer for a flink-agents install.
rm -rf "$REPO_ROOT/flink_agents.egg-info"
step "installing flink-agents-runtime (editable, with test extras) on apache-flink $FLINK_VERSION"
(cd "$REPO_ROOT" && "$VENV/bin/python" -m pip install -qq -e '.[test]' "apache-flink==$FLINK_VERSION" </dev/null)

step "ready: $VENV"
