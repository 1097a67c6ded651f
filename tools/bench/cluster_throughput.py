"""The review job on a standalone cluster against the mini-cluster: wall
time and records per second at parallelism 1, 2 and 4.

The review-analysis job (``jobs/review_analysis.py``, thread mode, SQLite
journal beside the output) over the 2,700 shared reviews
(``../shared/data/product_reviews.jsonl``, 31 products, the busiest with 331
reviews), its model a scripted OpenAI-compatible server on 127.0.0.1
answering every request after L (default 200 ms). For each parallelism,
once on the local mini-cluster (``python -m flink_agents.jobs.review_analysis``) and once
submitted to a standalone cluster (``tools/cluster.sh``, 1 TaskManager with
as many slots as the largest parallelism, in a directory of its own) with
``flink run -py``; printed side by side with the ratio cluster/mini.

Wall: the whole command (interpreter, JVM and job start included). Rate:
2,700 / the span the model server saw (first request's start to last one's
end), so start-up is left out. The busiest product's reviews run one after
another, so no run can beat 331 x L (66 s at 200 ms): the bound is printed.
Not a test: run it, read the figures.

    .venv/bin/python tools/bench/cluster_throughput.py
    .venv/bin/python tools/bench/cluster_throughput.py --parallelisms 1,2 --latency-ms 100
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

from _common import REPO, machine

from flink_agents.jobs.review_records import read_reviews
from tests.support.flink_jobs import child_environment
from tests.support.scripted_openai_server import ScriptedChatServer
from tests.support.standalone_cluster import StandaloneCluster

SHARED = REPO.parent / "shared" / "data" / "product_reviews.jsonl"
PYTHON = REPO / ".venv" / "bin" / "python"
OPENAI_KEY = "bench-key"


def _answer(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    review = json.loads(request["messages"][-1]["content"])["review"]
    return {"role": "assistant", "content": json.dumps({"score": 1 + len(review) % 5, "reasons": ["scripted"]})}


def _serve(latency_s: float, urls: Any, stop: Any, results: Any) -> None:
    """The model server, in its own process (its threads must not share an
    interpreter lock with anything measured)."""
    with ScriptedChatServer(latency_s=latency_s) as server:
        server.set_reply_fn(_answer)
        urls.put(server.base_url)
        stop.wait()
        spans = server.spans
        results.put({"span_s": max(e for _, e in spans) - min(s for s, _ in spans) if spans else float("nan"),
                     "requests": len(server.requests), "max_in_flight": server.max_in_flight})


def _run(command: List[str], latency_s: float, expected: int, env: Dict[str, str], output: Path) -> Dict[str, float]:
    """Run ``command`` (with ``{base_url}`` filled in) against a fresh model
    server; returns wall time, span and request count."""
    context = multiprocessing.get_context("spawn")
    urls, results, stop = context.Queue(), context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(latency_s, urls, stop, results), daemon=True)
    server.start()
    try:
        base_url = urls.get(timeout=30)
        started = time.perf_counter()
        done = subprocess.run([part.format(base_url=base_url) for part in command], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=900)
        wall_s = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        lines = [line for line in output.read_text(encoding="utf-8").splitlines() if line.strip()]
        if len(lines) != expected:
            raise SystemExit(f"{len(lines)} outputs for {expected} reviews: {' '.join(command)}")
        stop.set()
        return {"wall_s": wall_s, **results.get(timeout=30)}
    finally:
        stop.set()
        server.join(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallelisms", default="1,2,4")
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--mode", default="thread", choices=["thread", "process"])
    args = parser.parse_args()
    if not SHARED.exists():
        raise SystemExit(f"needs the shared reviews at {SHARED}; they are absent")
    reviews = read_reviews(SHARED).reviews
    busiest = max(Counter(r["id"] for r in reviews).values())
    latency_s = args.latency_ms / 1000
    parallelisms = [int(p) for p in args.parallelisms.split(",")]
    print(f"machine: {machine()}; {len(reviews)} reviews, {len(set(r['id'] for r in reviews))} products, "
          f"L = {args.latency_ms:.0f} ms; busiest product {busiest} reviews: no run under {busiest * latency_s:.0f} s "
          f"of model time, bound {len(reviews) / (busiest * latency_s):.1f} records/s; mode {args.mode}")
    env = {**child_environment(), "OPENAI_API_KEY": OPENAI_KEY}
    rows = []
    with tempfile.TemporaryDirectory(prefix="cluster-throughput-") as directory:
        work = Path(directory)
        common = ["--input", str(SHARED), "--model", "openai:scripted", "--base-url", "{base_url}",
                  "--max-retries", "0", "--execution-mode", args.mode, "--restart-attempts", "0"]
        mini = {}
        for p in parallelisms:
            output = work / f"mini-{p}.jsonl"
            mini[p] = _run([str(PYTHON), "-m", "flink_agents.jobs.review_analysis", *common, "--parallelism", str(p),
                            "--output", str(output)], latency_s, len(reviews), env, output)
            print(f"  mini-cluster p={p}: {mini[p]['wall_s']:.1f} s wall", flush=True)
        cluster = StandaloneCluster.start(work / "cluster", taskmanagers=1, slots=max(parallelisms), env=env)
        print(f"  cluster (1 TaskManager x {max(parallelisms)} slots) up in {cluster.start_s:.1f} s", flush=True)
        try:
            for p in parallelisms:
                output = work / f"cluster-{p}.jsonl"
                command = cluster.flink_command("run", "-py", str(REPO / "jobs" / "review_analysis.py"), *common,
                                                "--parallelism", str(p), "--output", str(output))
                result = _run(command, latency_s, len(reviews), cluster.env, output)
                print(f"  cluster p={p}: {result['wall_s']:.1f} s wall", flush=True)
                rows.append((p, mini[p], result))
        finally:
            cluster.stop()
    print(f"\n{'p':>2} | {'mini wall s':>11} {'mini rec/s':>10} | {'cluster wall s':>14} {'cluster rec/s':>13} | "
          f"{'wall ratio':>10} {'rate ratio':>10}")
    for p, m, c in rows:
        m_rate, c_rate = len(reviews) / m["span_s"], len(reviews) / c["span_s"]
        print(f"{p:>2} | {m['wall_s']:>11.1f} {m_rate:>10.1f} | {c['wall_s']:>14.1f} {c_rate:>13.1f} | "
              f"{c['wall_s'] / m['wall_s']:>10.2f} {c_rate / m_rate:>10.2f}")
    print("(rec/s: 2,700 / the model server's span; ratios: cluster / mini-cluster; requests: "
          + ", ".join(f"p={p} {m['requests']}/{c['requests']}" for p, m, c in rows) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
