"""The classes and packages an agent's plan reaches, registered for the codec.

A Flink Python worker gets the plan by value (cloudpickle): classes of the
job's main script and of modules pickled by value cannot be imported there
by name. Walking everything the plan holds (action and tool functions with
what their code references, the event classes actions listen to, action
configs, resource arguments), ``register_plan_classes`` registers those
classes with ``codec_classes`` and trusts the packages the walk reaches (the
user's modules, and the libraries their code uses: ``pydantic_ai`` for an
action that runs a Pydantic AI agent), so that stored data may name their
classes (``codec_classes``: nothing else is read back). The engine calls it
when it starts, on every host and worker, before any state or journal is
read.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, Dict, Iterable, Set

from pydantic import BaseModel as _BaseModel

from flink_agents.runtime.durability.codec_classes import register_class, trust_package

__all__ = ["register_plan_classes", "register_reachable_classes"]

# Modules whose objects the walk never descends into: their classes import by
# name. Their packages are still trusted when the walk reaches them.
_LIBRARY_PREFIXES = ("flink_agents.", "pydantic", "typing", "builtins", "collections", "enum", "abc", "asyncio")


def _package_of(module_name: str) -> str:
    """The package a module belongs to, for trust: its top level, or its
    first two levels under a namespace package (``google.adk``, not every
    ``google.*``)."""
    parts = module_name.split(".")
    top = sys.modules.get(parts[0])
    if len(parts) > 1 and top is not None and getattr(top, "__file__", None) is None:
        return ".".join(parts[:2])
    return parts[0]


def _is_library(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.startswith(_LIBRARY_PREFIXES)


def _not_findable(cls: type) -> bool:
    """Whether ``cls`` is not where its name says (it came by value)."""
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is not cls


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
        self.packages: Set[str] = set()

    def _reach(self, obj: Any) -> None:
        """Note the package of a class, function or module the plan reaches."""
        name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
        if isinstance(name, str) and name:
            self.packages.add(_package_of(name))

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
        elif isinstance(obj, types.ModuleType):
            self._reach(obj)
        else:
            self.visit(type(obj))  # a global holding an instance: its class
            if isinstance(obj, _BaseModel):  # and a model's field values (OutputSchema's class)
                self.visit(_snapshot(vars(obj).values()))

    def _function(self, fn: types.FunctionType) -> None:
        self._reach(fn)
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
        self._reach(cls)
        if _is_library(cls) or cls.__module__ == "builtins":
            return
        if "<locals>" not in cls.__qualname__ and _not_findable(cls):
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
    for package in walk.packages:
        trust_package(package)
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


