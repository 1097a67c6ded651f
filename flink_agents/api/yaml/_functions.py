"""Resolve a YAML ``function:`` reference to the Python callable it names."""

from __future__ import annotations

import importlib
from typing import Any, Callable, List, Tuple

__all__ = ["resolve_callable", "split_reference"]


def split_reference(reference: str) -> Tuple[str, str]:
    """``(module, qualname)`` of a ``module:qualname`` reference, without
    importing anything.

    Raises:
        ValueError: ``reference`` is not of that form.
    """
    module_name, _, qualname = reference.partition(":")
    if not module_name or not qualname or ":" in qualname:
        raise ValueError(
            f"{reference!r} must be '<module-or-class>:<qualname>' (e.g. 'my_pkg.actions:process_input', "
            "'my_pkg.agents:MyAgent.process_input') or a dotted path"
        )
    return module_name, qualname


def resolve_callable(reference: str) -> Tuple[Callable[..., Any], str, str]:
    """The callable ``reference`` names, with its module and qualname:
    ``module:qualname`` (Flink Agents 0.3.1's form; the qualname may be
    ``Class.method``) or a dotted ``module.qualname``.

    Raises:
        ValueError: The reference is malformed, its module cannot be imported,
            an attribute is missing, or the target is not callable; the
            message says which.
    """
    if ":" in reference:
        module_name, qualname = split_reference(reference)
        module = _import(module_name)
    else:
        parts = reference.split(".")
        if len(parts) < 2 or not all(parts):
            raise ValueError(f"{reference!r} must be '<module-or-class>:<qualname>' or a dotted path 'module.function'")
        module, qualname = None, ""
        for cut in range(len(parts) - 1, 0, -1):
            module_name = ".".join(parts[:cut])
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and module_name.startswith(exc.name):
                    continue  # try a shorter module path
                raise ValueError(f"importing module {module_name!r} failed: {exc}") from None
            except Exception as exc:  # user code at import time: name it
                raise ValueError(f"importing module {module_name!r} raised {type(exc).__name__}: {exc}") from None
            qualname = ".".join(parts[cut:])
            break
        if module is None:
            raise ValueError(f"no module of {reference!r} can be imported (no module named {parts[0]!r})")
        module_name = module.__name__
    target: Any = module
    done: List[str] = []
    for part in qualname.split("."):
        if not hasattr(target, part):
            owner = f"'{module_name}:{'.'.join(done)}'" if done else f"module {module_name!r}"
            raise ValueError(f"{owner} has no attribute {part!r}")
        target = getattr(target, part)
        done.append(part)
    if not callable(target):
        raise ValueError(f"{reference!r} is a {type(target).__name__}, not a function")
    return target, module_name, qualname


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise ValueError(f"importing module {module_name!r} raised {type(exc).__name__}: {exc}") from None
