"""Process mode: records pending at a checkpoint resume after a restore
from it, whatever moment the checkpoint cut the input, because the Flink
runner runs Python functions in bundles of one element.

flink-python 2.3 applies the timers of a bundle after the checkpoint that
finished the bundle (``BeamPythonFunctionRunner`` queues each registration
as a mailbox mail; ``prepareSnapshotPreBarrier`` flushes the bundle but does
not drain them), while the keyed state the bundle wrote is in it. A key
whose first record came in that bundle is restored pending, without a
timer to resume it. docs/performance.md, "Execution mode and bundles".

Each test: job 1 runs the review-analysis agent against a model holding
every request, so each key's one record stays pending; new keys arrive
50 ms apart while checkpoints are taken every 300 ms. Job 1 is cancelled and
checkpoints taken while keys arrived are each restored into a job whose
model answers at once and whose source reads what job 1 had not: every key
must give its output there.

1. With the runner's bundles (of one): no key is lost.
2. With bundles of 1000 (a canary): keys are lost. When this fails,
   flink-python applies a bundle's timers before the snapshot, and the
   runner may drop bundles of one (``environment._single_element_bundles``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of
from tests.support.flink_jobs import Collected, completed_checkpoints, jsonl_stream, mini_cluster_env, write_jsonl

KEYS = 30
GAP_S = 0.05
CHECKPOINT_MS = 300


class HoldAll:
    """A ``reply_fn`` holding every request while ``holding``; then an
    answer at once."""

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


def _key(n: int) -> str:
    return f"B0BUNDLE{n:03d}"


def _job(tmp: Path, name: str, base_url: str, checkpoints: Path, **options: str) -> Collected:
    from pyflink.common import Types

    env = mini_cluster_env(1, checkpoints, CHECKPOINT_MS, **{"execution.checkpointing.num-retained": "100", **options})
    reviews = jsonl_stream(env, tmp / "input", "reviews", "reviews-source", "decode-reviews", monitor_ms=20)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
        "journal.store": "sqlite", "journal.sqlite.path": str(tmp / "journal.db"),
        # A key's second poll timer (registered with its first) outlives the
        # next checkpoint: what a restore can lose is what process_element
        # registered in the bundle that checkpoint's barrier cut.
        "flink.poll_interval_ms": 1000,
    })
    agent = ReviewAnalysisAgent(model="openai:scripted", base_url=base_url, max_retries=0)
    stream = agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()
    return Collected(stream, name)


def _keys_lost_per_restore(tmp: Path, server: Any, restores: int, **bundles: str) -> Dict[int, List[str]]:
    """Job 1, then ``restores`` of its checkpoints taken while keys arrived,
    each restored: ``{checkpoint number: keys without an output}``."""
    model = HoldAll()
    server.set_reply_fn(model)
    (tmp / "input").mkdir()
    write_jsonl(tmp / "input" / "k-000.jsonl", [{"id": _key(0), "review": "review 0", "ts": 0}])
    first = _job(tmp, "bundles-1", server.base_url, tmp / "checkpoints", **bundles)
    try:
        deadline = time.monotonic() + 60
        while model.requests == 0:  # the job runs: its first record reached the model
            assert time.monotonic() < deadline, "job 1 made no model request within 60 s"
            time.sleep(0.05)
        started = time.time()
        for n in range(1, KEYS):
            write_jsonl(tmp / "input" / f"k-{n:03d}.jsonl", [{"id": _key(n), "review": f"review {n}", "ts": n}])
            time.sleep(GAP_S)
        ended = time.time()
        time.sleep(0.5)
    finally:
        first.close()
    during = [(n, path) for n, path, mtime in completed_checkpoints(tmp / "checkpoints") if started < mtime < ended]
    assert len(during) >= restores + 1, f"only {len(during)} checkpoints completed while keys arrived"
    model.holding = False
    lost: Dict[int, List[str]] = {}
    for number, path in during[1:restores + 1]:
        job = _job(tmp, f"bundles-from-{number}", server.base_url, tmp / f"checkpoints-{number}", **bundles, **{
            "execution.state-recovery.path": path.as_uri(),
            "execution.state-recovery.ignore-unclaimed-state": "true",
        })
        seen: set = set()
        try:
            deadline = time.monotonic() + 30
            quiet_until = time.monotonic() + 15  # start-up, then 5 s without a new output: done
            while len(seen) < KEYS and time.monotonic() < min(deadline, quiet_until):
                outputs = job.poll()
                if outputs:
                    seen.update(o["id"] for o in outputs)
                    quiet_until = time.monotonic() + 5
                time.sleep(0.1)
        finally:
            job.close()
        lost[number] = sorted({_key(n) for n in range(KEYS)} - seen)
    return lost


@pytest.mark.timeout(120)
def test_keys_pending_at_any_checkpoint_resume_after_restoring_it(scripted_chat_server: Any, tmp_path: Path) -> None:
    lost = _keys_lost_per_restore(tmp_path, scripted_chat_server, restores=2)
    print(f"\nthe runner's bundles: keys lost per restored checkpoint: {lost}")
    assert lost and all(keys == [] for keys in lost.values()), f"records pending at a checkpoint never resumed: {lost}"


@pytest.mark.timeout(120)
def test_canary_larger_bundles_lose_the_timers_of_the_bundle_a_checkpoint_cuts(
    scripted_chat_server: Any, tmp_path: Path,
) -> None:
    lost = _keys_lost_per_restore(tmp_path, scripted_chat_server, restores=1, **{
        "python.fn-execution.bundle.size": "1000", "python.fn-execution.bundle.time": "100000",
    })
    print(f"\nbundles of 1000: keys lost per restored checkpoint: {lost}")
    assert any(lost.values()), (
        "no key was lost with bundles of 1000: flink-python now applies a bundle's timers before the "
        "checkpoint, and the runner may stop forcing bundles of one (docs/performance.md)"
    )
