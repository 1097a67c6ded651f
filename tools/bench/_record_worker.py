"""One side of the per-record comparison in ``per_call.py``, run in a fresh
interpreter: the trivial agent (read memory, write memory, send one output)
over N records on K keys, on whichever ``flink_agents`` this interpreter
imports (ours, or Flink Agents 0.3.1 in a side venv). Written against the
0.3.1 API only, and self-contained: it must not put this repository on
``sys.path`` (run it with ``python -I``). Prints one JSON line:
``{"records", "cpu_s", "wall_s", "package"}``.

    python -I tools/bench/_record_worker.py RECORDS KEYS [quiet]
"""

import json
import logging
import sys
import time

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext


class TrivialAgent(Agent):
    @action(InputEvent.EVENT_TYPE)  # 0.3.1's form (a type string); ours takes it too
    @staticmethod
    def count_and_echo(event: Event, ctx: RunnerContext) -> None:
        seen = (ctx.short_term_memory.get("seen") or 0) + 1
        ctx.short_term_memory.set("seen", seen)
        ctx.send_event(OutputEvent(output=seen))


def run(count: int, keys: int) -> int:
    env = AgentsExecutionEnvironment.get_execution_environment()
    inputs = [{"key": f"k{i % keys}", "value": {"n": i}} for i in range(count)]
    outputs = env.from_list(inputs).apply(TrivialAgent()).to_list()
    env.execute()
    return len(outputs)


def main() -> None:
    count, keys = int(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3 and sys.argv[3] == "quiet":
        # 0.3.1's local runner logs three lines per record at INFO by
        # default; "quiet" measures the runtime without its log.
        logging.disable(logging.INFO)
    run(min(count, 2000), keys)  # warm: imports, first-use caches
    wall, cpu = time.perf_counter(), time.process_time()
    produced = run(count, keys)
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
    if produced != count:
        raise SystemExit(f"{produced} outputs for {count} records")
    import flink_agents

    print(json.dumps({"records": count, "cpu_s": cpu_s, "wall_s": wall_s, "package": flink_agents.__file__}))


if __name__ == "__main__":
    main()
