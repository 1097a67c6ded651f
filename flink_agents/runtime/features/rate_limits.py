"""Rate limits and 429 back-pressure for model connections (docs/operations.md,
"Rate limits").

A chat or embedding model connection may carry ``requests_per_minute``,
``tokens_per_minute`` and ``max_concurrent_requests`` (descriptor arguments,
or ``rate_limits.<connection>.<limit>`` in the agent configuration; the
descriptor wins). Each subtask builds one ``ConnectionLimiter`` per limited
connection and holds it to ``limit // parallelism`` of each limit (at least
1), so the job's subtasks together never exceed the limit, without talking
to each other. A key skew that leaves a subtask idle leaves its share unused.

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
the time each call waited for its turn), ``rateLimitWaits`` (calls that
had to wait), ``modelRateLimited`` (429 and overload answers seen) and
``rateLimitCoolDownMs`` (cool-down time set).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, List, Mapping, Optional, Tuple

from flink_agents._backoff import backoff_ceiling_s, full_jitter
from flink_agents.api.chat_models.errors import ModelOverloaded, ModelRateLimited
from flink_agents.api.resource import Resource, ResourceType

__all__ = ["LIMIT_ARGUMENTS", "ConnectionLimiter", "Limits", "RateLimits", "estimate_tokens"]

log = logging.getLogger(__name__)

LIMIT_ARGUMENTS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")
LIMITED_TYPES = (ResourceType.CHAT_MODEL_CONNECTION, ResourceType.EMBEDDING_MODEL_CONNECTION)
_COOL_DOWN_INITIAL_S = 0.5
_COOL_DOWN_MAX_S = 30.0


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


def _window_for(per_minute: int, window_s: float) -> _Window:
    capacity = int(per_minute * window_s // 60)
    if capacity < 1:
        return _Window(per_minute, 60.0)
    return _Window(capacity, window_s)


class _Permit:
    __slots__ = ("request", "tokens")

    def __init__(self, request: Optional[List[float]], tokens: Optional[List[float]]) -> None:
        self.request = request
        self.tokens = tokens


class ConnectionLimiter:
    """One connection's limits, cool-down and metrics in one subtask.

    Args:
        name: The connection's resource name (messages, metrics).
        limits: This subtask's share (``Limits.share``).
        metrics: The ``connection.<name>`` metric group, or None.
        clock: Monotonic seconds; must be the loop's clock (``loop.time``
            is ``time.monotonic``).
        window_s: The sliding window of the per-minute limits (module docstring).
    """

    def __init__(self, name: str, limits: Limits, metrics: Any = None,
                 clock: Callable[[], float] = time.monotonic, window_s: float = 10.0) -> None:
        self.name = name
        self.limits = limits
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
        loop = asyncio.get_running_loop()
        self._loop = loop
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

    def _pump(self) -> None:
        """Grant the queue's head while the windows, the concurrency bound
        and the cool-down allow; else arm one loop timer for when they may."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock()
        while self._waiters:
            future, tokens = self._waiters[0]
            if future.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if self._max_in_flight is not None and self._in_flight >= self._max_in_flight:
                return  # a release pumps again
            wait_s = max(
                self._cool_down_until - now,
                self._requests.wait_s(now, 1) if self._requests is not None else 0.0,
                self._tokens.wait_s(now, tokens) if self._tokens is not None and tokens else 0.0,
            )
            if wait_s > 0:
                assert self._loop is not None
                self._timer = self._loop.call_later(wait_s, self._pump)
                return
            self._waiters.popleft()
            self._in_flight += 1
            request = self._requests.take(now, 1) if self._requests is not None else None
            entry = self._tokens.take(now, tokens) if self._tokens is not None else None
            future.set_result(_Permit(request, entry))

    def release(self, permit: _Permit, used_tokens: Optional[int]) -> None:
        """The call ended; ``used_tokens`` (reported usage, None: unknown)
        replaces its estimate. On the loop."""
        self._in_flight -= 1
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
        permit = await self.acquire(tokens)
        used: Optional[int] = None
        try:
            result = await run()
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
        config: The agent configuration (``rate_limits.<connection>.<limit>``).
        parallelism: The operator's parallelism (1 for the local runner).
        metrics: The engine's root metric group, or None.
    """

    def __init__(self, config: Mapping[str, Any], parallelism: int = 1, metrics: Any = None) -> None:
        self._config = config
        self.parallelism = max(1, parallelism)
        self._metrics = metrics
        self.limiters: dict[str, ConnectionLimiter] = {}

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

    def wrap(self, resource_type: ResourceType, name: str, arguments: Mapping[str, Any], resource: Resource) -> None:
        """Put connection ``resource``'s calls (``chat``/``achat``, or
        ``embed``/``aembed``) behind its limiter. Any other resource is left."""
        if ResourceType(resource_type) not in LIMITED_TYPES:
            return
        limits = self.limits_of(name, arguments)
        group = self._metrics.get_sub_group("connection", name) if self._metrics is not None else None
        limiter = self.limiters[name] = ConnectionLimiter(name, limits.share(self.parallelism), group)
        if resource_type == ResourceType.CHAT_MODEL_CONNECTION:
            _wrap_methods(resource, limiter, "chat", "achat", lambda args, kwargs: estimate_tokens(args[0] if args else kwargs.get("messages")))
        else:
            _wrap_methods(resource, limiter, "embed", "aembed", lambda args, kwargs: estimate_tokens(args[0] if args else kwargs.get("text")))


def _wrap_methods(resource: Any, limiter: ConnectionLimiter, sync_name: str, async_name: str,
                  estimate: Callable[[tuple, dict], int]) -> None:
    sync_method = getattr(resource, sync_name)
    async_method = getattr(resource, async_name)

    @functools.wraps(async_method)
    async def limited_async(*args: Any, **kwargs: Any) -> Any:
        return await limiter.call(lambda: async_method(*args, **kwargs), estimate(args, kwargs))

    @functools.wraps(sync_method)
    def limited_sync(*args: Any, **kwargs: Any) -> Any:
        return limiter.call_blocking(lambda: sync_method(*args, **kwargs), estimate(args, kwargs))

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
    for key in LIMIT_ARGUMENTS:
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
