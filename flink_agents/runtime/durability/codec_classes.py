"""Classes by name, for the codec: ``"module:qualname"`` both ways.

The codec writes a class (of an event, a pydantic model, a dataclass, an enum
or an exception) as ``"module:qualname"`` and finds it again when reading.
Most classes are found by importing their module. Classes that travelled to
a Flink Python worker by value (defined in the job's main script,
``__main__``, or in a module registered with
``cloudpickle.register_pickle_by_value``) cannot be imported there: the
worker's ``__main__`` is PyFlink's, not the script. For them this module
keeps a registry, consulted before importing, which
``register_reachable_classes`` fills from everything the agent's plan holds
(action and tool functions with what they reference, the event classes
actions listen to, resource classes), when the operator opens, so it is
filled again on every worker after a restart.

``class_name`` refuses, at write time, a class that could not be found by its
name when read (one defined inside a function, or a main-script class the
registry does not know), so a run never fails later, on replay, because of
it.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
import types
import typing
from typing import Any, Dict, Iterable, Set

from pydantic import BaseModel as _BaseModel

from flink_agents.api.agents import types as _output_schema_types

__all__ = ["class_name", "register_class", "register_plan_classes", "register_reachable_classes", "resolve_class"]

_REGISTRY: Dict[str, type] = {}  # "module:qualname" -> class, for classes not importable by name
_NAMES: Dict[type, str] = {}  # classes checked to be found again by their name
_LOCK = threading.Lock()
# Modules whose objects the walk never descends into: their classes import by name.
_LIBRARY_PREFIXES = ("flink_agents.", "pydantic", "typing", "builtins", "collections", "enum", "abc", "asyncio")


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


def _import(name: str) -> Any:
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(_MOVED_MODULES.get(module, module))
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_class(name: str) -> Any:
    """The class named ``"module:qualname"``: from the registry, else imported.

    Raises:
        ImportError, AttributeError: No such class here.
    """
    found = _REGISTRY.get(name)
    return found if found is not None else _import(name)


def register_class(cls: type) -> None:
    """Make ``cls`` findable by its name in this process (a class that came
    by value and cannot be imported here)."""
    with _LOCK:
        _REGISTRY[_name_of(cls)] = cls


def class_name(cls: type) -> str:
    """``"module:qualname"`` of ``cls``, checked to find ``cls`` again.

    Raises:
        TypeError: ``cls`` cannot be found by that name: it is defined inside
            a function, or in the job's main script and the agent does not
            reach it (the message says what to do).
    """
    known = _NAMES.get(cls)
    if known is not None:
        return known
    name = _name_of(cls)
    if "<locals>" in cls.__qualname__:
        raise TypeError(
            f"class {cls.__qualname__} (module {cls.__module__}) is defined inside a function, so it "
            "cannot be found by name when a journal or a checkpoint is read; define it at module level"
        )
    try:
        found = resolve_class(name)
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
        _NAMES[cls] = name
    return name


def _module_attribute_of(cls: type) -> str | None:
    """The name under which ``cls``'s module holds it, if any."""
    module = sys.modules.get(cls.__module__)
    for attribute, value in list(vars(module).items()) if module is not None else []:
        if value is cls:
            return attribute
    return None


