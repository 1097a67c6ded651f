"""Compare this project's names with a recorded 0.3.1 surface (the JSON of
``tools/extract_signatures.py``: ``"<module>:<name>"`` -> ``null`` for a
class, ``"property"``, or ``{"args", "kwonly", "var", "varkw"}``).

Compatible means a 0.3.1 call still works: the same positional parameters in
the same order (more may follow), every keyword-only parameter accepted (by
name or ``**kwargs``), ``*args``/``**kwargs`` where 0.3.1 takes them. A
pydantic field stands in for a 0.3.1 property or annotated attribute.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, List, Tuple

__all__ = ["lookup", "positional", "problems"]


def lookup(name: str) -> Tuple[Any, Any]:
    """``(object, owner class or None)`` for ``"module:Class.member"``;
    ``("field", owner)`` when the member is a pydantic field.

    Raises:
        ImportError, AttributeError: The module or the name is missing.
    """
    module_name, attr = name.split(":")
    owner = importlib.import_module(module_name)
    parts = attr.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    if len(parts) > 1:
        fields = getattr(owner, "model_fields", {})
        if parts[-1] in fields:  # a pydantic field stands in for a 0.3.1 property
            return "field", owner
        return inspect.getattr_static(owner, parts[-1]), owner
    return getattr(owner, parts[-1]), None


def positional(fn: Any, owner: Any) -> Tuple[List[str], bool, set, bool]:
    """``(positional names without self/cls, takes *args, all names, takes **kwargs)``."""
    static = isinstance(fn, staticmethod)
    target = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
    params = list(inspect.signature(target).parameters.values())
    if params and not static and (owner is not None) and params[0].name in ("self", "cls"):
        params = params[1:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return (
        names,
        any(p.kind == p.VAR_POSITIONAL for p in params),
        {p.name for p in params},
        any(p.kind == p.VAR_KEYWORD for p in params),
    )


def problems(name: str, wanted: Any) -> List[str]:
    """What keeps 0.3.1 code using ``name`` (recorded as ``wanted``) from
    working here; empty when it works."""
    try:
        found, owner = lookup(name)
    except (ImportError, AttributeError) as exc:
        return [f"{name} is missing: {type(exc).__name__}: {exc}"]
    if wanted is None or wanted == "property" or found == "field":
        return []
    if isinstance(found, property):
        return [f"{name} is a property here, a method in 0.3.1"]
    names, var_args, all_names, var_kwargs = positional(found, owner)
    found_problems = []
    for index, param in enumerate(wanted["args"]):
        if index < len(names):
            if names[index] != param:
                found_problems.append(f"{name}: parameter {index} is {names[index]!r}, 0.3.1 has {param!r}")
        elif not (var_args or var_kwargs or param in all_names):
            found_problems.append(f"{name}: no parameter {param!r} (0.3.1 has it)")
    for param in wanted["kwonly"]:
        if not (param in all_names or var_kwargs):
            found_problems.append(f"{name}: no keyword parameter {param!r}")
    if wanted["var"] and not var_args:
        found_problems.append(f"{name}: 0.3.1 takes *args")
    if wanted["varkw"] and not var_kwargs:
        found_problems.append(f"{name}: 0.3.1 takes **kwargs")
    return found_problems
