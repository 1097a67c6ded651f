"""How long the SQL stores ride out a transient outage (``StoreRetry``).

A read or write that fails with ``JournalUnavailableError`` (connection lost
or refused, server not answering, SQLite file locked past its busy timeout,
an I/O error) is tried again after a backoff that starts at
``initial_backoff_s`` and doubles up to ``max_backoff_s`` (each wait drawn
with full jitter below that ceiling, ``flink_agents._backoff``, so subtasks
that lost the same database do not all come back at once), reconnecting first
when the connection broke, as long as the next attempt would start within
``timeout_s`` of the call's start; then the last error is raised, with a note
saying how many attempts were made over how long. An attempt in progress is
not cut short, so a call gives up after at most ``timeout_s`` plus one
attempt (the PostgreSQL connect timeout, 10 s, or the SQLite busy timeout,
30 s, bound an attempt). Every other store error is raised at once.

Job configuration keys (``open_journal_store``), all in seconds:

- ``journal.retry.timeout_s``: default 10; 0 turns retrying off.
- ``journal.retry.initial_backoff_s``: default 0.05.
- ``journal.retry.max_backoff_s``: default 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from flink_agents._backoff import full_jitter

from flink_agents.api.configuration import readable
from flink_agents.api.core_options import RuntimeOptions

__all__ = ["RETRY_OPTIONS", "StoreRetry"]

RETRY_OPTIONS = (
    RuntimeOptions.JOURNAL_RETRY_TIMEOUT_S.key,
    RuntimeOptions.JOURNAL_RETRY_INITIAL_BACKOFF_S.key,
    RuntimeOptions.JOURNAL_RETRY_MAX_BACKOFF_S.key,
)


@dataclass(frozen=True)
class StoreRetry:
    """Bounded exponential backoff for transient store failures.

    Attributes:
        timeout_s: How long after a call's start a retry may still begin,
            in seconds; 0 means never.
        initial_backoff_s: The first wait, in seconds.
        max_backoff_s: The longest wait, in seconds (the waits double up to it).
        jitter: Draw each wait uniformly below its ceiling (full jitter);
            False gives the ceilings themselves (tests that count waits).
        uniform: ``(low, high) -> float`` for the draw; default a system
            random source. Not part of equality.

    Raises:
        ValueError: A value is negative, or ``max_backoff_s`` is below
            ``initial_backoff_s``.
    """

    timeout_s: float = 10.0
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    jitter: bool = True
    uniform: Callable[[float, float], float] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "initial_backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"StoreRetry.{name} must be a number of seconds >= 0, got {value!r}")
        if self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(
                f"StoreRetry.max_backoff_s ({self.max_backoff_s}) is below "
                f"initial_backoff_s ({self.initial_backoff_s})"
            )

    def ceilings(self) -> Iterator[float]:
        """The ceilings of the waits, in seconds: initial, doubling, capped.
        Endless: the caller stops at ``timeout_s``."""
        backoff = self.initial_backoff_s
        while True:
            yield backoff
            backoff = min(backoff * 2, self.max_backoff_s) if backoff else self.max_backoff_s

    def backoffs(self) -> Iterator[float]:
        """The waits between attempts, in seconds: each drawn uniformly from
        ``[0, ceiling]`` (``ceilings``) with ``jitter``, else the ceilings.
        Endless: the caller stops at ``timeout_s``."""
        for ceiling in self.ceilings():
            yield full_jitter(ceiling, self.uniform) if self.jitter else ceiling

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "StoreRetry":
        """The policy the ``journal.retry.*`` keys of ``config`` give; missing
        keys take the defaults.

        Raises:
            ValueError: A value is not a number, or out of range (naming the key).
        """
        options = readable(config)
        values = {}
        for option in (
            RuntimeOptions.JOURNAL_RETRY_TIMEOUT_S,
            RuntimeOptions.JOURNAL_RETRY_INITIAL_BACKOFF_S,
            RuntimeOptions.JOURNAL_RETRY_MAX_BACKOFF_S,
        ):
            value = options.get_optional(option)  # ValueError naming the key
            if value is not None:
                values[option.key.rsplit(".", 1)[1]] = value
        try:
            return cls(**values)
        except ValueError as error:
            raise ValueError(f"journal.retry.*: {error}") from None
