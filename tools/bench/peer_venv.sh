#!/usr/bin/env bash
# A side venv holding Flink Agents 0.3.1 (Apache's package) for the
# per-record comparison of tools/bench/per_call.py. Both packages are named
# flink_agents, so they never share a venv. 0.3.1 imports pyflink at import
# time; rather than install a second Flink, the venv reads pyflink (and what
# it needs) from this repo's .venv, after its own site-packages.
#
#   bash tools/bench/peer_venv.sh [DIR]       # default /tmp/flink-agents-031
#   .venv/bin/python tools/bench/per_call.py --peer-python DIR/bin/python
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-/tmp/flink-agents-031}"
main_site="$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
python3.11 -m venv "$dir"
FLINK_AGENTS_SKIP_JAR_DOWNLOAD=1 "$dir/bin/pip" install -q --no-deps flink-agents==0.3.1
# Its pinned dependencies (the ones its local runner imports).
"$dir/bin/pip" install -q pydantic==2.11.4 pyyaml==6.0.2 docstring-parser==0.16 importlib_resources cloudpickle \
    typing-extensions
peer_site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$main_site" > "$peer_site/zz_pyflink_from_repo_venv.pth"
(cd / && "$dir/bin/python" -I -c 'import flink_agents, pyflink; print("flink_agents from", flink_agents.__file__)')
echo "peer interpreter: $dir/bin/python"
