"""Events: what actions react to and send.

Events are pydantic models; anything that crosses a process or a checkpoint is
serialized as JSON. Every event class
has an ``EVENT_TYPE`` string that ``@action`` may name instead of the class; a
subclass that does not set one gets ``"<module>.<qualname>"``.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Event", "InputEvent", "OutputEvent"]

E = TypeVar("E", bound="Event")


def _unsent_event_id() -> UUID:
    """A random version-4 UUID from ``random`` rather than ``os.urandom``: the
    id of an event never sent needs to be unique, not unpredictable, and the
    system call (which releases the GIL) cost more than the rest of
    constructing a small event. ``random`` reseeds in a forked child."""
    return UUID(int=random.getrandbits(128), version=4)


class Event(BaseModel):
    """Base class of all events.

    Attributes:
        id: Identifier of the event. The runtime replaces it when the event is
            sent with one derived from (key, record sequence, send ordinal), so a
            replay re-derives the same ids; the default is only for events that
            are never sent.

    Extra attributes are allowed (as in Flink Agents 0.3). Field values,
    declared and extra, must be values the runtime can journal: JSON values
    and the types its codec carries (tuples, sets, bytes, datetimes, enums,
    pydantic models, dataclasses, ...; see ``docs/guarantees.md``). They are
    checked when the event is sent (``RunnerContext.send_event``), by the
    codec that journals it, so a refused value fails the sending action (under
    its error strategy) with a ``TypeError`` naming the action, key, record and
    field path, e.g. ``event OutputEvent.output.items[2] is a
    builtins.function``. It is journaled as it is when the sending action
    returns.
    """

    model_config = ConfigDict(extra="allow")

    EVENT_TYPE: ClassVar[str] = "_event"

    id: UUID = Field(default_factory=_unsent_event_id)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "EVENT_TYPE" not in cls.__dict__:
            cls.EVENT_TYPE = f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def from_event(cls: type[E], event: Event) -> E:
        """Return ``event`` as an instance of ``cls``.

        Args:
            event: Any event whose fields (declared or extra) fit ``cls``.

        Raises:
            pydantic.ValidationError: The fields do not fit ``cls``.
        """
        if isinstance(event, cls):
            return event
        return cls.model_validate(event.model_dump())


class InputEvent(Event):
    """Sent by the runtime for each input record; ``input`` is the record's value."""

    EVENT_TYPE: ClassVar[str] = "_input_event"

    input: Any


class OutputEvent(Event):
    """Sent by an action to emit ``output`` downstream of the agent."""

    EVENT_TYPE: ClassVar[str] = "_output_event"

    output: Any
