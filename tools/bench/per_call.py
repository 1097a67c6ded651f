"""Cost per model call and per record, against their floors (issue 33).

Two comparisons, each side in a fresh interpreter, alternated over rounds
(the median is printed):

1. **Per model call**: the bare ``openai`` SDK (``AsyncOpenAI``, one client,
   C keys each sending its requests one after another, all keys at once;
   the agent's request: its system prompt, the review, its tool's schema
   and its structured-output ``response_format``)
   against the review-analysis agent on the local runner making the same
   requests (C keys x N records, one model call per record), both against a
   scripted OpenAI-compatible server in a process of its own answering
   after L (default C = 31, N = 20, L = 200 ms). Printed: CPU ms per call
   (the client process's CPU over the calls: everything the side runs),
   runs per second over the server's span (first request's start to the
   last one's end), and its fraction of C/L. Target: ours <= 1.3x the SDK's
   CPU, >= 0.9 of C/L. A third side, alternated with the two, runs the same
   requests as a Flink job in one subtask in thread mode (the mini-cluster,
   a SQLite journal): its runs/s and fraction of C/L, the issue's other
   0.9 (its CPU is the JVM's, start-up included: not printed as per call).
   ``--skip-thread-mode`` leaves it out.
2. **Per record**: the trivial agent (read memory, write memory, send one
   output; 20,000 records on 31 keys) on our local runner and on Flink
   Agents 0.3.1's (``--peer-python``: an interpreter of a side venv holding
   ``pip install --no-deps flink-agents==0.3.1`` with
   ``FLINK_AGENTS_SKIP_JAR_DOWNLOAD=1``; ``tools/bench/peer_venv.sh``
   makes one), through ``_record_worker.py``. 0.3.1 logs three lines per
   record at INFO by default: printed as it comes ("default", its log to
   /dev/null) and with INFO logging off ("quiet"). Without a peer
   interpreter that row is skipped, saying why.

Not a test: run it, read the figures.

    .venv/bin/python tools/bench/per_call.py --rounds 3 --peer-python /work/peer031/bin/python
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from _common import REPO, machine, served
from concurrency import _reviews, _serve

PYTHON = REPO / ".venv" / "bin" / "python"
WORKER = Path(__file__).resolve().parent / "_record_worker.py"


# -- the two sides of the per-call comparison (each in its own interpreter) --


def _sdk_side(base_url: str, reviews: List[dict]) -> Dict[str, float]:
    """The bare SDK: the review prompt's messages, one key's requests in order."""
    import asyncio

    from openai import AsyncOpenAI

    from flink_agents.api.agents.types import OutputSchema
    from flink_agents.integrations.chat_models.openai.openai_utils import json_schema_response_format
    from flink_agents.jobs.review_analysis import REVIEW_PROMPT
    from flink_agents.jobs.review_records import ReviewAnalysis

    system = REVIEW_PROMPT.format_messages()[0].content
    # The agent asks for a ReviewAnalysis as structured output: so does this side.
    response_format = json_schema_response_format(OutputSchema(ReviewAnalysis), strict=False)
    # The agent's request carries its tool's schema too.
    tools = [{"type": "function", "function": {
        "name": "notify_shipping_manager", "description": "Notify the shipping manager of a damaged product.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}, "review": {"type": "string"}},
                       "required": ["id", "review"]}}}]
    by_key: Dict[str, List[dict]] = {}
    for review in reviews:
        by_key.setdefault(review["id"], []).append(review)

    async def main() -> int:
        client = AsyncOpenAI(base_url=base_url, api_key="bench-key", max_retries=0)
        answered = 0

        async def one_key(items: List[dict]) -> None:
            nonlocal answered
            for review in items:
                reply = await client.chat.completions.create(
                    model="scripted",
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": json.dumps({"id": review["id"], "review": review["review"]})}],
                    tools=tools, response_format=response_format,
                )
                json.loads(reply.choices[0].message.content)
                answered += 1

        await asyncio.gather(*(one_key(items) for items in by_key.values()))
        await client.close()
        return answered

    cpu = time.process_time()
    answered = asyncio.run(main())
    assert answered == len(reviews)
    return {"cpu_s": time.process_time() - cpu}


def _ours_side(base_url: str, reviews: List[dict]) -> Dict[str, float]:
    # A job imports its provider's module once, at start-up: the SDK side
    # imports ``openai`` before its clock starts, so this side does too
    # (openai and the runtime: ~1.2 s of CPU, 2 ms per call over 620 calls).
    import flink_agents.integrations.chat_models.openai.openai_chat_model  # noqa: F401
    import flink_agents.runtime.local.environment  # noqa: F401
    from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, run_locally

    agent = ReviewAnalysisAgent(model="openai:scripted", base_url=base_url, max_retries=0)
    cpu = time.process_time()
    outputs = run_locally(reviews, agent)
    assert len(outputs) == len(reviews), f"{len(outputs)} outputs for {len(reviews)} reviews"
    return {"cpu_s": time.process_time() - cpu}


def _thread_mode_side(base_url: str, reviews: List[dict]) -> Dict[str, float]:
    """The same agent and requests as a Flink job: one subtask, thread mode."""
    import tempfile

    from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, run_on_flink

    agent = ReviewAnalysisAgent(model="openai:scripted", base_url=base_url, max_retries=0)
    with tempfile.TemporaryDirectory() as directory:
        outputs = run_on_flink(reviews, agent, parallelism=1, journal_path=Path(directory) / "journal.db",
                               execution_mode="thread")
    assert len(outputs) == len(reviews), f"{len(outputs)} outputs for {len(reviews)} reviews"
    return {}


_SIDES = {"sdk": _sdk_side, "ours": _ours_side, "thread": _thread_mode_side}
_LABELS = {"sdk": "bare openai SDK", "ours": "review agent, local runner", "thread": "the same, thread mode, p=1"}


def _side(name: str, base_url: str, reviews: List[dict], results: Any) -> None:
    results.put(_SIDES[name](base_url, reviews))


def measure_calls(name: str, reviews: List[dict], latency_s: float) -> Dict[str, float]:
    with served(_serve, latency_s) as (base_url, finish):
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        side = context.Process(target=_side, args=(name, base_url, reviews, results))
        side.start()
        result = results.get(timeout=600)
        side.join(timeout=30)
        return {**result, **finish()}


# -- per record --------------------------------------------------------------


def measure_records(python: str, records: int, keys: int, quiet: bool) -> Dict[str, Any]:
    command = [python, "-I", str(WORKER), str(records), str(keys)] + (["quiet"] if quiet else [])
    done = subprocess.run(command, cwd="/", capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=31)
    parser.add_argument("--per-key", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--peer-python", default=None, help="the interpreter of a venv with flink-agents 0.3.1")
    parser.add_argument("--skip-calls", action="store_true")
    parser.add_argument("--skip-records", action="store_true")
    parser.add_argument("--skip-thread-mode", action="store_true", help="leave out the Flink job in thread mode")
    args = parser.parse_args()
    reviews = _reviews(args.keys, args.per_key)
    latency_s = args.latency_ms / 1000
    bound = args.keys / latency_s
    print(f"machine: {machine()}; {args.rounds} rounds, alternated, median")
    if not args.skip_calls:
        print(f"\nper model call: {len(reviews)} requests, C = {args.keys} keys at once, L = {args.latency_ms:.0f} ms, "
              f"C/L = {bound:.0f} runs/s")
        calls: Dict[str, List[Dict[str, float]]] = {"sdk": [], "ours": []}
        if not args.skip_thread_mode:
            calls["thread"] = []
        for _ in range(args.rounds):
            for name in calls:
                calls[name].append(measure_calls(name, reviews, latency_s))
        rows = {}
        for name, runs in calls.items():
            rate = statistics.median(len(reviews) / r["span_s"] for r in runs)
            fractions = ", ".join(f"{len(reviews) / r['span_s'] / bound:.2f}" for r in runs)
            if name == "thread":
                print(f"  {_LABELS[name]:28s}: {'':21s}{rate:6.1f} runs/s = {rate / bound:.2f} of C/L "
                      f"(each round: {fractions})")
                continue
            cpu_ms = statistics.median(r["cpu_s"] for r in runs) / len(reviews) * 1000
            rows[name] = cpu_ms
            print(f"  {_LABELS[name]:28s}: {cpu_ms:5.2f} ms CPU per call, {rate:6.1f} runs/s = {rate / bound:.2f} of C/L")
        print(f"  ours / SDK CPU per call: {rows['ours'] / rows['sdk']:.2f} (target <= 1.3)")
    if not args.skip_records:
        print(f"\nper record: the trivial agent, {args.records} records on {args.keys} keys")
        sides = {"ours": (str(PYTHON), True)}
        if args.peer_python and Path(args.peer_python).exists():
            sides["0.3.1 default (INFO log)"] = (args.peer_python, False)
            sides["0.3.1 quiet"] = (args.peer_python, True)
        else:
            print(f"  (0.3.1 skipped: no --peer-python interpreter{f' at {args.peer_python}' if args.peer_python else ''};"
                  " tools/bench/peer_venv.sh makes one)")
        per: Dict[str, List[float]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, (python, quiet) in sides.items():
                result = measure_records(python, args.records, args.keys, quiet)
                per[name].append(result["cpu_s"] / result["records"] * 1e6)
        ours = statistics.median(per["ours"])
        for name, values in per.items():
            us = statistics.median(values)
            print(f"  {name:26s}: {us:6.1f} us CPU per record" + ("" if name == "ours" else f"; ours / it = {ours / us:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
