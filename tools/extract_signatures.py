"""Extract the public surface of Python modules from their source, with ``ast``
(nothing is imported, so a module's SDK need not be installed).

Usage::

    python tools/extract_signatures.py [--constants] SOURCE_ROOT MODULE_FILE... > signatures.json

``SOURCE_ROOT`` is the directory that holds the ``flink_agents`` package (for
0.3.1: the ``python/`` directory of apache/flink-agents' release-0.3.1);
each ``MODULE_FILE`` is a path under it (``flink_agents/api/agents/react_agent.py``).

Output: one JSON object, ``"<module>:<name>"`` -> entry, in source order:

- a public class: ``null``;
- a public function, or a public method (``__init__`` included) of a public
  class: ``{"args": [positional parameter names, without self/cls],
  "kwonly": [keyword-only names], "var": takes *args, "varkw": takes **kwargs}``;
- a property, or an annotated class attribute that is not a ``ClassVar``
  (a pydantic field): ``"property"``.

Public means: the name does not start with ``_``. Without ``--constants``,
nested classes and plain (unannotated) assignments are not listed. The format
is that of ``tests/data/api031_signatures.json``, read by
``tests/support/signatures.py``.

With ``--constants`` (``tests/data/retrieval031_signatures.json``), also:

- a public nested class (``"<module>:Outer.Inner"``): ``null``, and its
  members as above, recursively;
- a plain assignment to one public name, in a class (an enum member, a
  ``ConfigOption``) or at module level (``DEFAULT_COLLECTION = ...``):
  ``{"value": v}`` when the value is a literal (``ast.literal_eval``);
  ``{"key": k}`` when it is a call with a literal first argument or ``key=``
  argument (a ``ConfigOption``: its key); else ``"constant"``. ``__all__``
  and pydantic's ``model_config`` are not listed.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple


def _is_public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def _decorator_names(node: ast.AST) -> set:
    names = set()
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)  # functools.cached_property, x.setter
    return names


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> Dict[str, Any]:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if is_method and "staticmethod" not in _decorator_names(fn) and params and params[0] in ("self", "cls"):
        params = params[1:]
    return {
        "args": params,
        "kwonly": [a.arg for a in fn.args.kwonlyargs],
        "var": fn.args.vararg is not None,
        "varkw": fn.args.kwarg is not None,
    }


def _is_class_var(annotation: ast.AST) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (isinstance(target, ast.Name) and target.id == "ClassVar") or (
        isinstance(target, ast.Attribute) and target.attr == "ClassVar"
    )


def _constant(value: ast.AST) -> Any:
    """The entry of a plain assignment's value (see ``--constants``)."""
    try:
        return {"value": ast.literal_eval(value)}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(value, ast.Call):
        key = next((k.value for k in value.keywords if k.arg == "key"), value.args[0] if value.args else None)
        if key is not None:
            try:
                return {"key": ast.literal_eval(key)}
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    return "constant"


def _assigned_name(node: ast.AST) -> str | None:
    """The one public name a plain ``NAME = value`` assigns, else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name = node.targets[0].id
        if not name.startswith("_") and name != "model_config":  # pydantic's settings, not an API
            return name
    return None


def _class_members(cls: ast.ClassDef, constants: bool = False) -> Iterator[Tuple[str, Any]]:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(node.name):
            decorators = _decorator_names(node)
            if "setter" in decorators or "deleter" in decorators:
                continue  # the property is listed once, by its getter
            if decorators & {"property", "cached_property"}:
                yield node.name, "property"
            else:
                yield node.name, _signature(node, is_method=True)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _is_public(node.target.id) and not _is_class_var(node.annotation):
                yield node.target.id, "property"
        elif constants and isinstance(node, ast.ClassDef) and _is_public(node.name):
            yield node.name, None
            for name, entry in _class_members(node, constants):
                yield f"{node.name}.{name}", entry
        elif constants and _assigned_name(node) is not None:
            yield _assigned_name(node), _constant(node.value)  # type: ignore[union-attr]


def extract(root: Path, module_file: str, constants: bool = False) -> Dict[str, Any]:
    """The surface of one module file (see the module docstring); with
    ``constants``, nested classes and plain assignments too."""
    module = module_file[:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    tree = ast.parse((root / module_file).read_text(encoding="utf-8"), filename=module_file)
    found: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and _is_public(node.name):
            found[f"{module}:{node.name}"] = None
            for name, entry in _class_members(node, constants):
                found.setdefault(f"{module}:{node.name}.{name}", entry)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(node.name):
            found[f"{module}:{node.name}"] = _signature(node, is_method=False)
        elif constants and _assigned_name(node) not in (None, "__all__"):
            found[f"{module}:{_assigned_name(node)}"] = _constant(node.value)  # type: ignore[attr-defined]
    return found


def main(argv: list) -> int:
    args = argv[1:]
    constants = "--constants" in args
    args = [a for a in args if a != "--constants"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(args[0])
    surface: Dict[str, Any] = {}
    for module_file in args[1:]:
        surface.update(extract(root, module_file, constants))
    json.dump(surface, sys.stdout, indent=0)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
