"""How much waiting overlaps: the timings the tests no longer assert.

The tests prove overlap with counts (a fake holds each call until n calls are
in flight at once; see ``ScriptedChatServer.hold_until_in_flight`` and
``tests/engine/test_sub_agents.py``), which cannot flake on a loaded machine. The
wall-clock figures live here instead, each printed next to its own baseline
measured in the same run, as a ratio (1.0: fully overlapped; n: one after
another):

- scripted server: n concurrent client requests of latency L, against one;
- sub-agents: n children gathered by one action, each with a model call of
  latency L, against one child and against n children awaited in turn;
- local runner: k keys with one slow model call each, against one key.

Not a test: run it, read the figures.

    .venv/bin/python tools/bench/overlap.py --latency-ms 300 --n 3 --keys 20
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from typing import Any, List

from _common import machine

import openai

from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceType
from tests.support.scripted_openai_server import ScriptedChatServer
from tests.engine.test_concurrency import _records, _run_local, slow_model_agent
from tests.engine.test_sub_agents import _run, parent_calling, summarizer


def _best_of(repeats: int, fn: Any) -> float:
    """The shortest of ``repeats`` runs of ``fn()``, which returns the
    seconds it measured itself (set-up left out)."""
    return min(fn() for _ in range(repeats))


def server_requests(latency_s: float, n: int) -> float:
    """Seconds for ``n`` threads each sending one request at once."""
    with ScriptedChatServer(latency_s=latency_s) as server:
        server.set_reply_fn(lambda request, index: {"role": "assistant", "content": str(index)})
        client = openai.OpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm-up"}])

        def call() -> None:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

        threads = [threading.Thread(target=call) for _ in range(n)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started


def sub_agents(latency_s: float, n: int, gathered: bool) -> float:
    """Seconds for one record whose action submits ``n`` children, gathered
    or awaited one after another."""

    async def fan_out(event: InputEvent, ctx: Any) -> None:
        handle = ctx.get_resource("summarizer", ResourceType.AGENT)
        if gathered:
            results = await asyncio.gather(*(handle.submit(ctx, f"part {i}") for i in range(n)))
        else:
            results = [await handle.submit(ctx, f"part {i}") for i in range(n)]
        ctx.send_event(OutputEvent(output=[r.result[0] for r in results]))

    started = time.perf_counter()
    [out] = _run(parent_calling(summarizer(delay_s=latency_s), fan_out), ["x"])
    elapsed = time.perf_counter() - started
    assert out == [f"PART {i}" for i in range(n)], out
    return elapsed


def local_keys(latency_s: float, keys: int) -> float:
    """Seconds (first request's start to last one's end, at the server) for
    ``keys`` keys with one record each on the local runner."""
    with ScriptedChatServer(latency_s=latency_s) as server:
        server.set_reply_fn(lambda request, index: {"role": "assistant", "content": "ok"})
        outputs: List[dict] = _run_local(_records(keys=keys, per_key=1), slow_model_agent(server.base_url))
        assert len(outputs) == keys
        return max(end for _, end in server.spans) - min(start for start, _ in server.spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=float, default=300)
    parser.add_argument("--n", type=int, default=3, help="concurrent requests / gathered children")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    latency_s, n, repeats = args.latency_ms / 1000, args.n, args.repeats
    print(f"machine: {machine()}; L = {args.latency_ms:.0f} ms, n = {n}, k = {args.keys} keys; "
          f"best of {repeats}; ratio = time / baseline (1.0: fully overlapped)")

    one = _best_of(repeats, lambda: server_requests(latency_s, 1))
    many = _best_of(repeats, lambda: server_requests(latency_s, n))
    print(f"scripted server : {n} requests at once {many:.3f} s, 1 request {one:.3f} s -> ratio {many / one:.2f}")

    one = _best_of(repeats, lambda: sub_agents(latency_s, 1, gathered=True))
    gathered = _best_of(repeats, lambda: sub_agents(latency_s, n, gathered=True))
    in_turn = _best_of(repeats, lambda: sub_agents(latency_s, n, gathered=False))
    print(f"sub-agents      : {n} gathered {gathered:.3f} s, 1 child {one:.3f} s -> ratio {gathered / one:.2f} "
          f"(awaited in turn: {in_turn:.3f} s, ratio {in_turn / one:.2f})")

    one = _best_of(repeats, lambda: local_keys(latency_s, 1))
    many = _best_of(repeats, lambda: local_keys(latency_s, args.keys))
    print(f"local runner    : {args.keys} keys span {many:.3f} s, 1 key {one:.3f} s -> ratio {many / one:.2f}")


if __name__ == "__main__":
    sys.exit(main())
