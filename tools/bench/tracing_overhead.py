"""Per-record cost of traces: tracing off and on, side by side, alternated.

The agent makes one journaled call (``ctx.durable_execute``) and sends one
output per record, so each record's run commits twice and its trace has
three spans (run, step, call) plus the input step. Each mode runs in a fresh
process over the local runner (in-memory journal), alternated over rounds:

- ``off``: no ``OTEL_TRACES_EXPORTER`` (the default): the engine builds no
  trace, the record path pays one ``is None`` test per run;
- ``on``: ``OTEL_TRACES_EXPORTER=otlp`` over OTLP/HTTP (protobuf) to a
  receiver this script serves on 127.0.0.1 (its decoding CPU is not the
  job's); the job's CPU includes the SDK's export thread and the marks;
- ``baseline`` (``--baseline REV``): the same agent on a checkout of REV
  (a commit before traces existed), for "off costs nothing measurable".

Not a test: run it, read the figures.

    .venv/bin/python tools/bench/tracing_overhead.py --records 20000 --rounds 3 --baseline a7e42d8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine

_CHILD = r"""
import json, sys, time
from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment

def double(n):
    return 2 * n

def act(event, ctx):
    ctx.send_event(OutputEvent(output=ctx.durable_execute(double, event.input["n"])))

count, keys = int(sys.argv[1]), int(sys.argv[2])
agent = Agent().add_action("act", [InputEvent], act)
records = [{"key": f"k{i % keys}", "value": {"n": i}} for i in range(count)]
env = AgentsExecutionEnvironment.get_execution_environment()
wall, cpu = time.perf_counter(), time.process_time()
outputs = env.from_list(records).apply(agent).to_list()
env.execute()
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "outputs": len(outputs)}))
"""


def _run(mode: str, count: int, keys: int, endpoint: str, baseline: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(baseline if mode == "baseline" else REPO)
    if mode == "on":
        env.update({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "bench"})
    done = subprocess.run([sys.executable, "-c", _CHILD, str(count), str(keys)], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["outputs"] != count:
        raise SystemExit(f"{mode}: {result['outputs']} outputs for {count} records")
    return result


def _baseline_checkout(rev: str) -> Path:
    path = Path(tempfile.gettempdir()) / f"flink-agents-bench-{rev}"
    if not path.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev], check=True,
                       capture_output=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=31)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="a commit to compare with (checked out beside the repo)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from tests.support.otlp_receiver import OtlpReceiver

    baseline = _baseline_checkout(args.baseline) if args.baseline else None
    modes = (["baseline"] if baseline else []) + ["off", "on"]
    results: dict = {mode: [] for mode in modes}
    with OtlpReceiver() as receiver:
        for _ in range(args.rounds):
            for mode in modes:
                results[mode].append(_run(mode, args.records, args.keys, receiver.endpoint, baseline))
        time.sleep(0.5)
        spans = len(receiver.spans)
    print(f"{machine()}; {args.records} records on {args.keys} keys, {args.rounds} rounds alternated, median")
    per_record = {m: (statistics.median(r["wall"] for r in rs) / args.records * 1e6,
                      statistics.median(r["cpu"] for r in rs) / args.records * 1e6) for m, rs in results.items()}
    reference = per_record["off"]
    print(f"{'mode':<10}{'wall us/record':>16}{'CPU us/record':>16}{'wall vs off':>13}{'CPU vs off':>12}")
    for mode, (wall, cpu) in per_record.items():
        print(f"{mode:<10}{wall:>16.1f}{cpu:>16.1f}{wall / reference[0]:>13.2f}{cpu / reference[1]:>12.2f}")
    print(f"spans received: {spans} ({spans / (args.records * args.rounds):.1f} per traced record)")


if __name__ == "__main__":
    main()
