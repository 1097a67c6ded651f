"""A derived UUIDv5 that is hashed when first read.

Every event a run creates gets a derived id (``ids.RunIdentity.event_id``),
but most are never read: an event's id is read when the event is encoded
(journaled, logged, traced) or by user code, and a run that writes no
journal encodes no event it does not have to (``execution.event_codec``).
A ``DerivedUUID`` keeps the run (whose part of the name is hashed once)
and the name's tail (step and ordinal), and computes its value (the same
as ``uuid.uuid5``, RFC 9562 section 5.5) on the first read of any of its
views (``int``, ``str``, ``hex``, ``bytes``, equality, hashing), all of
which ``uuid.UUID`` derives from ``int``.

It is a ``uuid.UUID`` (pydantic's ``UUID`` fields keep it as it is, and its
``repr`` is a ``UUID``'s); it pickles, and the codec encodes it, as a plain
``uuid.UUID`` of the same value (``codec``), which is what a replay reads.
"""

from __future__ import annotations

import uuid
from typing import Any, Tuple

__all__ = ["DerivedUUID"]

_INT = uuid.UUID.__dict__["int"]  # the slots uuid.UUID.__init__ fills, set directly
_IS_SAFE = uuid.UUID.__dict__["is_safe"]
_UNKNOWN = uuid.SafeUUID.unknown  # read once: an enum member read through its class is a descriptor call
_V5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V5_SET = (5 << 76) | (0x8000 << 48)


def _v5_int(digest: bytes) -> int:
    """A SHA-1 digest of namespace + name as ``uuid.uuid5`` makes it: the
    first 16 bytes, version 5 and the RFC 4122 variant set."""
    return (int.from_bytes(digest[:16], "big") & _V5_CLEAR) | _V5_SET


class DerivedUUID(uuid.UUID):
    """The UUIDv5 of the SHA-1 state ``run.event_prefix()`` (a
    ``hashlib.sha1`` object it copies) updated with ``"{step}/{ordinal}"``,
    computed on the first read."""

    __slots__ = ("_run", "_step", "_ordinal", "_text")

    def __init__(self, run: Any, step: str, ordinal: int) -> None:  # noqa: D107 - no UUID.__init__: nothing to check
        object.__setattr__(self, "_run", run)
        object.__setattr__(self, "_step", step)
        object.__setattr__(self, "_ordinal", ordinal)
        _IS_SAFE.__set__(self, _UNKNOWN)

    @property
    def int(self) -> int:  # type: ignore[override]  # uuid.UUID's slot, filled on first read
        try:
            return _INT.__get__(self)
        except AttributeError:
            digest = self._run.event_prefix().copy()
            digest.update(f"{self._step}/{self._ordinal}".encode())
            value = _v5_int(digest.digest())
            _INT.__set__(self, value)
            return value

    def __str__(self) -> str:
        try:
            return self._text
        except AttributeError:  # an id is written as text once per encoding of its event: made once
            text = uuid.UUID.__str__(self)
            object.__setattr__(self, "_text", text)
            return text

    def __repr__(self) -> str:
        return f"UUID('{self}')"

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return uuid.UUID, (None, None, None, None, self.int)

    def __copy__(self) -> uuid.UUID:
        return self

    def __deepcopy__(self, memo: Any) -> uuid.UUID:
        return self
