"""``Run``: everything one record's run carries, as one object.

The engine (or, for a sub-agent call, the calling action) builds a ``Run``
for each record; the action loop, each step and each ``ActionContext`` read
what they need from it instead of a dozen parameters handed down one by one.
Time goes through its ``Clock``, the runtime's one seam for ``now()`` and
``sleep()``, so tests run a 24-hour wait or a retry backoff in no time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Optional

from flink_agents.api.resource import Resource, ResourceType
from flink_agents.runtime.durability.ids import RunIdentity

if TYPE_CHECKING:
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime.durability.journal import RunJournal
    from flink_agents.runtime.execution.metrics import RunCounters
    from flink_agents.runtime.execution.state import KeyState
    from flink_agents.runtime.execution.usage import PriceTable

__all__ = ["Clock", "NO_SERVICES", "Run", "RunServices", "SYSTEM_CLOCK"]


class Clock:
    """Time as the runtime sees it.

    Args:
        now: Unix seconds (default ``time.time``).
        sleep: ``await sleep(delay_s)`` (default ``asyncio.sleep``).
    """

    __slots__ = ("_now", "_sleep")

    def __init__(self, now: Callable[[], float] | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        self._now = now or time.time
        self._sleep = sleep

    def now(self) -> float:
        """Unix seconds."""
        return self._now()

    def now_ms(self) -> int:
        """Unix milliseconds."""
        return int(self._now() * 1000)

    async def sleep(self, delay_s: float) -> None:
        """Wait ``delay_s`` seconds (cancellable)."""
        if self._sleep is not None:
            await self._sleep(delay_s)
        else:
            await asyncio.sleep(delay_s)

    @staticmethod
    def of(clock: "Clock | Callable[[], float] | None",
           sleep: Callable[[float], Awaitable[None]] | None = None) -> "Clock":
        """``clock`` if it is a ``Clock``, else one reading time from it."""
        if isinstance(clock, Clock):
            return clock if sleep is None else Clock(clock.now, sleep)
        return Clock(clock, sleep)


SYSTEM_CLOCK = Clock()


@dataclass(frozen=True)
class RunServices:
    """What a run's actions reach beyond their own step, each None where the
    host has none: the sub-agent runner, the ``CallbackHub`` and the key's
    steering mailbox."""

    sub_agents: Any = None
    callbacks: Any = None
    steering: Any = None


NO_SERVICES = RunServices()


@dataclass
class Run:
    """One record's run: what it runs, as whom, against what.

    Attributes:
        plan: The (root or child) agent plan.
        identity: Journal id, key and record sequence number.
        state: The key's state; its short-term memory is updated in place.
        journal: The run's journal.
        resources: ``(name, type) -> Resource`` of the plan.
        config: The job's agent configuration (``ctx.config``).
        counters: The engine's counters.
        emit: Where the run's outputs go, as they are dequeued.
        services: Sub-agents, callbacks, steering.
        clock: Time (``now``, ``sleep``).
        event_log: The run's ``RunEventLog`` (``runtime.features.event_log``),
            None when the job logs no events (and for sub-agent runs).
        counted: Positions ``(step, ordinal)`` of journaled calls whose
            usage this run counted in the metrics already
            (``ActionContext.journaled_call``'s ``count``): a retried
            action replays them without counting them again.
        trace: The run's ``RunTrace`` (None: traces are off); a sub-agent
            call's child nests its spans under it.
        tokens: The tokens this run counted, ``[action, model, prompt,
            completion[, cached, reasoning]]`` per model call (a sub-agent
            call's child's included): journaled with a sub-agent's result
            (``runtime.execution.token_usage``).
        prices: The engine's price table (``usage.prices``,
            ``runtime.execution.usage.PriceTable``); None: built from
            ``config`` when first needed (``token_usage.prices_of``).
        budgets: The engine's ``Budgets`` (``runtime.features.budgets``),
            checked before each model call that would run; None: no
            ``budget.*`` option is set (nothing checked).
        budget_seen: What each journal entry of the run used, by position,
            read once (``budgets.record_usage``).
    """

    plan: "AgentPlan"
    identity: RunIdentity
    state: "KeyState"
    journal: "RunJournal"
    resources: Callable[[str, ResourceType], Resource]
    config: Dict[str, Any]
    counters: "RunCounters"
    emit: Callable[[Any], None]
    services: RunServices = NO_SERVICES
    clock: Clock = field(default=SYSTEM_CLOCK)
    event_log: Any = None
    counted: set = field(default_factory=set)
    tokens: list = field(default_factory=list)
    trace: Any = None  # the run's RunTrace (runtime.features.tracing), None when not traced
    prices: Optional["PriceTable"] = None
    budgets: Any = None
    budget_seen: dict = field(default_factory=dict)
