"""Rate limits and 429 back-pressure for model connections (docs/operations.md,
"Rate limits").

A chat or embedding model connection may carry ``requests_per_minute``,
``tokens_per_minute`` and ``max_concurrent_requests`` (descriptor arguments,
or ``rate_limits.<connection>.<limit>`` in the agent configuration; the
descriptor wins). Each subtask builds one ``ConnectionLimiter`` per limited
connection. How the job's subtasks share a limit is the scope
(``rate_limits.scope``, or ``rate_limits.<connection>.scope`` for one
connection):

- ``subtask`` (the default): each subtask holds itself to ``limit //
  parallelism`` of each limit (at least 1), so the job's subtasks together
  never exceed the limit, without talking to each other. A key skew that
  leaves a subtask idle leaves its share unused (measured: a 600 rpm limit
  at parallelism 4 gave the review job about 450 rpm).
- ``job``: the per-minute limits are held job-wide. Each subtask keeps its
  own FIFO queue, cool-down and windows at the full limit, and once a call
  has its local turn it also claims a place in one window per connection
  shared by the whole job, kept in the journal store every subtask already
  opens (``stores.rate_window``: SQLite file, PostgreSQL, or memory for the
  local runner), named by the job's journal namespace and the connection.
  A refused claim waits until the store says a place frees (plus a few ms
  of full jitter) and claims again, holding the subtask's queue head, so
  the order of turns stays FIFO. A busy subtask so gets whatever the idle
  ones leave, and the job together never exceeds the limit. Cost: one
  store transaction per request (serialised per connection: SQLite's write
  lock, a PostgreSQL advisory lock), on the engine's I/O threads, never on
  the event loop, plus one to restamp the claim when the call ends.
  ``max_concurrent_requests`` stays a per-subtask share in this scope: a
  count of calls in flight kept in a store would outlive a crashed worker
  and hold its places forever, where a claim in a window simply ages out.
  A claim the store cannot make (``JournalStoreError``, after the store's
  own retries) fails the call with that error.

Windows: a per-minute share is enforced as a sliding log over 10 s holding
a sixth of the share (rounded down), so no 10 s window, and so no minute,
ever sees more than the rate (a provider that meters a minute's quota over
10 s sees no excess); a share below 6 per minute uses a 60 s window. A
request counts from its admission until its call ends, then from its end:
the provider saw it in between, so the limiter's window always covers the
provider's, whatever the latency (a request is never admitted into a
window the provider still counts as full). Tokens are
counted before the call from an estimate of the prompt (``ceil(chars / 4)``
plus 4 per message, as ``conversation_max_tokens``), then corrected to the
provider's reported usage (input plus output tokens) when the reply lands,
so later requests wait for what was really used. A single request larger
than the whole window's tokens goes alone into an empty window.

Waiting: a call waits for its turn as an ``await`` on the run's event loop
(a future the limiter completes in FIFO order, and a loop timer for the
window), never a sleep on a thread; other keys' runs go on meanwhile, and
a key's records keep their order (a key runs one record at a time). A
synchronous ``chat``/``embed`` called on a worker thread waits on that
thread for the same FIFO turn on the loop.

Back-pressure: a ``ModelRateLimited`` or ``ModelOverloaded`` from the
connection sets a cool-down for the connection in the subtask: the
provider's ``Retry-After`` (``ModelCallError.retry_after_s``) when it gave
one, else a full-jitter backoff doubling per consecutive refusal (0.5 s up
to 30 s); no call of that connection starts in the subtask before it ends.
The error itself still reaches the action (its error strategy decides).
Cool-downs apply to every connection, limited or not.

Replays never reach the connection (the journal answers), so nothing here
counts or waits for them.

Metrics, under ``connection.<name>``: ``rateLimitWaitMs`` (histogram of
the time each call waited for its turn, a shared window's waits included),
``rateLimitWaits`` (calls that had to wait), ``modelRateLimited`` (429 and overload answers seen) and
``rateLimitCoolDownMs`` (cool-down time set).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from collections.abc import Mapping  # not typing.Mapping: an isinstance check through typing costs a few us
from typing import Any, Awaitable, Callable, Deque, List, Optional, Set, Tuple

from flink_agents._backoff import backoff_ceiling_s, full_jitter
from flink_agents.api.chat_models.errors import ModelOverloaded, ModelRateLimited
from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.resource import Resource, ResourceType

__all__ = [
    "JOB", "LIMIT_ARGUMENTS", "SCOPES", "SUBTASK", "ConnectionLimiter", "Limits", "RateLimits", "SharedWindow",
    "estimate_tokens",
]

log = logging.getLogger(__name__)

LIMIT_ARGUMENTS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")
LIMITED_TYPES = (ResourceType.CHAT_MODEL_CONNECTION, ResourceType.EMBEDDING_MODEL_CONNECTION)
_COOL_DOWN_INITIAL_S = 0.5
_COOL_DOWN_MAX_S = 30.0
_CLAIM_JITTER_S = 0.02  # full jitter added to a refused claim's wait (subtasks waking together)
SUBTASK = "subtask"
JOB = "job"
SCOPES = (SUBTASK, JOB)


@dataclass(frozen=True)
class Limits:
    """The limits of one connection (None: unlimited)."""

    requests_per_minute: Optional[int] = None
    tokens_per_minute: Optional[int] = None
    max_concurrent_requests: Optional[int] = None

    def __post_init__(self) -> None:
        for name in LIMIT_ARGUMENTS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a whole number >= 1 (or unset), got {value!r}")

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in LIMIT_ARGUMENTS)

    def share(self, parallelism: int) -> "Limits":
        """One subtask's share: each limit ``// parallelism``, at least 1."""
        def part(value: Optional[int]) -> Optional[int]:
            return None if value is None else max(1, value // max(1, parallelism))
        return Limits(*(part(getattr(self, name)) for name in LIMIT_ARGUMENTS))

    def job_scoped(self, parallelism: int) -> "Limits":
        """One subtask's local limits in the ``job`` scope: the per-minute
        limits whole (the shared window holds the job to them), the
        concurrency bound its ``// parallelism`` share."""
        return Limits(self.requests_per_minute, self.tokens_per_minute,
                      self.share(parallelism).max_concurrent_requests)


def estimate_tokens(messages: Any) -> int:
    """Tokens a prompt will use, estimated before the call: ``ceil(chars / 4)``
    plus 4 per message (chat messages), or per input text (embeddings)."""
    if isinstance(messages, str):
        messages = [messages]
    total = 0
    for message in messages or ():
        text = message if isinstance(message, str) else getattr(message, "content", "") or ""
        total += math.ceil(len(text) / 4) + 4
    return total


class _Window:
    """A sliding log: at most ``capacity`` units in any ``window_s``.

    An entry counts from its call's admission and, once the call ended,
    from its end (``restamp``): the provider saw the request between the
    two, so a window measured from the end covers the provider's window
    whatever the latency, and no request is admitted into a window the
    provider still counts as full.
    """

    def __init__(self, capacity: int, window_s: float) -> None:
        self.capacity = capacity
        self.window_s = window_s
        self._entries: List[List[float]] = []  # [time, units]

    def _prune(self, now: float) -> float:
        horizon = now - self.window_s
        if self._entries and min(e[0] for e in self._entries) <= horizon:
            self._entries = [e for e in self._entries if e[0] > horizon]
        return sum(e[1] for e in self._entries)

    def wait_s(self, now: float, units: float) -> float:
        """How long until ``units`` fit (0: now; always > 0 otherwise)."""
        used = self._prune(now)
        if not self._entries or used + units <= self.capacity:
            return 0.0
        needed = used + units - self.capacity
        leaves = sorted(self._entries)
        for at, amount in leaves:
            needed -= amount
            if needed <= 0:
                return max(at + self.window_s - now, 1e-3)
        return max(leaves[-1][0] + self.window_s - now, 1e-3)  # alone into an empty window

    def take(self, now: float, units: float) -> List[float]:
        entry = [now, float(units)]
        self._entries.append(entry)
        return entry

    def restamp(self, entry: List[float], now: float, units: Optional[float] = None) -> None:
        """The call of ``entry`` ended at ``now``; ``units``, when known
        (the reported usage), replaces what it counted."""
        entry[0] = max(entry[0], now)
        if units is not None:
            entry[1] = float(units)


def _capacity(per_minute: int, window_s: float) -> Tuple[int, float]:
    """``(capacity, window_s)`` holding ``per_minute``: ``per_minute *
    window_s / 60`` (rounded down) per ``window_s``, or, below 1, the whole
    ``per_minute`` per 60 s."""
    capacity = int(per_minute * window_s // 60)
    if capacity < 1:
        return per_minute, 60.0
    return capacity, window_s


def _window_for(per_minute: int, window_s: float) -> _Window:
    return _Window(*_capacity(per_minute, window_s))


class SharedWindow:
    """One connection's job-wide window in the journal store (``job`` scope).

    Args:
        store: A ``stores.rate_window.RateWindowStore`` (the journal store).
        scope: The window's name: the job's journal namespace and the
            connection's name (``RateLimits.scope_name``).
        limits: The job's limits (whole, not shared out).
        window_s: The per-minute limits' window, as the local ones (``_capacity``).
        io: ``await io(fn, *args)`` runs ``fn`` off the loop (the engine's
            ``Executors.io``).
    """

    def __init__(self, store: Any, scope: str, limits: Limits, window_s: float,
                 io: Callable[..., Awaitable[Any]]) -> None:
        self.store = store
        self.scope = scope
        self._io = io
        self.requests_cap, self.requests_window_s = (
            _capacity(limits.requests_per_minute, window_s) if limits.requests_per_minute else (None, window_s))
        self.tokens_cap, self.tokens_window_s = (
            _capacity(limits.tokens_per_minute, window_s) if limits.tokens_per_minute else (None, window_s))
        self._pending: Set["asyncio.Future[Any]"] = set()  # fire-and-forget writes, held until done

    async def claim(self, tokens: int) -> Tuple[Optional[str], float]:
        """``(claim id, 0.0)`` or ``(None, seconds to wait)``; one store
        transaction on the I/O threads.

        Raises:
            JournalStoreError: The store could not make the claim.
        """
        return await self._io(self.store.claim, self.scope, self.requests_cap, self.requests_window_s,
                              int(tokens), self.tokens_cap, self.tokens_window_s)

    def restamp(self, claim_id: str, used_tokens: Optional[int]) -> None:
        """The call ended: count it from now, with its reported tokens.
        Fire and forget on the I/O threads; a failure is logged. On the loop."""
        self._later("restamp", self.store.restamp, claim_id, used_tokens)

    def unclaim(self, claim_id: str) -> None:
        """Drop a claim whose call never ran (cancelled). As ``restamp``."""
        self._later("unclaim", self.store.unclaim, claim_id)

    def _later(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            future = asyncio.ensure_future(self._io(fn, *args))
        except RuntimeError as error:  # the engine closed its I/O pool
            log.warning("shared rate window %s: %s of claim %s not written: %s", self.scope, what, args[0], error)
            return
        self._pending.add(future)

        def done(finished: "asyncio.Future[Any]") -> None:
            self._pending.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                log.warning("shared rate window %s: %s of claim %s failed (it counts from its claim until it "
                            "ages out): %s", self.scope, what, args[0], error)

        future.add_done_callback(done)


class _Permit:
    __slots__ = ("request", "tokens", "claim")

    def __init__(self, request: Optional[List[float]], tokens: Optional[List[float]],
                 claim: Optional[str] = None) -> None:
        self.request = request
        self.tokens = tokens
        self.claim = claim


class ConnectionLimiter:
    """One connection's limits, cool-down and metrics in one subtask.

    Args:
        name: The connection's resource name (messages, metrics).
        limits: This subtask's limits (``Limits.share`` in the ``subtask``
            scope, ``Limits.job_scoped`` in the ``job`` scope).
        metrics: The ``connection.<name>`` metric group, or None.
        clock: Monotonic seconds; must be the loop's clock (``loop.time``
            is ``time.monotonic``).
        window_s: The sliding window of the per-minute limits (module docstring).
        shared: The job-wide window each call also claims a place in
            (``job`` scope), or None.
    """

    def __init__(self, name: str, limits: Limits, metrics: Any = None,
                 clock: Callable[[], float] = time.monotonic, window_s: float = 10.0,
                 shared: Optional[SharedWindow] = None) -> None:
        self.name = name
        self.limits = limits
        self.shared = shared
        self._claiming = False  # the queue's head is claiming its place in the shared window
        self._clock = clock
        self._requests = _window_for(limits.requests_per_minute, window_s) if limits.requests_per_minute else None
        self._tokens = _window_for(limits.tokens_per_minute, window_s) if limits.tokens_per_minute else None
        self._max_in_flight = limits.max_concurrent_requests
        self._in_flight = 0
        self._cool_down_until = 0.0
        self._refusals = 0  # consecutive 429/overload answers
        self._waiters: Deque[Tuple[asyncio.Future, int]] = collections.deque()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._lock = threading.Lock()  # the counters below are read by the metric reporter
        self.waited_calls = 0
        self.refusals_seen = 0
        self._wait_ms = metrics.get_histogram("rateLimitWaitMs") if metrics is not None else None
        self._waits = metrics.get_counter("rateLimitWaits") if metrics is not None else None
        self._refused = metrics.get_counter("modelRateLimited") if metrics is not None else None
        self._cool_down_ms = metrics.get_counter("rateLimitCoolDownMs") if metrics is not None else None

    # -- admission (on the loop) ----------------------------------------------

    async def acquire(self, tokens: int = 0) -> _Permit:
        """Wait for this call's turn (FIFO), then count it in the windows.
        Cancelled while waiting: leaves the queue, counts nothing."""
        return self._grant_now(tokens) or await self._wait_for_turn(tokens)

    def _grant_now(self, tokens: int) -> Optional[_Permit]:
        """The call's permit at once, when nobody waits and nothing holds it
        back (no future, no queue, no coroutine); else None. On the loop."""
        self._loop = asyncio.get_running_loop()
        permit = self._grant_at_once(self._clock(), tokens)
        if permit is not None and self._wait_ms is not None:
            self._wait_ms.update(0)
        return permit

    async def _wait_for_turn(self, tokens: int) -> _Permit:
        """``acquire`` for a call that must queue."""
        loop = asyncio.get_running_loop()
        started = self._clock()
        future: asyncio.Future = loop.create_future()
        self._waiters.append((future, tokens))
        self._pump()
        try:
            permit = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(future.result(), None)  # granted as it was cancelled
            raise
        waited_ms = int((self._clock() - started) * 1000)
        if waited_ms > 0:
            with self._lock:
                self.waited_calls += 1
            if self._waits is not None:
                self._waits.inc()
        if self._wait_ms is not None:
            self._wait_ms.update(waited_ms)
        return permit

    def _grant_at_once(self, now: float, tokens: int) -> Optional[_Permit]:
        """The permit ``_pump`` would grant a call arriving now, when the
        queue is empty and no window, bound, cool-down or shared claim holds
        it back; else None (the call queues)."""
        if self._waiters or self._claiming or self.shared is not None:
            return None
        if self._max_in_flight is not None and self._in_flight >= self._max_in_flight:
            return None
        if self._wait_s(now, tokens) > 0:
            return None
        self._in_flight += 1
        return self._take(now, tokens)

    def _wait_s(self, now: float, tokens: int) -> float:
        """Seconds until the cool-down and the windows let a call of
        ``tokens`` go (0 or less: now)."""
        return max(
            self._cool_down_until - now,
            self._requests.wait_s(now, 1) if self._requests is not None else 0.0,
            self._tokens.wait_s(now, tokens) if self._tokens is not None and tokens else 0.0,
        )

    def _take(self, now: float, tokens: int, claim: Optional[str] = None) -> _Permit:
        """Count a granted call in the local windows; its permit."""
        request = self._requests.take(now, 1) if self._requests is not None else None
        entry = self._tokens.take(now, tokens) if self._tokens is not None else None
        return _Permit(request, entry, claim)

    @property
    def counts_tokens(self) -> bool:
        """Whether a call's token estimate is used: a token limit is set, or
        a shared window records each claim's tokens."""
        return bool(self.limits.tokens_per_minute) or self.shared is not None

    def _pump(self) -> None:
        """Grant the queue's head while the windows, the concurrency bound
        and the cool-down allow; else arm one loop timer for when they may.
        With a shared window the head, once the local checks pass, claims
        its place there (``_claim``) and the queue waits for it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._claiming:
            return  # the head's claim pumps again when it is done
        now = self._clock()
        while self._waiters:
            future, tokens = self._waiters[0]
            if future.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if self._max_in_flight is not None and self._in_flight >= self._max_in_flight:
                return  # a release pumps again
            wait_s = self._wait_s(now, tokens)
            if wait_s > 0:
                assert self._loop is not None
                self._timer = self._loop.call_later(wait_s, self._pump)
                return
            self._waiters.popleft()
            self._in_flight += 1
            if self.shared is not None:
                assert self._loop is not None
                self._claiming = True
                self._loop.create_task(self._claim(future, tokens))
                return
            future.set_result(self._take(now, tokens))

    async def _claim(self, future: asyncio.Future, tokens: int) -> None:
        """The head's claim in the shared window: claim (on the I/O
        threads), and while refused wait what the store says plus full
        jitter, then claim again; the head keeps its place and the local
        queue waits meanwhile. The cool-down still holds the head. Granted:
        the local windows count it too. The caller cancelled meanwhile: the
        claim is dropped (or never made), nothing counts. The store failed:
        the caller gets its error."""
        assert self.shared is not None
        granted = False
        try:
            while not future.done():
                cool_down_s = self._cool_down_until - self._clock()
                if cool_down_s > 0:
                    await asyncio.wait((future,), timeout=cool_down_s)
                    continue
                try:
                    claim_id, wait_s = await self.shared.claim(tokens)
                except Exception as error:
                    if not future.done():
                        future.set_exception(error)
                    return
                if claim_id is None:
                    await asyncio.wait((future,), timeout=wait_s + full_jitter(_CLAIM_JITTER_S))
                    continue
                if future.done():  # cancelled while claiming
                    self.shared.unclaim(claim_id)
                    return
                future.set_result(self._take(self._clock(), tokens, claim_id))
                granted = True
        except asyncio.CancelledError:  # the loop is going away
            future.cancel()
            raise
        finally:
            if not granted:
                self._in_flight -= 1
            self._claiming = False
            if self._waiters and self._loop is not None and not self._loop.is_closed():
                self._pump()

    def release(self, permit: _Permit, used_tokens: Optional[int]) -> None:
        """The call ended; ``used_tokens`` (reported usage, None: unknown)
        replaces its estimate. On the loop."""
        self._in_flight -= 1
        if permit.claim is not None and self.shared is not None:
            self.shared.restamp(permit.claim, used_tokens)
        now = self._clock()
        if permit.request is not None:
            self._requests.restamp(permit.request, now)
        if permit.tokens is not None:
            self._tokens.restamp(permit.tokens, now, used_tokens)
        if self._waiters:
            self._pump()

    # -- back-pressure ---------------------------------------------------------

    def refused(self, error: BaseException) -> float:
        """The provider answered 429 or overloaded: start (or extend) the
        cool-down; returns its length in seconds. On the loop."""
        retry_after = getattr(error, "retry_after_s", None)
        self._refusals += 1
        if isinstance(retry_after, (int, float)) and retry_after >= 0:
            delay_s = float(retry_after)
        else:
            delay_s = full_jitter(backoff_ceiling_s(self._refusals - 1, _COOL_DOWN_INITIAL_S, _COOL_DOWN_MAX_S))
        self._cool_down_until = max(self._cool_down_until, self._clock() + delay_s)
        with self._lock:
            self.refusals_seen += 1
        if self._refused is not None:
            self._refused.inc()
        if self._cool_down_ms is not None:
            self._cool_down_ms.inc(int(delay_s * 1000))
        log.info("model connection %r: %s; no call starts for %.2f s", self.name, type(error).__name__, delay_s)
        if self._waiters:
            self._pump()
        return delay_s

    def answered(self) -> None:
        """A call succeeded: consecutive refusals start again from the first backoff."""
        self._refusals = 0

    # -- one call ----------------------------------------------------------------

    async def call(self, run: Callable[[], Any], tokens: int) -> Any:
        """``await run()`` in its turn, counting its usage and refusals."""
        permit = self._grant_now(tokens) or await self._wait_for_turn(tokens)
        used: Optional[int] = None
        try:
            result = await run()
            if permit.tokens is not None or permit.claim is not None:  # only these are restamped with it
                used = _reported_tokens(result)
            self.answered()
            return result
        except (ModelRateLimited, ModelOverloaded) as error:
            self.refused(error)
            raise
        finally:
            self.release(permit, used)

    def call_blocking(self, run: Callable[[], Any], tokens: int) -> Any:
        """``run()`` on this thread in its turn (a synchronous ``chat`` on a
        worker thread): the turn is taken on the loop, the thread waits."""
        loop = self._loop
        if loop is None or not loop.is_running() or _on_loop(loop):
            return run()  # no loop yet (nothing async ran) or on it: the call goes as is
        permit = asyncio.run_coroutine_threadsafe(self.acquire(tokens), loop).result()
        used: Optional[int] = None
        try:
            result = run()
            used = _reported_tokens(result)
            loop.call_soon_threadsafe(self.answered)
            return result
        except (ModelRateLimited, ModelOverloaded) as error:
            loop.call_soon_threadsafe(self.refused, error)
            raise
        finally:
            loop.call_soon_threadsafe(self.release, permit, used)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _reported_tokens(result: Any) -> Optional[int]:
    """Input plus output tokens the provider reported for a chat reply."""
    from flink_agents.runtime.execution.usage import usage_of_reply

    extra = getattr(result, "extra_args", None)
    if not isinstance(extra, Mapping):
        return None
    _, usage = usage_of_reply({"extra_args": extra})
    return None if usage is None else usage.input_tokens + usage.output_tokens


class RateLimits:
    """The limiters of one subtask (one engine), built as connections are.

    Args:
        config: The agent configuration (``rate_limits.<connection>.<limit>``,
            ``rate_limits.scope``, ``rate_limits.<connection>.scope``).
        parallelism: The operator's parallelism (1 for the local runner).
        metrics: The engine's root metric group, or None.
        store: The journal store; in the ``job`` scope it keeps the shared
            windows (a ``stores.rate_window.RateWindowStore``).
        job_id: The job's journal namespace (``AgentEngine.job_id``): the
            shared windows are the job's, never another job's.
        io: ``await io(fn, *args)`` runs store calls off the loop (the
            engine's ``Executors.io``); None: ``asyncio.to_thread``.
        window_s: The per-minute limits' window in seconds (module
            docstring; tests shorten it).

    Attributes:
        scope: The job's default scope, ``SUBTASK`` or ``JOB``.

    Raises:
        ValueError: ``rate_limits.scope`` (flat, or ``scope`` in the nested
            ``rate_limits`` mapping) is neither ``subtask`` nor ``job``, or it
            is ``job`` and ``store`` keeps no shared windows; naming the option.
    """

    def __init__(self, config: Mapping[str, Any], parallelism: int = 1, metrics: Any = None,
                 store: Any = None, job_id: str = "job",
                 io: Optional[Callable[..., Awaitable[Any]]] = None, window_s: float = 10.0) -> None:
        self._config = config
        self.parallelism = max(1, parallelism)
        self._metrics = metrics
        self._store = store
        self.job_id = job_id
        self._io = io or _to_thread
        self.window_s = window_s
        self.limiters: dict[str, ConnectionLimiter] = {}
        self.scope = _scope_value(_default_scope(config), "rate_limits.scope")
        if self.scope == JOB:
            self._check_store("rate_limits.scope")

    def limits_of(self, name: str, arguments: Mapping[str, Any]) -> Limits:
        """The job-wide limits of connection ``name``: its descriptor's
        arguments over the configuration's ``rate_limits``.

        Raises:
            ValueError: A limit is not a whole number >= 1, naming the connection.
        """
        configured = _configured(self._config, name)
        values = {key: arguments.get(key, configured.get(key)) for key in LIMIT_ARGUMENTS}
        try:
            return Limits(**{key: _whole(value) for key, value in values.items()})
        except (TypeError, ValueError) as error:
            raise ValueError(f"model connection {name!r}: {error}") from None

    def scope_of(self, name: str) -> str:
        """Connection ``name``'s scope: ``rate_limits.<name>.scope`` if set,
        else the job's (``scope``).

        Raises:
            ValueError: Neither ``subtask`` nor ``job``, or ``job`` on a store
                without shared windows; naming the option.
        """
        key = f"rate_limits.{name}.scope"
        value = _configured(self._config, name).get("scope")
        if value is None:
            return self.scope
        scope = _scope_value(value, key)
        if scope == JOB:
            self._check_store(key)
        return scope

    def scope_name(self, name: str) -> str:
        """The shared window of connection ``name`` in the store: the job's
        namespace and the connection, as a JSON pair (unambiguous whatever
        the names hold)."""
        return json.dumps([self.job_id, name])

    def wrap(self, resource_type: ResourceType, name: str, arguments: Mapping[str, Any], resource: Resource) -> None:
        """Put connection ``resource``'s calls (``chat``/``achat``, or
        ``embed``/``aembed``) behind its limiter. Any other resource is left."""
        if ResourceType(resource_type) not in LIMITED_TYPES:
            return
        limits = self.limits_of(name, arguments)
        group = self._metrics.get_sub_group("connection", name) if self._metrics is not None else None
        if self.scope_of(name) == JOB and (limits.requests_per_minute or limits.tokens_per_minute):
            shared = SharedWindow(self._store, self.scope_name(name), limits, self.window_s, self._io)
            limiter = ConnectionLimiter(name, limits.job_scoped(self.parallelism), group, window_s=self.window_s,
                                        shared=shared)
        else:
            limiter = ConnectionLimiter(name, limits.share(self.parallelism), group, window_s=self.window_s)
        self.limiters[name] = limiter
        if resource_type == ResourceType.CHAT_MODEL_CONNECTION:
            _wrap_methods(resource, limiter, "chat", "achat", lambda args, kwargs: estimate_tokens(args[0] if args else kwargs.get("messages")))
        else:
            _wrap_methods(resource, limiter, "embed", "aembed", lambda args, kwargs: estimate_tokens(args[0] if args else kwargs.get("text")))

    def _check_store(self, key: str) -> None:
        from flink_agents.stores.rate_window import RateWindowStore

        if not isinstance(self._store, RateWindowStore):
            raise ValueError(
                f"configuration {key!r}: 'job' needs a journal store that keeps shared rate windows "
                f"(sqlite, postgres or memory); {self._store!r} does not"
            )


async def _to_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def _default_scope(config: Mapping[str, Any]) -> Any:
    """``rate_limits.scope`` (the declared option, flat key), else ``scope``
    of a nested ``rate_limits`` mapping, else ``subtask``."""
    value = _get(config, RuntimeOptions.RATE_LIMITS_SCOPE.key)
    if value is not None:
        return value
    nested = _get(config, "rate_limits")
    if isinstance(nested, Mapping) and nested.get("scope") is not None:
        return nested["scope"]
    return SUBTASK


def _scope_value(value: Any, key: str) -> str:
    if value not in SCOPES:
        raise ValueError(f"configuration {key!r}: must be 'subtask' or 'job', got {value!r}")
    return value


def _wrap_methods(resource: Any, limiter: ConnectionLimiter, sync_name: str, async_name: str,
                  estimate: Callable[[tuple, dict], int]) -> None:
    sync_method = getattr(resource, sync_name)
    async_method = getattr(resource, async_name)

    # The estimate only where a token limit uses it (it reads every message).
    def tokens(args: tuple, kwargs: dict) -> int:
        return estimate(args, kwargs) if limiter.counts_tokens else 0

    @functools.wraps(async_method)
    async def limited_async(*args: Any, **kwargs: Any) -> Any:
        return await limiter.call(lambda: async_method(*args, **kwargs), tokens(args, kwargs))

    @functools.wraps(sync_method)
    def limited_sync(*args: Any, **kwargs: Any) -> Any:
        return limiter.call_blocking(lambda: sync_method(*args, **kwargs), tokens(args, kwargs))

    # On the instance (a pydantic model: past its __setattr__), so every
    # caller of this connection, whoever holds it, goes through the limiter.
    object.__setattr__(resource, async_name, limited_async)
    object.__setattr__(resource, sync_name, limited_sync)
    object.__setattr__(resource, "_rate_limiter", limiter)


def _configured(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """``rate_limits.<name>`` of the configuration: a nested mapping
    (``rate_limits: {name: {...}}``) and flat keys, flat keys winning."""
    found: dict = {}
    nested = _get(config, "rate_limits")
    if isinstance(nested, Mapping) and isinstance(nested.get(name), Mapping):
        found.update(nested[name])
    for key in (*LIMIT_ARGUMENTS, "scope"):
        value = _get(config, f"rate_limits.{name}.{key}")
        if value is not None:
            found[key] = value
    return found


def _get(config: Mapping[str, Any], key: str) -> Any:
    try:
        return config.get(key, None)
    except Exception:  # a typed configuration view refusing an undeclared key
        return None


def _whole(value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value