def _is_library(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.startswith(_LIBRARY_PREFIXES)


def _not_importable(cls: type) -> bool:
    try:
        return _import(_name_of(cls)) is not cls
    except Exception:  # importing a user module may fail in any way: then it cannot be found either
        return True


def _annotation_classes(annotation: Any) -> Iterable[Any]:
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _annotation_classes(arg)


def _snapshot(items: Iterable[Any]) -> tuple:
    """``tuple(items)``, retried while another thread changes the container
    (a global dict or list of user code, say a cache): the subtasks of a
    Python worker open their operators, and so walk, on threads of their own."""
    for _ in range(100):
        try:
            return tuple(items)
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return tuple(items)


class _Walk:
    """Everything reachable from functions and classes, registering the
    classes that cannot be imported by name."""

    def __init__(self) -> None:
        self.seen: Set[int] = set()
        self.registered = 0

    def visit(self, obj: Any) -> None:
        if id(obj) in self.seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            return
        self.seen.add(id(obj))
        if isinstance(obj, (staticmethod, classmethod)):
            self.visit(obj.__func__)
        elif isinstance(obj, types.MethodType):
            self.visit(obj.__func__)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for item in _snapshot(obj):
                self.visit(item)
        elif isinstance(obj, dict):
            for item in _snapshot(obj.values()):
                self.visit(item)
        elif typing.get_origin(obj) is not None:
            for arg in _annotation_classes(obj):
                if arg is not obj:
                    self.visit(arg)
        elif not isinstance(obj, types.ModuleType):
            self.visit(type(obj))  # a global holding an instance: its class
            if isinstance(obj, _BaseModel):  # and a model's field values (OutputSchema's class)
                self.visit(_snapshot(vars(obj).values()))

    def _function(self, fn: types.FunctionType) -> None:
        if _is_library(fn):
            return
        self._code(fn.__code__, fn.__globals__)
        for cell in fn.__closure__ or ():
            try:
                self.visit(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        self.visit(fn.__defaults__)
        self.visit(fn.__kwdefaults__)
        self.visit(getattr(fn, "__annotations__", None))
        self.visit(getattr(fn, "__wrapped__", None))

    def _code(self, code: types.CodeType, namespace: Dict[str, Any]) -> None:
        for name in code.co_names:
            if name in namespace:
                self.visit(namespace[name])
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const, namespace)

    def _class(self, cls: type) -> None:
        if _is_library(cls) or cls.__module__ == "builtins":
            return
        if "<locals>" not in cls.__qualname__ and _not_importable(cls):
            register_class(cls)
            self.registered += 1
        for base in cls.__mro__[1:]:
            self.visit(base)
        for name, member in list(vars(cls).items()):
            if not name.startswith(("__", "_abc_")):  # not the class machinery (pydantic's, abc's)
                self.visit(member)
        fields = getattr(cls, "model_fields", None)
        if isinstance(fields, dict):
            for field in fields.values():
                for arg in _annotation_classes(getattr(field, "annotation", None)):
                    self.visit(arg)
        if dataclasses.is_dataclass(cls):
            for field in dataclasses.fields(cls):
                for arg in _annotation_classes(field.type):
                    self.visit(arg)


def register_reachable_classes(roots: Iterable[Any]) -> int:
    """Register every class reachable from ``roots`` (functions, classes,
    containers of them) that cannot be imported by its name here.

    Returns:
        How many classes were registered.
    """
    walk = _Walk()
    for root in roots:
        walk.visit(root)
    return walk.registered



def register_plan_classes(plan: Any) -> int:
    """``register_reachable_classes`` from everything an ``AgentPlan`` (and
    its sub-agents' plans) holds: action and tool functions, the event
    classes actions listen to, action configs and resource arguments. Call it where the plan was unpickled (a
    Flink worker), before any state or journal is read.

    Returns:
        How many classes were registered.
    """
    roots: list = []

    def add(p: Any) -> None:
        roots.extend(p.event_classes)
        functions = [spec.function for spec in p.actions.values()]
        functions += [spec.function for by_name in p.resources.values() for spec in by_name.values()]
        roots.extend(f.loaded for f in functions if f is not None and f.loaded is not None)
        # Classes handed over as values: an action's config, a resource's
        # constructor arguments (an output schema's model class, say).
        roots.extend(spec.config for spec in p.actions.values())
        roots.extend(
            spec.descriptor.arguments for by_name in p.resources.values() for spec in by_name.values()
            if spec.descriptor is not None
        )
        for child in p.children.values():
            add(child)

    add(plan)
    return register_reachable_classes(roots)


def _resolve_schema_class(module: str, qualname: str) -> type:
    return resolve_class(f"{module}:{qualname}")


# Output schemas (api.agents.types) name their model class as module and
# qualname; on a worker it may be a main-script class only this registry knows.
_output_schema_types.use_class_resolver(_resolve_schema_class)
