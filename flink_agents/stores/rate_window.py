"""The shared rate window port: one job-wide sliding window per connection.

With ``rate_limits.scope: job`` (``runtime.features.rate_limits``) every
subtask of a job claims each model request from a window kept beside the
journal (the same SQLite file or PostgreSQL database every subtask already
opens), so the job as a whole, not each subtask's share, is held to the
limit. A window is named by its ``scope`` (text: the job's journal
namespace and the connection's name) and holds one claim per request:
when it counts from (``claimed_at``, Unix seconds) and the tokens it
counts.

Life of one claim::

    claim ──fits──> counted from now (claim id returned)
      │               └──restamp (the call ended)──> counted from its end, with the reported tokens
      │               └──unclaim (cancelled before the call)──> gone
      └──does not fit──> nothing written; (None, seconds until it may fit)

A claim decides and writes in one transaction, serialised per scope (SQLite:
``BEGIN IMMEDIATE``; PostgreSQL: a transaction advisory lock on the scope),
so two subtasks never both take the last place. It also deletes its scope's
claims older than ``KEEP_S`` (or the longest window, if longer): nothing
else grows.

Clock: PostgreSQL stamps claims with the server's clock, so TaskManagers
on different hosts agree; SQLite (one host) and memory use ``time.time()``.
A caller may pass ``now`` (tests); it is then used as is.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from typing import Dict, Iterable, List, Optional, Tuple

__all__ = ["KEEP_S", "Claim", "InMemoryRateWindow", "RateWindowStore", "check_claim", "keep_s", "new_claim_id",
           "wait_s"]

KEEP_S = 60.0  # claims older than this (or the longest window) are deleted on the next claim
_MIN_WAIT_S = 1e-3

Claim = Tuple[Optional[str], float]  # (claim id, or None if refused; seconds to wait, 0.0 if admitted)


def new_claim_id() -> str:
    """A fresh claim id (32 hex digits), drawn by the caller so a retried
    claim can find its own earlier commit."""
    return uuid.uuid4().hex


def check_claim(requests_cap: Optional[int], requests_window_s: float, tokens: int,
                tokens_cap: Optional[int], tokens_window_s: float) -> None:
    """Refuse arguments no window could hold.

    Raises:
        ValueError: A cap below 1, a window not above 0, or negative tokens.
    """
    for name, cap in (("requests_cap", requests_cap), ("tokens_cap", tokens_cap)):
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"{name} must be a whole number >= 1 (or None), got {cap!r}")
    for name, window in (("requests_window_s", requests_window_s), ("tokens_window_s", tokens_window_s)):
        if not window > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {window!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a whole number >= 0, got {tokens!r}")


def keep_s(requests_window_s: float, tokens_window_s: float) -> float:
    """How long a scope's claims are kept: ``KEEP_S`` or the longest window."""
    return max(KEEP_S, requests_window_s, tokens_window_s)


def wait_s(claims: Iterable[Tuple[float, int]], now: float, requests_cap: Optional[int], requests_window_s: float,
           tokens: int, tokens_cap: Optional[int], tokens_window_s: float) -> float:
    """Seconds until a request of ``tokens`` fits beside ``claims``
    (``(claimed_at, tokens)`` of one scope), 0.0 if it fits now.

    As the subtask's own windows (``rate_limits._Window``): at most
    ``requests_cap`` claims with ``claimed_at`` in ``(now - requests_window_s,
    now]``, and at most ``tokens_cap`` tokens in the tokens window; a request
    over the whole token cap goes alone into an empty window. A refusal
    waits until enough of the oldest claims leave (at least 1 ms).
    """
    claims = sorted(claims)
    waits = [0.0]
    if requests_cap is not None:
        inside = [at for at, _ in claims if at > now - requests_window_s]
        if len(inside) >= requests_cap:
            waits.append(inside[len(inside) - requests_cap] + requests_window_s - now)
    if tokens_cap is not None and tokens:
        inside_tokens = [(at, used) for at, used in claims if at > now - tokens_window_s]
        total = sum(used for _, used in inside_tokens)
        if inside_tokens and total + tokens > tokens_cap:
            needed = total + tokens - tokens_cap
            leaves = inside_tokens[-1][0]  # alone into an empty window
            for at, used in inside_tokens:
                needed -= used
                if needed <= 0:
                    leaves = at
                    break
            waits.append(leaves + tokens_window_s - now)
    longest = max(waits)
    return 0.0 if longest <= 0 else max(longest, _MIN_WAIT_S)


