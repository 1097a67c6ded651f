"""Classes by name, for the codec: ``"module:qualname"`` both ways, and
which classes stored data may name.

The codec writes a class (of an event, a pydantic model, a dataclass, an enum,
an exception or a ``pyflink.common.Row``) as ``"module:qualname"`` and finds
it again when reading. Stored data (journal rows, keyed state) is untrusted
input: whoever can write one row of a shared journal must not run code in
the jobs that replay it. So a name read back resolves only

- to the kind its tag promises (``Kind``: an ``Enum`` subclass for
  ``$enum``, a ``BaseException`` subclass for an exception, a pydantic
  ``BaseModel`` subclass for ``$pydantic``, a dataclass for ``$dataclass``,
  ``pyflink.common.Row`` itself for ``$row``, an ``Event`` subclass for a
  journaled event), checked before anything is called, and
- to a class the job can legitimately hold: one registered here (the plan's
  classes that came by value, ``register_class``), one of the runtime's own
  (``flink_agents``, pydantic), one of the standard library's, or one of a
  package the job's code uses (``trust_package``: the packages the plan's
  actions, tools and resources reach, found by ``register_plan_classes``, and
  those the framework integrations journal).

Nothing named by data is imported (an import runs the module's code and
what it imports in turn) but the runtime's core modules (``api``, ``plan``,
``runtime``, ``stores``: the standard library and the runtime's own
dependencies); every other module, the integrations' included, must already
be loaded (the runtime or the job's code imported it). The
name is followed without running code (no module ``__getattr__``, no
descriptor) and only through classes, and the class found must itself be
of an allowed package (a ``flink_agents`` module's ``yaml`` attribute does
not make ``yaml``'s classes nameable). Anything else fails with ``ClassNotAllowed`` (a
``DecodeError``, so a ``ValueError``) naming the tag and the name.

Classes that travelled to a Flink Python worker by value (defined in the job's
main script, ``__main__``, or in a module registered with
``cloudpickle.register_pickle_by_value``) cannot be imported there: the
worker's ``__main__`` is PyFlink's, not the script. The registry holds them;
``register_plan_classes`` fills it from everything the agent's plan holds
when the engine starts, so it is filled again on every worker after a
restart (``runtime.durability.codec_reachable``).

``class_name`` refuses, at write time, a class that could not be found by its
name when read (one defined inside a function, a main-script class the
registry does not know, a class of a package the job is not known to use),
so a run never fails later, on replay, because of it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
import threading
from enum import Enum
from typing import Any, Callable, Dict, Set, Tuple

from pydantic import BaseModel

from flink_agents.api.agents import types as _output_schema_types

__all__ = [
    "ClassGone", "ClassNotAllowed", "DATACLASS", "DecodeError", "ENUM", "EVENT", "EXCEPTION", "Kind", "MODEL", "ROW",
    "class_name", "has_class_name", "register_class", "resolve_class", "trust_package", "trusted_packages",
]

_REGISTRY: Dict[str, type] = {}  # "module:qualname" -> class, for classes not importable by name
_NAMES: Dict[Tuple[type, "Kind"], str] = {}  # classes checked to be found again by their name
_RESOLVED: Dict[Tuple[str, "Kind"], type] = {}  # names read back, checked
_LOCK = threading.Lock()

# Top-level packages whose (loaded) modules' classes stored data may name,
# beside the standard library's. The runtime's own, always; the job's, as
# found or registered.
_TRUSTED: Set[str] = {"flink_agents", "pydantic", "pydantic_core"}
if sys.version_info < (3, 11):  # 3.11's builtin ExceptionGroup, backported (flink_agents._pycompat)
    _TRUSTED.add("exceptiongroup")
_STDLIB = frozenset(sys.stdlib_module_names) | {"builtins"}
_ROW = "pyflink.common.types:Row"


class DecodeError(ValueError):
    """Stored data that cannot be read back as a value (a ``ValueError``).

    Attributes:
        path: Where the value was read (``"memory path 'order'"``), once known.
    """

    path: str | None = None

    def at(self, path: str) -> "DecodeError":
        """This error, its message prefixed with where the value was read."""
        if self.path is None:
            self.path = path
            self.args = (f"{path}: {self.args[0] if self.args else ''}",)
        return self


class ClassGone(DecodeError, ImportError):
    """Stored data names a class it may name, which is not here: its module
    is not loaded in this process (nothing is imported for data), or holds
    no such name (the code changed since the data was written). Also an
    ``ImportError``, so a caller that reads a gone class as "rebuild what
    you can" (an exception's type) does so; a ``DecodeError``, so it is a
    terminal error (``runtime.errors.classify``), never retried.

    Attributes:
        tag: The codec tag (``"$enum"``, ``"$exception"``, ...).
        name: The name found in the data (``"xml.dom.minidom:Node"``).
    """

    def __init__(self, tag: str, name: Any, reason: str) -> None:
        super().__init__(f"stored data names {name!r} under {tag}, which {reason}; nothing was imported or called")
        self.tag = tag
        self.name = name


class ClassNotAllowed(DecodeError):
    """Stored data names a class it may not: of another kind than its tag
    promises, or not one the job can hold. Nothing it names was imported or
    called.

    Attributes:
        tag: The codec tag (``"$enum"``, ``"$exception"``, ...).
        name: The name found in the data (``"os:system"``).
    """

    def __init__(self, tag: str, name: Any, reason: str) -> None:
        super().__init__(
            f"stored data names {name!r} under {tag}, which {reason}; nothing was imported or called "
            "(a journal row or keyed-state value names only classes the job holds: docs/guarantees.md#security)"
        )
        self.tag = tag
        self.name = name


@dataclasses.dataclass(frozen=True, eq=False)
class Kind:
    """What a tag promises its class is.

    Attributes:
        tag: The codec tag, for errors.
        what: The kind in words (``"an Enum class"``).
        accepts: Whether a class is of this kind.
    """

    tag: str
    what: str
    accepts: Callable[[type], bool] = dataclasses.field(repr=False)


def _is_event(cls: type) -> bool:
    from flink_agents.api.events.event import Event

    return issubclass(cls, Event)


ENUM = Kind("$enum", "an Enum class", lambda cls: issubclass(cls, Enum))
EXCEPTION = Kind("$exception", "an exception class", lambda cls: issubclass(cls, BaseException))
MODEL = Kind("$pydantic", "a pydantic model class", lambda cls: issubclass(cls, BaseModel))
DATACLASS = Kind("$dataclass", "a dataclass", dataclasses.is_dataclass)
ROW = Kind("$row", "pyflink.common.Row", lambda cls: f"{cls.__module__}:{cls.__qualname__}" == _ROW)
EVENT = Kind("event type", "an Event class", _is_event)


def _name_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


# Journals and keyed state written before the runtime was grouped into
# sub-packages name its classes by their old modules.
_MOVED_MODULES = {
    "flink_agents.runtime.action_loop": "flink_agents.runtime.execution.action_loop",
    "flink_agents.runtime.call_position": "flink_agents.runtime.durability.call_position",
    "flink_agents.runtime.callback_tools": "flink_agents.runtime.features.callback_tools",
    "flink_agents.runtime.callbacks": "flink_agents.runtime.features.callbacks",
    "flink_agents.runtime.codec": "flink_agents.runtime.durability.codec",
    "flink_agents.runtime.codec_classes": "flink_agents.runtime.durability.codec_classes",
    "flink_agents.runtime.codec_exceptions": "flink_agents.runtime.durability.codec_exceptions",
    "flink_agents.runtime.completion": "flink_agents.runtime.execution.completion",
    "flink_agents.runtime.context": "flink_agents.runtime.execution.context",
    "flink_agents.runtime.conversation": "flink_agents.runtime.features.conversation",
    "flink_agents.runtime.error_policy": "flink_agents.runtime.execution.error_policy",
    "flink_agents.runtime.event_codec": "flink_agents.runtime.execution.event_codec",
    "flink_agents.runtime.executors": "flink_agents.runtime.scheduling.executors",
    "flink_agents.runtime.ids": "flink_agents.runtime.durability.ids",
    "flink_agents.runtime.journal": "flink_agents.runtime.durability.journal",
    "flink_agents.runtime.key_runner": "flink_agents.runtime.scheduling.key_runner",
    "flink_agents.runtime.memory": "flink_agents.runtime.execution.memory",
    "flink_agents.runtime.metrics": "flink_agents.runtime.execution.metrics",
    "flink_agents.runtime.progress": "flink_agents.runtime.features.progress",
    "flink_agents.runtime.resources": "flink_agents.runtime.execution.resources",
    "flink_agents.runtime.run": "flink_agents.runtime.execution.run",
    "flink_agents.runtime.run_slots": "flink_agents.runtime.scheduling.run_slots",
    "flink_agents.runtime.state": "flink_agents.runtime.execution.state",
    "flink_agents.runtime.steering": "flink_agents.runtime.features.steering",
    "flink_agents.runtime.sub_agents": "flink_agents.runtime.features.sub_agents",
    "flink_agents.runtime.untrusted": "flink_agents.runtime.features.untrusted",
    "flink_agents.runtime.values": "flink_agents.runtime.durability.values",
}


def trust_package(name: str) -> None:
    """Let stored data name classes of the package ``name`` and its
    submodules (``"pydantic_ai"``, or ``"google.adk"`` under a namespace
    package), for a job whose values or exceptions come from a package its
    plan does not reach by itself (or the ``journal.trusted_packages``
    option).

    Its modules are not imported for data: the package must be loaded (the
    job imported it) before a class of it reads back.

    Raises:
        ValueError: ``name`` is not a dotted package name.
    """
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"trust_package: {name!r} is not a package name (e.g. 'requests', 'google.adk')")
    with _LOCK:
        _TRUSTED.add(name)


def trusted_packages() -> Set[str]:
    """The packages whose classes stored data may name (beside the standard
    library's)."""
    return set(_TRUSTED)


def _is_trusted(module: str) -> bool:
    prefix = module
    while True:
        if prefix in _TRUSTED:
            return True
        prefix, dot, _ = prefix.rpartition(".")
        if not dot:
            return False


def _allowed_module(module: str) -> bool:
    """Whether classes of ``module`` are ones stored data may name."""
    top = module.partition(".")[0]
    return top == "flink_agents" or top in _STDLIB or _is_trusted(module)


def _module_for(module: str, kind: Kind, name: str) -> Any:
    """The loaded module ``module``; nothing is ever imported for data (an
    import runs code: a package's own, and what it imports in turn).

    Raises:
        ClassNotAllowed: The module is not of a package the job uses.
        ClassGone: It is, but it is not loaded here.
    """
    if kind is ROW:
        allowed = f"{module}:Row" == _ROW
    else:
        allowed = _allowed_module(module)
    if not allowed:
        raise ClassNotAllowed(kind.tag, name, f"is not a class of a package this job uses (module {module})")
    loaded = sys.modules.get(module)
    if loaded is None and _importable_runtime_module(module):
        return importlib.import_module(module)
    if loaded is None:
        raise ClassGone(kind.tag, name, f"is not read back: its module {module} is not loaded in this process")
    return loaded


# Parts of the runtime whose import loads other packages (a provider SDK, a
# framework, mem0, which writes ~/.mem0, PyFlink, aiohttp): never imported
# for data. The rest imports only the standard library and the runtime's
# own dependencies.
_NOT_IMPORTED_FOR_DATA = (
    "flink_agents.integrations", "flink_agents.ingress", "flink_agents.cli", "flink_agents.jobs",
    "flink_agents.runtime.flink", "flink_agents.runtime.memory",
)


def _importable_runtime_module(module: str) -> bool:
    return module.partition(".")[0] == "flink_agents" and not any(
        module == prefix or module.startswith(prefix + ".") for prefix in _NOT_IMPORTED_FOR_DATA
    )


def _static_attribute(owner: Any, part: str) -> Any:
    """``owner.part`` read without running code: no module ``__getattr__``
    (a lazy import), no descriptor, no metaclass hook."""
    if isinstance(owner, types.ModuleType):
        return vars(owner).get(part, _MISSING)
    return inspect.getattr_static(owner, part, _MISSING)


_MISSING = object()


def resolve_class(name: Any, kind: Kind) -> type:
    """The class named ``"module:qualname"`` in stored data, of ``kind``:
    from the registry, else from a module of the runtime, the standard
    library or a trusted package (see the module docstring).

    Raises:
        ClassNotAllowed: The name is not one the data may name (malformed,
            of another kind, of a package the job does not use).
        ClassGone: A class the data may name, but not here (its module
            not loaded, or the code changed since it was written).
    """
    try:
        return _RESOLVED[(name, kind)]
    except (KeyError, TypeError):
        pass
    module, qualname = _parts(name, kind)
    module = _MOVED_MODULES.get(module, module)
    found: Any = _REGISTRY.get(f"{module}:{qualname}")
    if found is None:
        found = _module_for(module, kind, name)
        for i, part in enumerate(qualname.split(".")):
            if i and not isinstance(found, type):  # only classes nest: no path through another module
                raise ClassNotAllowed(kind.tag, name, f"reaches through a {type(found).__name__}, not a class")
            found = _static_attribute(found, part)
            if found is _MISSING:
                raise ClassGone(kind.tag, name, f"is not there: no {part!r} (the code changed since it was written?)")
        if isinstance(found, type) and not (
            _allowed_module(found.__module__) if kind is not ROW else _name_of(found) == _ROW
        ):
            raise ClassNotAllowed(kind.tag, name, f"is the class {found.__module__}.{found.__qualname__}, of a "
                                                  "package this job does not use")
    if not isinstance(found, type) or not kind.accepts(found):
        what = f"the class {found.__qualname__}" if isinstance(found, type) else f"a {type(found).__name__}"
        raise ClassNotAllowed(kind.tag, name, f"is {what}, not {kind.what}")
    with _LOCK:
        _RESOLVED[(name, kind)] = found
    return found


def _plain(part: str) -> bool:
    """A name part that is no dunder (``__globals__``, ``__main__`` of a package)."""
    return part.isidentifier() and not part.startswith("__")


def _parts(name: Any, kind: Kind) -> Tuple[str, str]:
    if not isinstance(name, str):
        raise ClassNotAllowed(kind.tag, name, "is not a 'module:qualname' text")
    module, colon, qualname = name.partition(":")
    parts = qualname.split(".")
    if (not colon or (module != "__main__" and not all(_plain(p) for p in module.split(".")))
            or not all(_plain(p) for p in parts)):
        raise ClassNotAllowed(kind.tag, name, "is not a 'module:qualname' name of a class")
    return module, qualname


def register_class(cls: type) -> None:
    """Make ``cls`` findable by its name in this process: a class that came
    by value and cannot be imported here, or one of a package the job does
    not otherwise reach that its stored values hold."""
    with _LOCK:
        _REGISTRY[_name_of(cls)] = cls


def has_class_name(cls: type, kind: Kind) -> bool:
    """Whether ``class_name(cls, kind)`` succeeded before in this process
    (it would again: the check's result is kept)."""
    return (cls, kind) in _NAMES


def class_name(cls: type, kind: Kind) -> str:
    """``"module:qualname"`` of ``cls``, checked to find ``cls`` again as
    ``kind`` when read back.

    Raises:
        TypeError: ``cls`` cannot be found by that name: it is defined inside
            a function, in the job's main script and the agent does not
            reach it, or in a package the job is not known to use (the
            message says what to do).
    """
    known = _NAMES.get((cls, kind))
    if known is not None:
        return known
    name = _name_of(cls)
    if "<locals>" in cls.__qualname__:
        raise TypeError(
            f"class {cls.__qualname__} (module {cls.__module__}) is defined inside a function, so it "
            "cannot be found by name when a journal or a checkpoint is read; define it at module level"
        )
    try:
        found = resolve_class(name, kind)
    except ClassNotAllowed as refused:
        top = cls.__module__.partition(".")[0]
        if _parts_ok(name) and top not in _STDLIB and top != "__main__" and not _is_trusted(cls.__module__):
            raise TypeError(
                f"class {cls.__qualname__} of module {cls.__module__} cannot be read back from a journal or "
                f"a checkpoint: package {top!r} is not one this job's plan reaches; "
                f"list it in the journal.trusted_packages option ({top!r}), or call "
                f"flink_agents.runtime.durability.codec_classes.trust_package({top!r}) where the job's "
                "code is imported"
            ) from None
        found = refused
    except (ImportError, AttributeError):
        found = None
    if found is not cls:
        # A class whose __qualname__ was renamed for display (Pydantic AI's
        # _HTTPModelServerError shows as ModelServerError): its module-level name.
        alias = _module_attribute_of(cls)
        if alias is not None:
            name, found = f"{cls.__module__}:{alias}", cls
    if found is not cls:
        where = "the job's main script (__main__)" if cls.__module__ == "__main__" else f"module {cls.__module__}"
        raise TypeError(
            f"class {cls.__qualname__} of {where} cannot be found by name where this job runs, so a "
            "restart could not read it back; use it in one of the agent's actions (or its tools), "
            "where the runtime finds it, or move it into a module shipped with the job "
            "(e.g. StreamExecutionEnvironment.add_python_file)"
        )
    with _LOCK:
        _NAMES[(cls, kind)] = name
    return name


def _parts_ok(name: str) -> bool:
    try:
        _parts(name, ENUM)
    except ClassNotAllowed:
        return False
    return True


def _module_attribute_of(cls: type) -> str | None:
    """The name under which ``cls``'s module holds it, if any."""
    module = sys.modules.get(cls.__module__)
    for attribute, value in list(vars(module).items()) if module is not None else []:
        if value is cls:
            return attribute
    return None


def _resolve_schema_class(module: str, qualname: str) -> type:
    return resolve_class(f"{module}:{qualname}", MODEL)


# Output schemas (api.agents.types) name their model class as module and
# qualname; on a worker it may be a main-script class only this registry knows.
_output_schema_types.use_class_resolver(_resolve_schema_class)
