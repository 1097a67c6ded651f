"""Counters of what the engine did; the Flink driver mirrors them into Flink
metrics, the local runner returns them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict

__all__ = ["RunCounters"]


@dataclass
class RunCounters:
    """Totals since the engine started."""

    records: int = 0
    events: int = 0
    actions: int = 0
    outputs: int = 0
    unhandled_events: int = 0
    journal_writes: int = 0
    calls_executed: int = 0
    calls_replayed: int = 0
    steps_replayed: int = 0
    action_retries: int = 0
    records_skipped: int = 0
    in_flight: int = 0  # runs in progress now (a gauge)
    max_in_flight: int = 0  # the most runs in progress at once
    callbacks_created: int = 0
    callbacks_resolved: int = 0
    callbacks_rejected: int = 0
    callbacks_timed_out: int = 0
    callbacks_cancelled: int = 0
    callbacks_closed: int = 0  # still pending when the run ended
    progress_publishes: int = 0  # progress stream: one per commit of a run
    prune_failures: int = 0  # journal prunes that failed (tried again later)

    def as_dict(self) -> Dict[str, int]:
        return asdict(self)
