"""How often a checkpoint misses a timer registered inside ``on_timer``.

PyFlink (process mode, flink-python 2.3) applies the timers a Python
function registers as mailbox actions ("PythonTimerRegistration"), and
``AbstractPythonFunctionOperator.prepareSnapshotPreBarrier`` finishes the
bundle without draining them (only ``advanceWatermark`` calls
``drainUnregisteredTimers``). A registration made in ``process_element`` is
applied before the next input, barrier included; one made in ``on_timer``
(itself a mailbox action) waits past the next input: when that input is a
checkpoint barrier, the checkpoint holds neither the timer that fired nor
the one it registered. A job restored from it never fires the chain again.

The agent operator's poll timers are such a chain (each poll registers the
next): a key restored from such a checkpoint is resubmitted only by another
of its timers (a callback's deadline), or never. That is why
``tests/e2e/test_callbacks_e2e.py::test_failover_while_a_key_waits...`` waited
in vain now and then.

One job runs a chain of processing-time timers on one key (each ``on_timer``
sleeps ``--callback-ms``, widening the window, and registers the next one
``--interval-ms`` later) with checkpoints every 100 ms, all retained; then
each of the last ``--restores`` checkpoints is restored into a new job, which
either fires the chain again or not. Printed side by side in one run: the
chain registering one timer ahead, and the chain registering two ahead (the
proposed operator fix: a lost registration leaves the previous callback's
second timer in the checkpoint). Not a test: run it, read the figures.

    .venv/bin/python tools/bench/timer_checkpoint_race.py --restores 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, List

from _common import machine

import cloudpickle
from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction

from tests.support.flink_jobs import Collected, completed_checkpoints, jsonl_stream, mini_cluster_env, write_jsonl

# The chain runs in Flink's Python workers: ship this module by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Chain(KeyedProcessFunction):
    """A chain of processing-time timers on each key, ``ahead`` registered
    at once; each callback takes ``callback_s``."""

    def __init__(self, interval_ms: int, callback_s: float, ahead: int) -> None:
        self.interval_ms = interval_ms
        self.callback_s = callback_s
        self.ahead = ahead

    def _register(self, timers: Any) -> None:
        now = timers.current_processing_time()
        for n in range(1, self.ahead + 1):
            timers.register_processing_time_timer((now // self.interval_ms + n) * self.interval_ms)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self._register(ctx.timer_service())
        yield ("element", value["key"])

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        time.sleep(self.callback_s)
        self._register(ctx.timer_service())
        yield ("tick", timestamp)


def _job(tmp: Path, name: str, chain: Chain, **options: str) -> Collected:
    env = mini_cluster_env(1, tmp / "checkpoints", 100, **{
        "python.fn-execution.bundle.size": "1",  # as the agent operator sets it
        "execution.checkpointing.num-retained": "1000",
        **options,
    })
    records = jsonl_stream(env, tmp / "input", "source", "source-uid", "decode-uid")
    ticks = records.key_by(lambda r: r["key"], key_type=Types.STRING()).process(
        chain, output_type=Types.PICKLED_BYTE_ARRAY()
    ).uid("chain")
    return Collected(ticks, name)


def lost_after_restores(ahead: int, interval_ms: int, callback_s: float, run_s: float, restores: int) -> List[bool]:
    """For each of the last ``restores`` checkpoints: whether a job restored
    from it never fired the chain again (within 15 s)."""
    tmp = Path(tempfile.mkdtemp(prefix="timer-race-"))
    (tmp / "input").mkdir()
    write_jsonl(tmp / "input" / "one-key.jsonl", [{"key": "k"}])
    chain = Chain(interval_ms, callback_s, ahead)
    first = _job(tmp, f"chain-{ahead}", chain)
    try:
        first.take(3, timeout_s=120)
        time.sleep(run_s)
    finally:
        first.close()
    lost = []
    for number, path, _ in completed_checkpoints(tmp / "checkpoints")[-restores:]:
        restored = _job(tmp, f"chain-{ahead}-from-{number}", chain, **{
            "execution.state-recovery.path": path.as_uri(),
            "execution.state-recovery.ignore-unclaimed-state": "true",
        })
        try:
            restored.take(1, timeout_s=15)
            lost.append(False)
        except AssertionError:
            lost.append(True)
        finally:
            restored.close()
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--callback-ms", type=float, default=150)
    parser.add_argument("--run-s", type=float, default=3.0)
    parser.add_argument("--restores", type=int, default=8)
    args = parser.parse_args()
    print(f"machine: {machine()}; chain every {args.interval_ms} ms, callbacks of {args.callback_ms:.0f} ms, "
          f"checkpoints every 100 ms; {args.restores} restores each")
    for ahead in (1, 2):
        lost = lost_after_restores(ahead, args.interval_ms, args.callback_ms / 1000, args.run_s, args.restores)
        print(f"timers registered ahead: {ahead}: chain lost after {sum(lost)} of {len(lost)} restores "
              f"({sum(lost) / len(lost):.2f})")


if __name__ == "__main__":
    sys.exit(main())
