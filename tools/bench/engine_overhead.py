"""Engine overhead per record on the local runner, with a zero-latency agent.

The agent does one short-term memory write and sends one output per record.
Printed side by side in one run: the same function called directly in a loop
(the floor: what the user's code costs), and the whole local runner
(from_list -> apply -> execute: plan, queueing, action loop, memory staging,
journal in memory). Not a test: run it, read the figures.

    .venv/bin/python tools/bench/engine_overhead.py --records 50000
"""

from __future__ import annotations

import argparse

from _common import count_and_echo, machine, records, timed_cpu, trivial_agent

from flink_agents.api.execution_environment import AgentsExecutionEnvironment


class _BareContext:
    """Just enough context for the action: a dict as memory, a list as output."""

    class _Memory(dict):
        def set(self, path, value):  # noqa: A003
            self[path] = value

    def __init__(self) -> None:
        self.short_term_memory = self._Memory()
        self.sent: list = []

    def send_event(self, event) -> None:
        self.sent.append(event)


def bare(inputs: list[dict]) -> int:
    from flink_agents.api.events.event import InputEvent

    contexts: dict = {}
    for record in inputs:
        ctx = contexts.setdefault(record["key"], _BareContext())
        count_and_echo(InputEvent(input=record), ctx)
    return sum(len(c.sent) for c in contexts.values())


def local_runner(inputs: list[dict]) -> int:
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list([{"key": r["key"], "value": r} for r in inputs]).apply(trivial_agent()).to_list()
    env.execute()
    return len(outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    inputs = records(args.records, args.keys)
    # Warm up both (imports, first-use caches): per-record cost is what is measured.
    bare(inputs[:200])
    local_runner(inputs[:200])
    # Alternated, best of --repeat, in wall and in CPU time (process-wide, so
    # the scheduler's loop thread counts too). On a shared machine CPU time
    # is the steadier figure: other processes' load inflates wall time.
    best = {"bare": [float("inf")] * 2, "runner": [float("inf")] * 2}
    for _ in range(args.repeat):
        for name, fn in (("bare", bare), ("runner", local_runner)):
            wall, cpu, count = timed_cpu(lambda: fn(inputs))
            assert count == args.records, (name, count)
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    print(f"machine: {machine()}; {args.records} records over {args.keys} keys, best of {args.repeat}")
    for i, clock in enumerate(("wall", "cpu")):
        per_bare_us = best["bare"][i] / args.records * 1e6
        per_engine_us = best["runner"][i] / args.records * 1e6
        print(f"[{clock:4s}] bare function loop : {per_bare_us:8.1f} us/record")
        print(f"[{clock:4s}] local runner       : {per_engine_us:8.1f} us/record")
        print(f"[{clock:4s}] engine overhead    : {per_engine_us - per_bare_us:8.1f} us/record "
              f"(runner/bare = {per_engine_us / per_bare_us:.1f}x)")

if __name__ == "__main__":
    main()
