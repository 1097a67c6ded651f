"""Runs per second with a slow model, against the bound C/L.

The review-analysis agent talks to a scripted OpenAI-compatible server on
127.0.0.1 that answers every request after a fixed latency L (default 200 ms).
With C keys in flight (31 products, C = 31), one subtask can at best finish
C/L runs per second. Printed side by side in one run, for the local runner
and for one subtask on the local mini-cluster: achieved runs/s and its
fraction of C/L. The span is measured at the server, from the first request's
start to the last one's end, so mini-cluster start-up is left out.
With ``--review-job``, the input is instead the review-analysis job's real
data, ``../shared/data/product_reviews.jsonl`` (2,700 reviews over 31
products, as they come), on the mini-cluster at ``--parallelism 2``. Its keys
are skewed (the busiest product has 331 reviews, run one after another), so
besides C/L it prints the tighter bound: total runs / (busiest key's runs x L).
Not a test: run it, read the figures.

    .venv/bin/python tools/bench/concurrency.py --per-key 10
    .venv/bin/python tools/bench/concurrency.py --review-job --runners flink --mode thread
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

from _common import REPO, machine

from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, run_locally, run_on_flink
from flink_agents.jobs.review_records import read_reviews
from tests.support.scripted_openai_server import ScriptedChatServer


def _answer(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    review = json.loads(request["messages"][-1]["content"])["review"]
    score = 1 + zlib.crc32(review.encode()) % 5
    return {"role": "assistant", "content": json.dumps({"score": score, "reasons": ["scripted"]})}


def _reviews(keys: int, per_key: int) -> List[dict]:
    shared = REPO.parent / "shared" / "data" / "product_reviews.jsonl"
    source = shared if shared.exists() else REPO / "jobs" / "data" / "sample_reviews.jsonl"
    texts = [r["review"] for r in read_reviews(source).reviews]
    return [
        {"id": f"P{k:03d}", "review": texts[(n * keys + k) % len(texts)], "ts": n * keys + k}
        for n in range(per_key) for k in range(keys)
    ]


def _serve(latency_s: float, urls: Any, stop: Any, results: Any) -> None:
    """The model server, in its own process: its threads must not compete
    with the runtime for this process's interpreter lock."""
    with ScriptedChatServer(latency_s=latency_s) as server:
        server.set_reply_fn(_answer)
        urls.put(server.base_url)
        stop.wait()
        span_s = max(e for _, e in server.spans) - min(s for s, _ in server.spans)
        results.put({"span_s": span_s, "max_in_flight": server.max_in_flight, "requests": len(server.requests)})


def _shared_reviews() -> List[dict]:
    shared = REPO.parent / "shared" / "data" / "product_reviews.jsonl"
    if not shared.exists():
        raise SystemExit(f"--review-job needs the shared data set at {shared}; it is absent")
    return read_reviews(shared).reviews


def measure(runner: str, reviews: List[dict], latency_s: float, mode: str, parallelism: int = 1) -> Dict[str, float]:
    context = multiprocessing.get_context("spawn")
    urls, results, stop = context.Queue(), context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(latency_s, urls, stop, results), daemon=True)
    server.start()
    try:
        base_url = urls.get(timeout=30)
        agent = ReviewAnalysisAgent(model="openai:scripted", base_url=base_url, max_retries=0)
        with tempfile.TemporaryDirectory() as directory:
            cpu_started = time.process_time()
            if runner == "local":
                outputs = run_locally(reviews, agent)
            else:
                outputs = run_on_flink(reviews, agent, parallelism=parallelism, journal_path=Path(directory) / "journal.db",
                                       execution_mode=mode)
        assert len(outputs) == len(reviews)
        # This process's CPU per run (the local runner: engine, model client
        # and all; on Flink only the client's share, the workers are elsewhere).
        cpu_per_run_ms = (time.process_time() - cpu_started) / len(reviews) * 1000
        stop.set()
        return {"runs": len(reviews), "cpu_per_run_ms": cpu_per_run_ms, **results.get(timeout=30)}
    finally:
        stop.set()
        server.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=31)
    parser.add_argument("--per-key", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--runners", default="local,flink", help="comma-separated: local, flink")
    parser.add_argument("--mode", default="process",
                        help="the flink runner's mode: thread, process (separate Python worker processes) or "
                             "loopback (process mode, workers as threads of this process; the mode the "
                             "process-mode figures in docs/performance.md were measured in)")
    parser.add_argument("--review-job", action="store_true", help="the shared review data as is (see above)")
    parser.add_argument("--parallelism", type=int, default=None, help="of the flink runner (default 1; 2 with --review-job)")
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000
    reviews = _shared_reviews() if args.review_job else _reviews(args.keys, args.per_key)
    parallelism = args.parallelism or (2 if args.review_job else 1)
    per_key = Counter(r["id"] for r in reviews)
    keys = len(per_key)
    bound = keys / latency_s
    skew_bound = len(reviews) / (max(per_key.values()) * latency_s)
    print(f"machine: {machine()}; {len(reviews)} runs over C = {keys} keys, L = {args.latency_ms:.0f} ms, "
          f"bound C/L = {bound:.0f} runs/s; busiest key {max(per_key.values())} runs: bound {skew_bound:.1f} runs/s")
    for runner in args.runners.split(","):
        result = measure(runner, reviews, latency_s, args.mode, parallelism)
        rate = result["runs"] / result["span_s"]
        label = runner if runner == "local" else f"flink ({args.mode}, p={parallelism})"
        print(f"{label:22s}: {rate:6.1f} runs/s = {rate / bound:.2f} of C/L, {rate / min(bound, skew_bound):.2f} of "
              f"the tighter bound (span {result['span_s']:.2f} s, at most {result['max_in_flight']} calls at once)"
              + (f"; {result['cpu_per_run_ms']:.2f} ms CPU per run" if runner == "local" else ""))


if __name__ == "__main__":
    sys.exit(main())
