"""Backoff with full jitter, for every retry loop of the package.

Exponential backoff alone synchronises retries: eight subtasks that met the
same 429 (or the same store outage) at the same moment wake at the same
moment and meet it again. "Full jitter" (AWS Architecture Blog,
"Exponential Backoff And Jitter", 2015) draws each wait uniformly from
``[0, ceiling]``, where the ceiling is the capped exponential
``min(max_s, initial_s * 2**attempt)``: the waits spread over the window,
so the retries of many callers arrive spread out too, and the expected wait
is half the ceiling.

Used by ``stores.retry.StoreRetry``, the action error policy
(``runtime.execution.error_policy.ErrorPolicy``), the MCP connection's
reconnects and the model cool-downs (``runtime.features.rate_limits``).
The random source is injectable so tests can pin the draw.
"""

from __future__ import annotations

import random
from typing import Callable

__all__ = ["backoff_ceiling_s", "full_jitter"]

_RANDOM = random.SystemRandom()  # not the module's shared generator: user code may seed that


def backoff_ceiling_s(attempt: int, initial_s: float, max_s: float) -> float:
    """The capped exponential ``min(initial_s * 2**attempt, max_s)``, in
    seconds, for ``attempt`` counted from 0."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if attempt > 63:  # 2**64 * anything is past any cap; avoid huge floats
        return max_s
    return min(initial_s * (2 ** attempt), max_s)


def full_jitter(ceiling_s: float, uniform: Callable[[float, float], float] | None = None) -> float:
    """A wait drawn uniformly from ``[0, ceiling_s]``, in seconds.

    Args:
        ceiling_s: The capped exponential backoff (``backoff_ceiling_s``).
        uniform: ``(low, high) -> float``; default a system random source.
    """
    if ceiling_s <= 0:
        return 0.0
    draw = (uniform or _RANDOM.uniform)(0.0, ceiling_s)
    return min(max(draw, 0.0), ceiling_s)
