"""Blocking user calls against the bound C/L (issue 13, example 7).

C keys, each record's action awaits ``durable_execute_async(time.sleep, L)``
(a blocking call: a sync SDK, a database driver). With enough threads the
run takes about L; on asyncio's default executor (cores + 4 threads) it
took ceil(C / threads) * L. Printed side by side in one run: the runtime's
call pool (``runtime.scheduling.executors``) against the same runs with the pool's
install switched off (the default executor), each as a fraction of the
bound L (1.0: all C calls overlapped). Not a test: run it, read the figures.

    .venv/bin/python tools/bench/blocking_calls.py --keys 20 --latency-ms 300
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import machine

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.runtime.scheduling.executors import Executors

LATENCY_S = 0.3


async def sleepy(event: Event, ctx: Any) -> None:
    await ctx.durable_execute_async(time.sleep, LATENCY_S)
    ctx.send_event(OutputEvent(output=event.input))


def run(keys: int) -> float:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.from_list([{"key": f"k{i}", "value": i} for i in range(keys)]).apply(
        Agent().add_action("sleepy", [InputEvent], sleepy))
    started = time.perf_counter()
    env.execute()
    return time.perf_counter() - started


def main() -> None:
    global LATENCY_S
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=300)
    args = parser.parse_args()
    LATENCY_S = args.latency_ms / 1000.0
    print(machine())
    with_pool = run(args.keys)
    install = Executors.install
    Executors.install = lambda self, loop: None  # the default executor, as before
    try:
        default = run(args.keys)
    finally:
        Executors.install = install
    print(f"{args.keys} keys x one blocking {args.latency_ms:.0f} ms call; bound {LATENCY_S:.2f} s")
    print(f"  call pool        {with_pool:6.2f} s   {LATENCY_S / with_pool:5.2f} of the bound")
    print(f"  default executor {default:6.2f} s   {LATENCY_S / default:5.2f} of the bound")
    print(f"  speed-up {default / with_pool:.1f}x")


if __name__ == "__main__":
    main()