class RateWindowStore(ABC):
    """Where shared rate windows are kept (mixed into the journal stores)."""

    @abstractmethod
    def claim(self, scope: str, requests_cap: Optional[int], requests_window_s: float, tokens: int = 0,
              tokens_cap: Optional[int] = None, tokens_window_s: float = 10.0,
              now: Optional[float] = None) -> Claim:
        """Count one request of ``tokens`` (estimated) in ``scope``'s window
        if it fits, in one transaction serialised per scope (module docstring).

        Args:
            scope: The window's name (job namespace and connection).
            requests_cap: Requests allowed in any ``requests_window_s``
                seconds (None: requests are not limited).
            tokens: The request's estimated tokens.
            tokens_cap: Tokens allowed in any ``tokens_window_s`` seconds
                (None: tokens are not limited).
            now: Unix seconds to decide at; None: the store's clock.

        Returns:
            ``(claim_id, 0.0)`` when counted; ``(None, wait_s)`` when not,
            ``wait_s`` > 0 seconds until the oldest claims in the way leave.

        Raises:
            ValueError: See ``check_claim`` (nothing is written).
            JournalStoreError: The transaction failed (SQL stores; see
                ``stores.errors``); nothing of it is stored.
        """

    @abstractmethod
    def restamp(self, claim_id: str, tokens: Optional[int] = None, now: Optional[float] = None) -> bool:
        """The request of ``claim_id`` ended: it counts from ``now`` (the
        store's clock if None) if later than its stamp, and ``tokens`` (the
        reported usage; None: keep the estimate) replace what it counted.

        Returns:
            Whether the claim was still there (False: it aged out, or was unclaimed).
        """

    @abstractmethod
    def unclaim(self, claim_id: str) -> bool:
        """Delete a claim whose request never ran (cancelled); whether it was there."""


class InMemoryRateWindow(RateWindowStore):
    """Mixin: shared rate windows in process memory, under ``self._lock``
    (the local runner and tests: every engine given the same store shares
    its windows; nothing survives the process)."""

    def _rate_scopes(self) -> Dict[str, Dict[str, List[float]]]:
        scopes = self.__dict__.get("_rate_claims")
        if scopes is None:
            scopes = self.__dict__["_rate_claims"] = {}
        return scopes

    def claim(self, scope: str, requests_cap: Optional[int], requests_window_s: float, tokens: int = 0,
              tokens_cap: Optional[int] = None, tokens_window_s: float = 10.0,
              now: Optional[float] = None) -> Claim:
        check_claim(requests_cap, requests_window_s, tokens, tokens_cap, tokens_window_s)
        with self._lock:  # type: ignore[attr-defined]
            at = time.time() if now is None else float(now)
            claims = self._rate_scopes().setdefault(scope, {})
            horizon = at - keep_s(requests_window_s, tokens_window_s)
            for gone in [claim_id for claim_id, (stamp, _) in claims.items() if stamp <= horizon]:
                del claims[gone]
            wait = wait_s(((stamp, int(used)) for stamp, used in claims.values()), at, requests_cap,
                          requests_window_s, tokens, tokens_cap, tokens_window_s)
            if wait > 0:
                return None, wait
            claim_id = new_claim_id()
            claims[claim_id] = [at, float(tokens)]
            return claim_id, 0.0

    def restamp(self, claim_id: str, tokens: Optional[int] = None, now: Optional[float] = None) -> bool:
        with self._lock:  # type: ignore[attr-defined]
            at = time.time() if now is None else float(now)
            for claims in self._rate_scopes().values():
                found = claims.get(claim_id)
                if found is not None:
                    found[0] = max(found[0], at)
                    if tokens is not None:
                        found[1] = float(tokens)
                    return True
            return False

    def unclaim(self, claim_id: str) -> bool:
        with self._lock:  # type: ignore[attr-defined]
            for claims in self._rate_scopes().values():
                if claims.pop(claim_id, None) is not None:
                    return True
            return False
