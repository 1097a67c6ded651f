"""Instructions per record and per model call, this tree against a git ref.

Timings on these machines move by a tenth from run to run (a shared VM's
CPU), more than most single changes to the record path save. Counting
instructions does not: valgrind's callgrind counts every instruction the
interpreter executes, the same on every run for the same code and input
(``PYTHONHASHSEED=0``). So a change that removes work shows here as a
smaller count, measured side by side, whatever the machine does meanwhile.
Instructions are not time (cache misses and branch mispredictions are not
counted), so the figures of record stay ``per_call.py``'s; this one tells
whether a change removed work.

Two workloads (``_instructions_worker.py``), each run at N and 3N and
differenced, so start-up and imports cancel out:

- **per record**: the trivial agent of ``per_call.py``'s per-record row
  (read memory, write memory, send one output) on 31 keys, local runner;
- **per call**: the review-analysis agent on the local runner, its model's
  reply canned (the SDK's ``create`` answers at once, no HTTP): the
  runtime's part of a model call.

Both run without journal pruning, whose interval is wall time (valgrind
stretches it fiftyfold, a loaded machine more): with it, the per-call count
moved by up to 9 % between runs; without it, two runs of 100 calls differ
by 20,000 of 5.2 billion instructions, and the per-record ones by 0.01 %.

The ref is checked out in a temporary git worktree (removed afterwards).
A run takes three to five minutes on 2 cores (valgrind runs Python about
fifty times slower).
Without valgrind the run says so and exits 0.

    .venv/bin/python tools/bench/instructions.py --base HEAD~1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Tuple

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "_instructions_worker.py"
PYTHON = REPO / ".venv" / "bin" / "python"
_COLLECTED = re.compile(r"Collected : (\d+)")


def compile_tree(tree: Path) -> None:
    """Byte-compile the tree's package first: otherwise the first counted
    run compiles it and the next reads the cache, and the difference of
    the two carries the compilation (a fresh worktree has no cache)."""
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", str(tree / "flink_agents")], check=True,
                   stdout=subprocess.DEVNULL)


def instructions(tree: Path, kind: str, count: int) -> int:
    """Instructions callgrind counted for one worker run over ``count``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(PYTHON), str(WORKER), kind, str(count)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800,
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the {kind} worker failed in {tree} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1))


def per_unit(tree: Path, kind: str, count: int) -> float:
    """Instructions per record (or call): runs over ``count`` and
    ``3 * count``, differenced."""
    return (instructions(tree, kind, 3 * count) - instructions(tree, kind, count)) / (2 * count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD", help="the git ref to compare this tree with (default: %(default)s)")
    parser.add_argument("--records", type=int, default=1000,
                        help="records of the smaller per-record run (the larger: 3x; default: %(default)s)")
    parser.add_argument("--calls", type=int, default=100,
                        help="calls of the smaller per-call run (the larger: 3x; default: %(default)s)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed here (Debian: apt-get install valgrind)")
        return 0
    base_dir = Path(tempfile.mkdtemp(prefix="flink-agents-base-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(base_dir), args.base],
                   check=True)
    try:
        sides = {f"base ({args.base})": base_dir, "this tree": REPO}
        for tree in sides.values():
            compile_tree(tree)
        jobs = [(name, tree, kind, count) for name, tree in sides.items()
                for kind, count in (("records", args.records), ("calls", args.calls))]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            counted = dict(zip(
                [(name, kind) for name, _, kind, _ in jobs],
                pool.map(lambda job: per_unit(job[1], job[2], job[3]), jobs),
            ))
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_dir)], check=False)
    print(f"instructions (callgrind, PYTHONHASHSEED=0), Python {sys.version.split()[0]}")
    base_name = f"base ({args.base})"
    for kind, unit in (("records", "record"), ("calls", "model call (canned reply)")):
        base, ours = counted[(base_name, kind)], counted[("this tree", kind)]
        print(f"per {unit:26}: base {base:>12,.0f}   this tree {ours:>12,.0f}   ratio {ours / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
