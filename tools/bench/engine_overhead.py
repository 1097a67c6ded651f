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

from _common import count_and_echo, machine, records, timed, trivial_agent

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
    args = parser.parse_args()
    inputs = records(args.records, args.keys)
    bare_s, bare_n = timed(lambda: bare(inputs))
    engine_s, engine_n = timed(lambda: local_runner(inputs))
    assert bare_n == engine_n == args.records
    per_bare_us = bare_s / args.records * 1e6
    per_engine_us = engine_s / args.records * 1e6
    print(f"machine: {machine()}; {args.records} records over {args.keys} keys")
    print(f"bare function loop : {per_bare_us:8.1f} us/record")
    print(f"local runner       : {per_engine_us:8.1f} us/record")
    print(f"engine overhead    : {per_engine_us - per_bare_us:8.1f} us/record "
          f"(runner/bare = {per_engine_us / per_bare_us:.1f}x)")


if __name__ == "__main__":
    main()
