"""Process mode with bundles larger than one: do records pending at a
checkpoint finish after a restore from it?

flink-python 2.3 (process mode) receives the timers a Python function
registers on the Beam timer channel; ``BeamPythonFunctionRunner`` turns
each into a ``TimerRegistrationAction`` queued as a mailbox mail
("PythonTimerRegistration"). ``prepareSnapshotPreBarrier`` finishes the
bundle (``invokeFinishBundle`` -> ``flush``: the registrations are received)
but does not apply them (only ``advanceWatermark`` calls
``drainUnregisteredTimers``), so the snapshot holds the keyed state the
bundle wrote and not the timers it registered. The agent operator's timers
are what resume a restored key's pending records.

One job (job 1) runs the review-analysis agent against a scripted model
that holds every request: each key's one record stays pending. Records of
``--keys`` new keys arrive one file at a time, ``--gap-ms`` apart, while
checkpoints are taken every ``--checkpoint-ms``. Job 1 is cancelled, and
``--restores`` of the checkpoints taken while records arrived are each
restored into a new job whose model answers at once and whose source reads
the files not read yet: every key must give its output there. A key without
one within the wait was lost (its records pending, no timer to resume them).
Printed per bundle setting. Not a test: run it, read the figures.

    PYTHONPATH=.:tools/bench .venv/bin/python tools/bench/bundle_timer_restores.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

from _common import machine

import cloudpickle
from pyflink.common import Types

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of
from tests.support.flink_jobs import Collected, completed_checkpoints, jsonl_stream, mini_cluster_env, write_jsonl
from tests.support.scripted_openai_server import ScriptedChatServer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class HoldAll:
    """A ``reply_fn``: while ``holding``, every request waits (until it is
    lifted); then ``{"score", "reasons"}`` at once."""

    def __init__(self) -> None:
        self.holding = True
        self.requests = 0
        self._lock = threading.Lock()

    def __call__(self, body: Dict[str, Any], index: int) -> Dict[str, Any]:
        with self._lock:
            self.requests += 1
        while self.holding:
            time.sleep(0.05)
        return {"role": "assistant", "content": json.dumps({"score": 3, "reasons": ["fine"]})}


def _job(
    tmp: Path, name: str, base_url: str, checkpoints: Path, checkpoint_ms: int, bundle: Tuple[str, str], **options: str
) -> Collected:
    size, bundle_ms = bundle
    env = mini_cluster_env(1, checkpoints, checkpoint_ms, **{
        "python.fn-execution.bundle.size": size,
        "python.fn-execution.bundle.time": bundle_ms,
        "execution.checkpointing.num-retained": "1000",
        **options,
    })
    reviews = jsonl_stream(env, tmp / "input", "reviews", "reviews-source", "decode-reviews", monitor_ms=20)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
        "journal.store": "sqlite", "journal.sqlite.path": str(tmp / "journal.db"),
        # Polls of 1 s: a key's second poll timer, registered with its first,
        # outlives the next checkpoint, so what a restore loses is what the
        # bundle cut by that checkpoint's barrier registered (process_element).
        "flink.poll_interval_ms": 1000,
    })
    agent = ReviewAnalysisAgent(model="openai:scripted", base_url=base_url, max_retries=0)
    stream = agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()
    return Collected(stream, name)


def trial(bundle: Tuple[str, str], keys: int, gap_ms: int, checkpoint_ms: int, restores: int) -> List[Tuple[int, int]]:
    """``(checkpoint number, keys lost)`` for each restore."""
    tmp = Path(tempfile.mkdtemp(prefix="bundle-timers-"))
    (tmp / "input").mkdir()
    model = HoldAll()
    results = []
    with ScriptedChatServer() as server:
        server.set_reply_fn(model)
        write_jsonl(tmp / "input" / "k-0000.jsonl", [{"id": "K0000", "review": "review 0", "ts": 0}])
        first = _job(tmp, "job-1", server.base_url, tmp / "checkpoints", checkpoint_ms, bundle)
        try:
            deadline = time.monotonic() + 120
            while model.requests == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            started = time.time()
            for n in range(1, keys):
                write_jsonl(tmp / "input" / f"k-{n:04d}.jsonl", [{"id": f"K{n:04d}", "review": f"review {n}", "ts": n}])
                time.sleep(gap_ms / 1000)
            ended = time.time()
            time.sleep(1.0)
        finally:
            first.close()
        during = [(n, path) for n, path, mtime in completed_checkpoints(tmp / "checkpoints") if started < mtime < ended]
        model.holding = False
        step = max(len(during) // restores, 1)
        for number, path in during[step // 2::step][:restores]:
            restored = _job(tmp, f"from-{number}", server.base_url, tmp / f"checkpoints-{number}", checkpoint_ms, bundle, **{
                "execution.state-recovery.path": path.as_uri(),
                "execution.state-recovery.ignore-unclaimed-state": "true",
            })
            seen: set = set()
            nudged: set = set()
            try:
                deadline = time.monotonic() + 45
                quiet_until = time.monotonic() + 15
                while len(seen) < keys and time.monotonic() < min(deadline, quiet_until):
                    new = restored.poll()
                    if new:
                        seen.update(o["id"] for o in new)
                        quiet_until = time.monotonic() + 8  # 8 s without a new output: done
                    time.sleep(0.1)
                lost = sorted({f"K{n:04d}" for n in range(keys)} - seen)
                if lost:
                    # A second record for each lost key: if the first was in the
                    # checkpoint's state (only its timer missing), it runs now too.
                    write_jsonl(tmp / "input" / f"nudge-{number}.jsonl", [
                        {"id": key, "review": "nudge", "ts": 100_000 + n} for n, key in enumerate(lost)
                    ])
                    deadline = time.monotonic() + 20
                    while len(nudged) < len(lost) and time.monotonic() < deadline:
                        nudged.update(o["id"] for o in restored.poll() if o["id"] in lost and o["ts"] < 100_000)
                        time.sleep(0.1)
            finally:
                restored.close()
            print(f"  bundle {bundle}: restored chk-{number}: {keys - len(lost)} of {keys} keys finished, "
                  f"lost: {lost}; of those, resumed by a next record: {len(nudged)}", flush=True)
            results.append((number, len(lost)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=60)
    parser.add_argument("--gap-ms", type=int, default=50)
    parser.add_argument("--checkpoint-ms", type=int, default=300)
    parser.add_argument("--restores", type=int, default=3)
    parser.add_argument("--bundles", default="1:1000,1000:100000,100000:1000,1000:10",
                        help="size:time_ms pairs, comma-separated")
    args = parser.parse_args()
    print(f"machine: {machine()}; {args.keys} keys {args.gap_ms} ms apart, checkpoints every "
          f"{args.checkpoint_ms} ms, {args.restores} restores per bundle setting", flush=True)
    summary = []
    for pair in args.bundles.split(","):
        size, bundle_ms = pair.split(":")
        results = trial((size, bundle_ms), args.keys, args.gap_ms, args.checkpoint_ms, args.restores)
        summary.append((pair, results))
    for pair, results in summary:
        lost = [n for _, n in results]
        print(f"bundle.size:bundle.time {pair:>12}: restores losing keys {sum(1 for n in lost if n)} of {len(lost)}, "
              f"keys lost per restore {lost}")


if __name__ == "__main__":
    sys.exit(main())
