"""The agent operator against the engine floor, on the local mini-cluster.

Side by side in one run, over the same records: a bare PyFlink
``KeyedProcessFunction`` with one ``ValueState`` (count per key, one output
per record: the floor any keyed Python operator pays) and the agent operator
running the trivial agent (one short-term memory write, one output). Prints
records/s of each and the ratio agent/floor. Each job's wall time has the
wall time of the same job over 10 records (start-up, deployment) taken off.
Not a test: run it, read the figures.

    .venv/bin/python tools/bench/operator_floor.py --records 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any, Iterable

from _common import machine, records, trivial_agent

from pyflink.common import Configuration, Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.state import ValueStateDescriptor

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.runtime.flink.environment import prepare_thread_mode


class CountPerKey(KeyedProcessFunction):
    """The floor: one ValueState read and write and one output per record."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any]:
        seen = (self.count.value() or 0) + 1
        self.count.update(seen)
        yield seen


def environment(mode: str, bundle_size: int | None) -> StreamExecutionEnvironment:
    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    config.set_string("python.execution-mode", mode)
    if bundle_size:
        config.set_string("python.fn-execution.bundle.size", str(bundle_size))
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    env.enable_checkpointing(10_000)
    return env


def collect(stream: Any) -> tuple[int, float]:
    started = time.perf_counter()
    with stream.execute_and_collect() as outputs:
        count = sum(1 for _ in outputs)
    return count, time.perf_counter() - started


def floor(inputs: list[dict], mode: str, bundle_size: int | None) -> tuple[int, float]:
    env = environment(mode, bundle_size)
    source = env.from_collection(inputs)
    return collect(source.key_by(lambda r: r["key"], key_type=Types.STRING())
                   .process(CountPerKey(), output_type=Types.LONG()))


def agent(inputs: list[dict], mode: str, bundle_size: int | None, journal: str) -> tuple[int, float]:
    env = environment(mode, bundle_size)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{"journal.sqlite.path": journal})
    source = env.from_collection(inputs)
    stream = agents_env.from_datastream(source, lambda r: r["key"], key_type=Types.STRING())
    return collect(stream.apply(trivial_agent()).to_datastream())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--mode", default="thread", help="python.execution-mode (thread, the jobs' default, or process)")
    parser.add_argument("--bundle-size", type=int, default=None, help="python.fn-execution.bundle.size")
    parser.add_argument("--repeat", type=int, default=2, help="alternated runs of each side; the best counts")
    args = parser.parse_args()
    if args.mode == "thread":
        prepare_thread_mode()  # the embedded interpreter needs the venv's packages
    inputs = records(args.records, args.keys)
    few = records(10, args.keys)
    with tempfile.TemporaryDirectory() as directory:
        floor(few, args.mode, args.bundle_size)  # the JVM's own start, counted in neither
        floor_fixed = floor(few, args.mode, args.bundle_size)[1]
        agent_fixed = agent(few, args.mode, args.bundle_size, f"{directory}/warmup.db")[1]
        # Alternated, best of --repeat: a job's speed here varies with what
        # ran before it in the same JVM, so neither side always goes first.
        floor_s = agent_s = float("inf")
        for attempt in range(args.repeat):
            order = ("floor", "agent") if attempt % 2 == 0 else ("agent", "floor")
            for side in order:
                if side == "floor":
                    floor_n, seconds = floor(inputs, args.mode, args.bundle_size)
                    floor_s = min(floor_s, seconds)
                else:
                    agent_n, seconds = agent(inputs, args.mode, args.bundle_size, f"{directory}/journal{attempt}.db")
                    agent_s = min(agent_s, seconds)
    assert floor_n == agent_n == args.records, (floor_n, agent_n)
    print(f"start-up (10 records): floor {floor_fixed:.1f} s, agent {agent_fixed:.1f} s; "
          f"best whole runs of {args.repeat}: floor {floor_s:.1f} s, agent {agent_s:.1f} s")
    floor_rate = floor_n / max(floor_s - floor_fixed, 1e-3)
    agent_rate = agent_n / max(agent_s - agent_fixed, 1e-3)
    print(f"machine: {machine()}; {args.records} records, {args.keys} keys, parallelism 1, "
          f"mode {args.mode}, bundle size {args.bundle_size or 'default'}")
    print(f"bare keyed function : {floor_rate:9.0f} records/s")
    print(f"agent operator      : {agent_rate:9.0f} records/s (SQLite journal)")
    print(f"agent / floor       : {agent_rate / floor_rate:9.2f}")


if __name__ == "__main__":
    main()
