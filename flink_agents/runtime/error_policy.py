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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ErrorPolicy", "STRATEGIES"]

STRATEGIES = ("fail", "retry", "skip")


@dataclass(frozen=True)
class ErrorPolicy:
    """A resolved error strategy."""

    strategy: str = "fail"
    max_attempts: int = 1
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 10.0

    @property
    def attempts_allowed(self) -> int:
        return self.max_attempts if self.strategy in ("retry", "skip") else 1

    def backoff_s(self, attempt: int) -> float:
        """Delay after failed ``attempt`` (1-based): initial * 2^(attempt-1), capped."""
        return min(self.initial_backoff_s * (2 ** (attempt - 1)), self.max_backoff_s)

    @staticmethod
    def for_action(action_config: Mapping[str, Any], job_config: Mapping[str, Any]) -> "ErrorPolicy":
        """The policy of an action: its own config over the job's.

        Raises:
            ValueError: Unknown strategy or a non-positive attempt count.
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
        )
