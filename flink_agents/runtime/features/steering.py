"""Steering: messages a user sends to a key's running turn.

A second input, keyed like the main one, carries steering messages. Each is
kept in the key's state (``KeyState.steering``: ``[steering seq, message]``,
so it survives a failover) and put into the key's ``SteeringMailbox`` (in
memory, where a running turn can see it). A turn takes what is waiting at
each step boundary: the built-in chat action does so right before every
model call, i.e. after the tools in flight finished, so a message never
cancels a step. The messages taken are journaled in that step (function
``steering:take``) without a write of their own: they commit with the model
call that follows, so a replay takes the same messages at the same step
and steering costs no extra commit. With no turn running, messages wait for
the key's next one. Once the record finished, its taken messages leave the
key's state.

At most ``MAX_STEERING_QUEUE`` (32) messages wait per key: one more is not
queued but reported (``SteeringQueueFull``; the Flink operator sends an
error record to the error side output naming key and message), so a
runaway sender cannot grow keyed state without bound and nothing is dropped
silently.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Tuple

from flink_agents.runtime.execution.state import KeyState

__all__ = ["MAX_STEERING_QUEUE", "SteeringMailbox", "SteeringMailboxes", "SteeringQueueFull", "steering_error"]

MAX_STEERING_QUEUE = 32
# Turned on by ``steering.enabled`` (``RuntimeOptions.STEERING_ENABLED``).


class SteeringQueueFull(Exception):
    """A key already has ``MAX_STEERING_QUEUE`` steering messages waiting."""

    def __init__(self, key: Any, message: Any) -> None:
        super().__init__(
            f"steering queue of key {key!r} is full ({MAX_STEERING_QUEUE} messages waiting); "
            f"message not queued: {message!r}"
        )
        self.key = key
        self.message = message


def steering_error(key: Any, message: Any, error: Exception) -> Dict[str, Any]:
    """The error record of a steering message that was not queued."""
    return {
        "key": key, "seq": None, "record": message, "action": "steering",
        "error_type": type(error).__name__, "error_message": str(error), "attempts": 0,
    }


class SteeringMailbox:
    """The steering messages of one key not yet taken by a turn (thread-safe:
    the host puts, the run's loop takes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: List[Tuple[int, Any]] = []
        self.taken_through = -1  # the highest steering seq a turn has taken

    def put(self, seq: int, message: Any) -> None:
        """Queue message ``seq`` unless it was queued or taken already."""
        with self._lock:
            if seq <= self.taken_through or any(s == seq for s, _ in self._waiting):
                return
            self._waiting.append((seq, message))
            self._waiting.sort(key=lambda item: item[0])

    def take(self) -> List[List[Any]]:
        """Everything waiting, in order, as ``[[seq, message], ...]``."""
        with self._lock:
            taken, self._waiting = self._waiting, []
            if taken:
                self.taken_through = max(self.taken_through, taken[-1][0])
            return [[seq, message] for seq, message in taken]

    def mark_taken(self, taken: List[List[Any]]) -> None:
        """A replay returned journaled ``taken``: they must not come again."""
        if not taken:
            return
        through = max(int(seq) for seq, _ in taken)
        with self._lock:
            self.taken_through = max(self.taken_through, through)
            self._waiting = [(s, m) for s, m in self._waiting if s > through]


class SteeringMailboxes:
    """The mailboxes of a subtask's keys: the engine's runs take from them,
    the host core (``runtime.keyed_host``) accepts into them, refills them
    after a restore and forgets an idle key's."""

    def __init__(self) -> None:
        self._boxes: Dict[Any, SteeringMailbox] = {}

    def get(self, key: Any) -> SteeringMailbox:
        """The key's mailbox (created on first use)."""
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes.setdefault(key, SteeringMailbox())
        return box

    def accept(self, key: Any, state: KeyState, message: Any) -> None:
        """Queue a steering message in ``state`` (the caller stores it) and
        in the key's mailbox.

        Raises:
            SteeringQueueFull: ``MAX_STEERING_QUEUE`` messages wait already.
        """
        if len(state.steering) >= MAX_STEERING_QUEUE:
            raise SteeringQueueFull(key, message)
        seq = state.next_steering_seq
        state.next_steering_seq += 1
        state.steering.append([seq, message])
        self.get(key).put(seq, message)

    def refill(self, key: Any, state: KeyState) -> None:
        """Put the messages waiting in ``state`` into the mailbox (after a
        restore the mailbox is empty; taken ones are skipped)."""
        if state.steering:
            box = self.get(key)
            for seq, message in state.steering:
                box.put(seq, message)

    def taken_through(self, key: Any) -> int:
        """The highest steering seq of ``key`` a run has taken (-1: none)."""
        box = self._boxes.get(key)
        return -1 if box is None else box.taken_through

    def forget(self, key: Any) -> None:
        """Drop an idle key's mailbox (its messages are in its state)."""
        self._boxes.pop(key, None)
