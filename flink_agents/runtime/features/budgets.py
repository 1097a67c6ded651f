"""Budgets: model calls, tokens and cost per record, per key over a window,
and per job (options ``budget.*``; docs/operations.md, "Budgets").

When: before each model call that would run, the built-in chat action's
(``chat:<setup>``) and an agent framework's journaled model request
(``chat:<framework>/<agent>``: Pydantic AI, OpenAI Agents SDK, LangGraph,
ADK), both through ``ActionContext.journaled_call(_at)``. A call the journal
already holds replays and is never refused: it happened, and what it used is
counted as it was journaled. The model's usage is known only once it
answered, so the call that reaches a token or cost budget completes and the
record's next call is refused: a budget is overshot by at most one call.

What counts, from the journal, so a replay never counts twice:

- the record: every model call its run's journal holds so far (loaded,
  committed and buffered: ``RunJournal.entries_so_far``), and the model
  calls a sub-agent call journaled with its result (``tokens``); tokens are
  input + output (cached input within input, reasoning within output); cost
  is ``usage.prices``'s (a call on a model the table does not price adds no
  cost: set a token budget beside a cost one for those);
- the key: the records of the key that finished in the current window
  (``KeyState.budget``, keyed state: it is checkpointed and moves with the
  key on rescaling), plus the record's own so far. A window is fixed: it
  starts with the first record counted after the previous one ended
  (``budget.key.window_s``; unset, the key's whole life);
- the job: each subtask takes ``budget.job.* / parallelism`` and counts the
  records it finished since it (re)started, plus the record's own so far
  (not the other records in flight: the overshoot is bounded by them). A
  restart or a rescale starts the subtasks' counts again, so the job budget
  bounds a job between restarts; the key budget is the durable one.

A refusal raises ``BudgetExceeded`` (terminal, ``runtime.errors``): the
record follows its error strategy (fail, ``skip``: an error record with
``error_type: BudgetExceeded`` and the message naming the budget, its limit
and what was used; ``park``: queued, its key paused, until an operator
raises the budget and retries it), and the built-in counter
``budgetRefusals`` (``budget.<option>`` sub-counters too) counts it. Never a
silent truncation: a refused record emits none of its outputs.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.resource import ResourceType
from flink_agents.runtime.durability.codec import decode_outcome
from flink_agents.runtime.errors import BudgetExceeded
from flink_agents.runtime.execution.token_usage import AGENT_PREFIX, CHAT_PREFIX, sub_agent_tokens
from flink_agents.runtime.execution.usage import PriceTable, Usage, model_call_usage

if TYPE_CHECKING:
    from flink_agents.runtime.execution.run import Run

__all__ = ["BUDGET_WINDOW_VERSION", "Budgets", "RecordUsage", "record_usage", "window_from_state"]

BUDGET_WINDOW_VERSION = 1  # of KeyState.budget: {"v", "start_ms", "tokens", "cost_usd"}

_R = RuntimeOptions


@dataclass(frozen=True)
class RecordUsage:
    """What a record (or a window, or a subtask) used: model calls, tokens
    (input + output) and cost in USD."""

    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: "RecordUsage") -> "RecordUsage":
        return RecordUsage(self.calls + other.calls, self.tokens + other.tokens, self.cost_usd + other.cost_usd)


def _call_usage(usage: Optional[Usage], cost: Optional[float]) -> RecordUsage:
    tokens = 0 if usage is None else usage.input_tokens + usage.output_tokens
    return RecordUsage(1, tokens, cost or 0.0)


def record_usage(run: "Run", prices: PriceTable) -> RecordUsage:
    """What ``run``'s record used so far, as its journal holds it (module
    docstring). Each entry is read once per run (``run.budget_seen``)."""
    seen: Dict[Tuple[str, int], RecordUsage] = run.budget_seen
    total = RecordUsage()
    for entry in run.journal.entries_so_far():
        position = (entry.step, entry.ordinal)
        known = seen.get(position)
        if known is None:
            known = seen[position] = _entry_usage(run, prices, entry.function_id, entry.payload)
        total = total + known
    return total


def _entry_usage(run: "Run", prices: PriceTable, function_id: str, payload: str) -> RecordUsage:
    if function_id.startswith(CHAT_PREFIX):
        model, usage = model_call_usage(function_id, payload)
        if model is None and usage is not None:
            model = _setup_model(run, function_id[len(CHAT_PREFIX):])
        return _call_usage(usage, prices.cost(model, usage))
    if function_id.startswith(AGENT_PREFIX) and "error" not in json.loads(payload):
        total = RecordUsage()
        for _, model, usage in sub_agent_tokens(decode_outcome(payload), function_id):
            total = total + _call_usage(usage, prices.cost(model, usage))
        return total
    return RecordUsage()


def _setup_model(run: "Run", resource: str) -> Optional[str]:
    if resource not in run.plan.resources.get(ResourceType.CHAT_MODEL, {}):
        return None  # a framework's agent, not a setup of the plan
    model = getattr(run.resources(resource, ResourceType.CHAT_MODEL), "model", None)
    return str(model) if model else None


def window_from_state(window: Any, now_ms: int, window_s: Optional[float]) -> RecordUsage:
    """What the key used in its current window, from ``KeyState.budget``
    (state read back: anything malformed, of another version, or of a
    window that ended counts as nothing used)."""
    if not isinstance(window, Mapping) or window.get("v") != BUDGET_WINDOW_VERSION:
        return RecordUsage()
    start, tokens, cost = window.get("start_ms"), window.get("tokens"), window.get("cost_usd", 0.0)
    if not (_number(start) and _number(tokens) and _number(cost)):
        return RecordUsage()
    if window_s is not None and now_ms - start >= window_s * 1000:
        return RecordUsage()
    return RecordUsage(0, int(tokens), float(cost))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


class Budgets:
    """The budgets of one engine (a subtask, or the local runner).

    Args:
        config: The job's configuration (``budget.*``, ``usage.prices``).
        prices: The engine's price table.
        parallelism: The subtasks sharing the job's budgets.

    Raises:
        ValueError: A cost budget is set without ``usage.prices`` (nothing
            could count against it); names both keys.
    """

    def __init__(self, config: Any, prices: PriceTable, parallelism: int = 1) -> None:
        get = config.get
        self.prices = prices
        self.record_calls: Optional[int] = get(_R.BUDGET_RECORD_MODEL_CALLS)
        self.record_tokens: Optional[int] = get(_R.BUDGET_RECORD_TOKENS)
        self.record_cost: Optional[float] = get(_R.BUDGET_RECORD_COST_USD)
        self.key_tokens: Optional[int] = get(_R.BUDGET_KEY_TOKENS)
        self.key_cost: Optional[float] = get(_R.BUDGET_KEY_COST_USD)
        self.window_s: Optional[float] = get(_R.BUDGET_KEY_WINDOW_S)
        share = max(1, parallelism)
        job_tokens, job_cost = get(_R.BUDGET_JOB_TOKENS), get(_R.BUDGET_JOB_COST_USD)
        self.parallelism = share
        self.job_tokens: Optional[float] = None if job_tokens is None else job_tokens / share
        self.job_cost: Optional[float] = None if job_cost is None else job_cost / share
        for option, value in ((_R.BUDGET_RECORD_COST_USD, self.record_cost), (_R.BUDGET_KEY_COST_USD, self.key_cost),
                              (_R.BUDGET_JOB_COST_USD, job_cost)):
            if value is not None and not prices:
                raise ValueError(f"{option.key} is set but {_R.USAGE_PRICES.key} prices no model: "
                                 "no call would count against it")
        self._job_used = RecordUsage()
        self._lock = threading.Lock()

    @staticmethod
    def of(config: Any, prices: PriceTable, parallelism: int = 1) -> Optional["Budgets"]:
        """The engine's budgets, None when no ``budget.*`` option is set
        (then nothing is read or kept per call or per key)."""
        budgets = Budgets(config, prices, parallelism)
        return budgets if budgets.any else None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (
            self.record_calls, self.record_tokens, self.record_cost, self.key_tokens, self.key_cost,
            self.job_tokens, self.job_cost))

    @property
    def keyed(self) -> bool:
        """Whether a key budget is set (then ``KeyState.budget`` is kept)."""
        return self.key_tokens is not None or self.key_cost is not None

    def check(self, run: "Run") -> None:
        """Before a model call of ``run`` that would run (not a replay).

        Raises:
            BudgetExceeded: The record, its key's window or this subtask's
                share of the job reached a budget; counted in the metrics.
        """
        used = record_usage(run, self.prices)
        refused = self._refusal(used, run)
        if refused is not None:
            run.counters.metrics.builtin.budget_refused(refused.budget)
            raise refused

    def _refusal(self, used: RecordUsage, run: "Run") -> Optional[BudgetExceeded]:
        where = f"key {run.identity.key!r}, record #{run.identity.seq}"
        for option, limit, value in (
            (_R.BUDGET_RECORD_MODEL_CALLS, self.record_calls, used.calls),
            (_R.BUDGET_RECORD_TOKENS, self.record_tokens, used.tokens),
            (_R.BUDGET_RECORD_COST_USD, self.record_cost, used.cost_usd),
        ):
            if limit is not None and value >= limit:
                return BudgetExceeded(option.key, limit, value, f"{where} used it")
        if self.keyed:
            window = window_from_state(run.state.budget, run.clock.now_ms(), self.window_s) + used
            span = f"in its window of {self.window_s:g} s" if self.window_s is not None else "over its life"
            for option, limit, value in ((_R.BUDGET_KEY_TOKENS, self.key_tokens, window.tokens),
                                         (_R.BUDGET_KEY_COST_USD, self.key_cost, window.cost_usd)):
                if limit is not None and value >= limit:
                    return BudgetExceeded(option.key, limit, value, f"key {run.identity.key!r} {span}; "
                                          f"refused at record #{run.identity.seq}")
        if self.job_tokens is not None or self.job_cost is not None:
            with self._lock:
                job = self._job_used + used
            share = f"this subtask's share, 1/{self.parallelism} of the job's; refused at {where}"
            for option, limit, value in ((_R.BUDGET_JOB_TOKENS, self.job_tokens, job.tokens),
                                         (_R.BUDGET_JOB_COST_USD, self.job_cost, job.cost_usd)):
                if limit is not None and value >= limit:
                    return BudgetExceeded(option.key, limit, value, share)
        return None

    def record_finished(self, window: Any, usage: Optional[Usage], cost: Optional[float],
                        now_ms: int) -> Optional[Dict[str, Any]]:
        """Count a finished record's usage (its run's totals,
        ``token_usage.run_totals``) in this subtask's job count, and return
        the key's window with it added (the new ``KeyState.budget``), or
        None when no key budget is set."""
        spent = RecordUsage(0, 0 if usage is None else usage.input_tokens + usage.output_tokens, cost or 0.0)
        with self._lock:
            self._job_used = self._job_used + spent
        if not self.keyed:
            return None
        current = window_from_state(window, now_ms, self.window_s)
        start = int(window["start_ms"]) if _still_open(window, now_ms, self.window_s) else now_ms
        total = current + spent
        return {"v": BUDGET_WINDOW_VERSION, "start_ms": start, "tokens": total.tokens, "cost_usd": total.cost_usd}

    @property
    def job_used(self) -> RecordUsage:
        """What this subtask's finished records used since it started."""
        with self._lock:
            return self._job_used


def _still_open(window: Any, now_ms: int, window_s: Optional[float]) -> bool:
    """Whether ``window`` (``KeyState.budget``) is a readable window that
    has not ended at ``now_ms``."""
    if not isinstance(window, Mapping) or window.get("v") != BUDGET_WINDOW_VERSION:
        return False
    start = window.get("start_ms")
    if not _number(start):
        return False
    return window_s is None or now_ms - start < window_s * 1000
