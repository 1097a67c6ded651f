"""What happens when an action raises: the error strategies, in one place.

``fail`` (default) fails the record and so the job; ``retry`` runs the action
again with exponential backoff, then fails; ``skip`` drops the record's run
(short-term memory as before the record) and emits an error record to the
error side output. Set job-wide in the agent configuration, or per action in
its ``action_config``:

    error_strategy: "fail" | "retry" | "skip"
    error_retry.max_attempts: int (default 3, counting the first run)
    error_retry.initial_backoff_s: float (default 0.1)
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
from typing import Any, Mapping

__all__ = ["ErrorPolicy", "STRATEGIES", "TIMEOUT_OPTION"]

STRATEGIES = ("fail", "retry", "skip")
TIMEOUT_OPTION = "action.timeout_s"  # job-wide; per action also ``timeout_s``
_ACTION_TIMEOUT_OPTIONS = ("timeout_s", TIMEOUT_OPTION)


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
        return self.max_attempts if self.strategy in ("retry", "skip") else 1

    def backoff_s(self, attempt: int) -> float:
        """Delay after failed ``attempt`` (1-based): initial * 2^(attempt-1), capped."""
        return min(self.initial_backoff_s * (2 ** (attempt - 1)), self.max_backoff_s)

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
                timeout, or a per-action timeout on a sync action.
        """

        def option(name: str, default: Any) -> Any:
            return action_config.get(name, job_config.get(name, default))

        strategy = option("error_strategy", "fail")
        if strategy not in STRATEGIES:
            raise ValueError(f"error_strategy must be one of {STRATEGIES}, not {strategy!r}")
        max_attempts = int(option("error_retry.max_attempts", 3 if strategy == "retry" else 1))
        if max_attempts < 1:
            raise ValueError(f"error_retry.max_attempts must be >= 1, not {max_attempts}")
        return ErrorPolicy(
            strategy=strategy,
            max_attempts=max_attempts,
            initial_backoff_s=float(option("error_retry.initial_backoff_s", 0.1)),
            max_backoff_s=float(option("error_retry.max_backoff_s", 10.0)),
            timeout_s=_timeout_s(action_config, job_config, is_async, action),
        )


def _timeout_s(action_config: Mapping[str, Any], job_config: Mapping[str, Any], is_async: bool, action: str) -> float | None:
    """The action's timeout in seconds (None: none)."""
    for name in _ACTION_TIMEOUT_OPTIONS:
        if name in action_config:
            own = True
            value = action_config[name]
            break
    else:
        own, name, value = False, TIMEOUT_OPTION, job_config.get(TIMEOUT_OPTION)
    if value is None:
        return None
    try:
        timeout_s = float(value)
    except (TypeError, ValueError):
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
