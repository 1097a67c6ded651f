# shellcheck shell=bash
# Sourced by tools/setup.sh and tools/test_matrix.sh: find a Python X.Y.
#
#   find_python 3.12    # prints the interpreter's real path, or returns 1
#
# Candidates, first that runs and reports X.Y wins:
#   1. $FLINK_AGENTS_PYTHON3_12 (for 3.12; likewise 3_10, 3_11): when set it
#      is the only candidate, and a wrong one is an error, not skipped;
#   2. python3.12 on PATH (a pyenv shim for a version not selected fails to
#      run and is skipped);
#   3. pyenv's installs, newest patch first: $PYENV_ROOT (default ~/.pyenv)
#      /versions/3.12.*/bin/python3.12;
#   4. /usr/local/bin/python3.12, /usr/bin/python3.12.
# The supported Pythons are pyproject.toml's requires-python.

_python_is() {  # $1 runs and is Python $2
    [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$2" ]
}

find_python() {
    local want="$1" var candidate root
    var="FLINK_AGENTS_PYTHON${want//./_}"
    if [ -n "${!var:-}" ]; then
        if _python_is "${!var}" "$want"; then
            "${!var}" -c 'import sys; print(sys.executable)'
            return 0
        fi
        printf 'find_python: %s=%s is not a working Python %s\n' "$var" "${!var}" "$want" >&2
        return 1
    fi
    root="${PYENV_ROOT:-$HOME/.pyenv}"
    local candidates=("python$want")
    while IFS= read -r dir; do
        [ -n "$dir" ] && candidates+=("$dir/bin/python$want")
    done < <(find "$root/versions" -mindepth 1 -maxdepth 1 -name "$want.*" 2>/dev/null | sort -V -r)
    candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want")
    for candidate in "${candidates[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1 && _python_is "$candidate" "$want"; then
            "$candidate" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}
