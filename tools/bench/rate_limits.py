"""The review job against a provider that enforces 600 requests per minute:
without limits, and with ``requests_per_minute=600`` on its connection.

The review-analysis job (``jobs/review_analysis.py``, thread
mode, mini-cluster, SQLite journal) over the first N of the 2,700 shared
reviews (``../shared/data/product_reviews.jsonl``, in file order: the real
skew of 31 products), its model a rate-limited OpenAI-compatible server
on 127.0.0.1 in its own process (``tests/support/rate_limited_server.py``:
at most 600 requests in any 60 s, metered over 10 s as providers do, so
at most 100 in any 10 s; beyond it 429 with ``Retry-After``). For each
parallelism, one run per setting, side by side:

- ``none``: no limit; the SDK's retries and the runtime's 429 cool-down
  (which honours ``Retry-After``) are all that slows the subtasks down;
- ``subtask``: ``--requests-per-minute 600``, each subtask holding
  ``600 // parallelism`` (``rate_limits.scope: subtask``, the default);
- ``job``: the same limit held in one window the subtasks share through
  the journal store (``rate_limits.scope: job``), when the runtime has it.

Printed per run: requests the server answered 429; achieved requests per
minute (the most answered in any 60 s; the limit is met within 10 % when
it is at least 540); the most answered in any 10 s (never above 100 with
a limit); and wall time (the whole command: interpreter and JVM start
included). Not a test: run it, read the figures.

    .venv/bin/python tools/bench/rate_limits.py
    .venv/bin/python tools/bench/rate_limits.py --parallelisms 2 --reviews 1200 --settings none,job
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from _common import REPO, machine, served

from flink_agents.jobs.review_records import read_reviews
from tests.support.flink_jobs import child_environment
from tests.support.rate_limited_server import RateLimitedChatServer, most_in_any_window

SHARED = REPO.parent / "shared" / "data" / "product_reviews.jsonl"
PYTHON = REPO / ".venv" / "bin" / "python"
SETTINGS = ("none", "subtask", "job")


def _serve(per_minute: int, latency_s: float, urls: Any, stop: Any, results: Any) -> None:
    """The provider, in its own process (its threads must not share an
    interpreter lock with the job's)."""
    with RateLimitedChatServer(per_minute=per_minute, latency_s=latency_s) as server:
        urls.put(server.base_url)
        stop.wait()
        results.put(server.stats())


def _scope_supported() -> bool:
    from flink_agents.api.core_options import RuntimeOptions

    return hasattr(RuntimeOptions, "RATE_LIMITS_SCOPE")


def _run(setting: str, parallelism: int, args: argparse.Namespace, input_path: Path, work: Path,
         expected: int) -> Dict[str, Any]:
    output = work / f"{setting}-p{parallelism}.jsonl"
    with served(_serve, args.limit, args.latency_ms / 1000) as (base_url, finish):
        command = [str(PYTHON), "-m", "flink_agents.jobs.review_analysis", "--input", str(input_path),
                   "--output", str(output), "--model", "openai:scripted", "--base-url", base_url,
                   "--max-retries", str(args.max_retries), "--parallelism", str(parallelism),
                   "--execution-mode", "thread", "--restart-attempts", "0"]
        if setting != "none":
            command += ["--requests-per-minute", str(args.limit)]
        if setting == "job":
            command += ["--rate-limit-scope", "job"]
        started = time.perf_counter()
        done = subprocess.run(command, env={**child_environment(), "OPENAI_API_KEY": "bench-key"}, cwd=REPO,
                              capture_output=True, text=True, timeout=1800)
        wall_s = time.perf_counter() - started
        stats = finish()
    if done.returncode != 0:
        raise SystemExit(f"{setting} p={parallelism} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in output.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) != expected:
        raise SystemExit(f"{setting} p={parallelism}: {len(lines)} outputs for {expected} reviews")
    answered = sorted(stats["answered"])
    return {
        "wall_s": wall_s, "refused": stats["refused"], "answered": len(answered),
        "per_minute": most_in_any_window(answered, 60.0), "per_10s": most_in_any_window(answered, 10.0),
        "span_s": answered[-1] - answered[0] if answered else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parallelisms", default="2,4")
    parser.add_argument("--reviews", type=int, default=900,
                        help="the first N shared reviews (the run must outlast a minute to measure one)")
    parser.add_argument("--limit", type=int, default=600, help="the provider's requests per minute")
    parser.add_argument("--latency-ms", type=float, default=50, help="the provider's answer latency")
    parser.add_argument("--max-retries", type=int, default=8,
                        help="the SDK's retries of a refused request (the unlimited run needs them)")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"some of {','.join(SETTINGS)}")
    args = parser.parse_args()
    if not SHARED.exists():
        raise SystemExit(f"needs the shared reviews at {SHARED}; they are absent")
    settings = [s for s in args.settings.split(",") if s]
    if "job" in settings and not _scope_supported():
        print("skipping 'job': this runtime has no rate_limits.scope")
        settings.remove("job")
    reviews = read_reviews(SHARED).reviews[: args.reviews]
    parallelisms = [int(p) for p in args.parallelisms.split(",")]
    print(f"machine: {machine()}; {len(reviews)} reviews, {len({r['id'] for r in reviews})} products; provider: "
          f"{args.limit} requests/min metered over 10 s (at most {args.limit // 6} per 10 s), "
          f"{args.latency_ms:.0f} ms per answer; SDK max_retries {args.max_retries}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rate-limits-") as directory:
        work = Path(directory)
        input_path = work / "reviews.jsonl"
        input_path.write_text("".join(json.dumps(r) + "\n" for r in reviews), encoding="utf-8")
        for p in parallelisms:
            for setting in settings:
                result = _run(setting, p, args, input_path, work, len(reviews))
                print(f"  p={p} {setting}: {result['refused']} answered 429, {result['per_minute']} in the "
                      f"busiest minute, {result['wall_s']:.1f} s wall", flush=True)
                rows.append((p, setting, result))
    print(f"\n{'p':>2} {'limit':<11} | {'429s':>6} | {'req/min (busiest 60 s)':>22} | {'busiest 10 s':>12} | "
          f"{'wall s':>7}")
    for p, setting, r in rows:
        limit = "none" if setting == "none" else f"600/{setting}"
        print(f"{p:>2} {limit:<11} | {r['refused']:>6} | {r['per_minute']:>14} ({r['per_minute'] / args.limit:.2f}x) | "
              f"{r['per_10s']:>12} | {r['wall_s']:>7.1f}")
    print(f"(req/min: the most answered in any 60 s, within 10 % of the limit at >= {int(args.limit * 0.9)}; "
          f"busiest 10 s: at most {args.limit // 6} with a limit; wall: the whole command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
