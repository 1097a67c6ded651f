"""Memory as a flat map of dotted paths, with per-action staging.

A memory tree is stored flat (``{"order": OBJECT, "order.total": 12}``) so that
it is one JSON object in keyed state. Each action works on a
``StagedMemory``: reads see the action's own writes, the first write copies the
map (copy-on-write), and the copy replaces the base only when the action
finishes (``commit``); a failed action's writes are simply dropped.

Values are kept encoded by the typed codec (``runtime.durability.codec``): ``set``
encodes, ``get`` decodes. So the flat map is plain JSON wherever it lives
(the local runner's dict, Flink keyed state, a journaled memory diff), what
an action reads back is what it stored, with its type (an ``IntEnum`` stays
an ``IntEnum``, a tuple a tuple), on both runners and after a restore, and
a value the codec cannot carry is a ``TypeError`` naming its memory path at
``set``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from flink_agents.api.memory_object import MemoryObject, MemoryType
from flink_agents.api.memory_reference import MemoryRef
from flink_agents.runtime.durability.codec import DecodeError, decode, encode

__all__ = ["MemoryNode", "StagedMemory", "OBJECT", "apply_diff"]

# Marks a path that holds a nested object. JSON-serializable so the flat map
# goes into keyed state as is; no encoded value equals it (the codec escapes
# a dict whose keys start with "$").
OBJECT: Dict[str, int] = {"$memory_object": 1}
# The runtime's own entries (chat loop state, sub-agent sessions); not listed
# among a memory's fields.
RESERVED_PREFIX = "_flink_agents"


class StagedMemory:
    """One action's view of a memory map; see the module docstring."""

    __slots__ = ("_base", "_working", "label", "reads", "ttl_reads")

    def __init__(self, base: Dict[str, Any], label: str, ttl_reads: Set[str] | None = None) -> None:
        self._base = base
        self._working: Dict[str, Any] | None = None
        self.label = label
        # path -> stored value of each read, when a read memory event is on
        # (runtime.execution.memory_events); None: reads are not recorded.
        self.reads: Dict[str, Any] | None = None
        # Paths read (get, is_exist) go here when given: a memory TTL renewed
        # on reads renews these (runtime.execution.memory_entries).
        self.ttl_reads = ttl_reads

    @property
    def data(self) -> Dict[str, Any]:
        return self._base if self._working is None else self._working

    def writable(self) -> Dict[str, Any]:
        if self._working is None:
            self._working = dict(self._base)
        return self._working

    def commit(self) -> Dict[str, Any]:
        """The map to keep after the action finished."""
        return self.data

    def diff(self) -> Dict[str, Any]:
        """The action's writes: ``{"set": {path: value}, "del": [path]}``."""
        if self._working is None:
            return {"set": {}, "del": []}
        base, working = self._base, self._working
        changed = {k: v for k, v in working.items() if k not in base or base[k] != v}
        return {"set": changed, "del": [k for k in base if k not in working]}


def apply_diff(data: Dict[str, Any], diff: Dict[str, Any]) -> Dict[str, Any]:
    """A new map: ``data`` with a ``StagedMemory.diff`` applied."""
    if not diff["set"] and not diff["del"]:
        return data
    result = dict(data)
    for path in diff["del"]:
        result.pop(path, None)
    result.update(diff["set"])
    return result


SENSORY_LABEL = "sensory_memory"  # StagedMemory.label of the sensory memory
_REFS: Dict[Tuple[MemoryType, str], MemoryRef] = {}  # frozen: one per path, not one per set


def _ref(memory_type: MemoryType, path: str) -> MemoryRef:
    """The (frozen, shared) reference to ``path`` in ``memory_type``."""
    ref = _REFS.get((memory_type, path))
    if ref is None:
        if len(_REFS) >= 4096:  # paths are few in practice; bound them anyway
            _REFS.clear()
        ref = _REFS[(memory_type, path)] = MemoryRef(memory_type=memory_type, path=path)
    return ref


def _join(prefix: str, path: str) -> str:
    if not path or path.startswith(".") or path.endswith(".") or ".." in path:
        raise ValueError(f"invalid memory path {path!r}")
    return f"{prefix}.{path}" if prefix else path


class MemoryNode(MemoryObject):
    """A ``MemoryObject`` at ``prefix`` of a ``StagedMemory``."""

    __slots__ = ("_memory", "_prefix")

    def __init__(self, memory: StagedMemory, prefix: str = "") -> None:
        self._memory = memory
        self._prefix = prefix

    def get(self, path_or_ref: str | MemoryRef) -> Any:
        full = path_or_ref.path if isinstance(path_or_ref, MemoryRef) else _join(self._prefix, path_or_ref)
        if self._memory.ttl_reads is not None:
            self._memory.ttl_reads.add(full)
        data = self._memory.data
        if full not in data:
            return None
        value = data[full]
        if value == OBJECT:
            return MemoryNode(self._memory, full)
        if self._memory.reads is not None:
            self._memory.reads[full] = value
        # A fresh object: mutating it cannot bypass set() (and staging).
        try:
            return decode(value)
        except DecodeError as unreadable:  # a stored value its class, as it is now, cannot take
            raise unreadable.at(f"{self._memory.label}.{full}") from None

    def set(self, path: str, value: Any) -> MemoryRef:
        """Store ``value`` (encoded by ``runtime.durability.codec``) at ``path``.

        Raises:
            TypeError: The codec cannot carry ``value`` (the message names the
                memory path, e.g. ``short_term_memory.order.items[2]``, and
                the type).
            ValueError: ``path`` is invalid or runs through a value.
        """
        full = _join(self._prefix, path)
        stored = encode(value, f"{self._memory.label}.{full}")
        data = self._memory.writable()
        self._ensure_parents(data, full)
        if data.get(full) == OBJECT:
            self._drop_children(data, full)
        data[full] = stored
        return _ref(MemoryType.SENSORY if self._memory.label == SENSORY_LABEL else MemoryType.SHORT_TERM, full)

    def new_object(self, path: str, overwrite: bool = False) -> MemoryObject:
        full = _join(self._prefix, path)
        data = self._memory.data
        if full in data and not overwrite:
            raise ValueError(f"memory path {full!r} already exists")
        data = self._memory.writable()
        self._ensure_parents(data, full)
        self._drop_children(data, full)
        data[full] = OBJECT
        return MemoryNode(self._memory, full)

    def is_exist(self, path: str) -> bool:
        full = _join(self._prefix, path)
        if self._memory.ttl_reads is not None:
            self._memory.ttl_reads.add(full)
        return full in self._memory.data

    def get_field_names(self) -> List[str]:
        start = f"{self._prefix}." if self._prefix else ""
        return [
            k[len(start):] for k in self._memory.data
            if k.startswith(start) and "." not in k[len(start):] and not k.startswith(RESERVED_PREFIX)
        ]

    def get_fields(self) -> Dict[str, Any]:
        return {name: self.get(name) for name in self.get_field_names()}

    @staticmethod
    def _ensure_parents(data: Dict[str, Any], full: str) -> None:
        parts = full.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            existing = data.get(parent)
            if existing is None and parent not in data:
                data[parent] = OBJECT
            elif existing != OBJECT:
                raise ValueError(
                    f"cannot set memory path {full!r}: {parent!r} holds a value, not an object"
                )

    @staticmethod
    def _drop_children(data: Dict[str, Any], full: str) -> None:
        start = f"{full}."
        for k in [k for k in data if k.startswith(start)]:
            del data[k]
