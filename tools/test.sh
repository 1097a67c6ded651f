#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/setup.sh
source "$REPO_ROOT/tools/setup.sh"

cd "$REPO_ROOT"
exec "$REPO_ROOT/.venv/bin/python" -m pytest -q "$@"
