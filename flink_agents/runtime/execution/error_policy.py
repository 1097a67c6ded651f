"""What happens when an action raises: the error strategies, in one place.

``fail`` (default) fails the record and so the job; ``retry`` runs the action
again with exponential backoff (full jitter: each wait drawn from
``[0, ceiling]``), then fails; ``park`` retries the same way,
then keeps the record queued in keyed state and pauses its key (a run-control
pause request naming the failure: ``runtime.features.run_control``) until an
operator resumes or retries it after a fix; ``skip`` drops the record's run
(short-term memory as before the record) and emits an error record to the
error side output. Set job-wide in the agent configuration, or per action in
its ``action_config`` (options declared in ``flink_agents.api.core_options``;
Flink Agents 0.3.1's spellings in brackets work too):

    error_strategy ["error-handling-strategy"]: "fail" | "retry" | "skip" ["ignore"]
    error_retry.max_attempts: int (default 3 under retry, counting the first run)
        ["max-retries": retries after the first run, i.e. attempts - 1]
    error_retry.initial_backoff_s: float (default 0.1) ["retry-wait-interval": int seconds]
    error_retry.max_backoff_s: float (default 10.0)

With ``skip``, ``error_retry.max_attempts`` also applies before skipping
(default 1: skip at the first failure). A ``NondeterminismError`` is never
retried or skipped.

The action timeout counts as an action error:

    action.timeout_s: float (job-wide; default none)
    timeout_s: float (per action, over the job's; ``None`` turns it off)

An async action still running after it is cancelled and fails with a
``TimeoutError`` naming action, key, record and timeout, which the strategy
handles like any error. A sync action cannot be interrupted: the job-wide
option does not apply to it, and a per-action one is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from flink_agents._backoff import backoff_ceiling_s, full_jitter
from flink_agents.api.configuration import ConfigOption, ReadableConfiguration, readable
from flink_agents.api.core_options import RuntimeOptions

__all__ = ["ErrorPolicy", "STRATEGIES"]

STRATEGIES = ("fail", "retry", "skip", "park")
_TIMEOUT = RuntimeOptions.ACTION_TIMEOUT_S  # job-wide; per action also ``timeout_s``
_ACTION_TIMEOUT_OPTIONS = ("timeout_s", _TIMEOUT.key)


@dataclass(frozen=True)
class ErrorPolicy:
    """A resolved error strategy."""

    strategy: str = "fail"
    max_attempts: int = 1
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    timeout_s: float | None = None  # async actions only (see the module docstring)

    @property
    def attempts_allowed(self) -> int:
        return self.max_attempts if self.strategy in ("retry", "skip", "park") else 1

    def backoff_ceiling_s(self, attempt: int) -> float:
        """The longest delay after failed ``attempt`` (1-based):
        initial * 2^(attempt-1), capped at ``max_backoff_s``."""
        return backoff_ceiling_s(attempt - 1, self.initial_backoff_s, self.max_backoff_s)

    def backoff_s(self, attempt: int, uniform: Callable[[float, float], float] | None = None) -> float:
        """Delay after failed ``attempt`` (1-based), drawn uniformly from
        ``[0, backoff_ceiling_s(attempt)]`` (full jitter, ``flink_agents._backoff``):
        the keys and subtasks that failed together retry spread out.

        Args:
            attempt: The attempt that failed, from 1.
            uniform: ``(low, high) -> float``; default a system random source.
        """
        return full_jitter(self.backoff_ceiling_s(attempt), uniform)

    @staticmethod
    def for_action(
        action_config: Mapping[str, Any], job_config: Mapping[str, Any], is_async: bool = True, action: str = "?"
    ) -> "ErrorPolicy":
        """The policy of an action: its own config over the job's.

        Args:
            is_async: Whether the action is ``async def`` (only those time out).
            action: Its name, for errors.

        Raises:
            ValueError: Unknown strategy, a non-positive attempt count or
                timeout, a value of the wrong type, one option set under two
                spellings to different values, or a per-action timeout on a
                sync action (naming the key and, per action, the action).
        """
        own, job = readable(action_config), readable(job_config)

        def option(declared: ConfigOption) -> Any:
            try:
                value = own.get_optional(declared)
            except ValueError as error:
                raise ValueError(f"action {action!r}: {error}") from None
            if value is None:
                value = job.get_optional(declared)
            return declared.get_default_value() if value is None else value

        strategy = option(RuntimeOptions.ERROR_STRATEGY)
        max_attempts = option(RuntimeOptions.ERROR_RETRY_MAX_ATTEMPTS) or (3 if strategy in ("retry", "park") else 1)
        return ErrorPolicy(
            strategy=strategy,
            max_attempts=max_attempts,
            initial_backoff_s=float(option(RuntimeOptions.ERROR_RETRY_INITIAL_BACKOFF_S)),
            max_backoff_s=float(option(RuntimeOptions.ERROR_RETRY_MAX_BACKOFF_S)),
            timeout_s=_timeout_s(own, job, is_async, action),
        )


def _timeout_s(
    action_config: ReadableConfiguration, job_config: ReadableConfiguration, is_async: bool, action: str
) -> float | None:
    """The action's timeout in seconds (None: none)."""
    for name in _ACTION_TIMEOUT_OPTIONS:
        if name in action_config:
            own = True
            value = action_config[name]
            break
    else:
        own, name, value = False, _TIMEOUT.key, job_config.get(_TIMEOUT.key)
    if value is None:
        return None
    try:
        timeout_s = _TIMEOUT.convert(value, name)
    except ValueError:
        timeout_s = float("nan")
    if not timeout_s > 0:  # also NaN
        raise ValueError(f"{name} of action {action!r} must be a positive number of seconds, not {value!r}")
    if is_async:
        return timeout_s
    if own:
        raise ValueError(
            f"action {action!r} is not async: a sync action cannot be interrupted, so its {name} "
            "cannot be enforced; make it 'async def' or drop the option"
        )
    return None  # the job-wide timeout applies to async actions only
