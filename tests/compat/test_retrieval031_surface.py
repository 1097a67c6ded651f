"""Every public class, function, method and constant of Flink Agents 0.3.1's
vector stores, context retrieval events, long-term memory API, MCP
integration and Chroma store exists here at the same module path and accepts
the same parameters, in the same positional order (the check of
``tests/compat/test_providers031_surface.py``, for the modules of issue 17).

``tests/data/retrieval031_signatures.json`` is what
``tools/extract_signatures.py --constants`` makes of the 0.3.1 release's
source (``tests/compat/test_recorded031_surfaces.py`` checks that and
lists the modules).

For each name: ``null`` (a class), ``"property"`` (a property or a pydantic
field), its positional and keyword-only parameters and whether it takes
``*args``/``**kwargs``, or, with ``--constants``, a constant: ``{"value":
v}`` (an enum member or a module constant: the same value here),
``{"key": k}`` (a ``ConfigOption``: the same key here). The modules import
without ``mcp`` or ``chromadb`` (SDKs load lazily), so this test needs
neither. The behaviour behind each name is tested elsewhere (the MCP,
vector store, retrieval and long-term memory tests).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, List

import pytest

from tests.support.signatures import lookup, problems

RECORDED = Path(__file__).parents[1] / "data" / "retrieval031_signatures.json"
SIGNATURES = json.loads(RECORDED.read_text())

# Every 0.3.1 name below is here (no deliberate difference is left: the Java
# vector store wrappers exist; a plan using one fails to compile, see
# tests/compat/test_java_interop.py).


def _constant_problems(name: str, wanted: Any) -> List[str]:
    """What differs for a recorded constant (``{"value": v}`` or ``{"key": k}``)."""
    try:
        found, _ = lookup(name)
    except (ImportError, AttributeError) as exc:
        return [f"{name} is missing: {type(exc).__name__}: {exc}"]
    if wanted == "constant":
        return []
    if "value" in wanted:
        value = found.value if isinstance(found, Enum) else found
        if value != wanted["value"]:
            return [f"{name} is {value!r} here, {wanted['value']!r} in 0.3.1"]
        return []
    key = found.get_key() if hasattr(found, "get_key") else getattr(found, "key", None)
    if key != wanted["key"]:
        return [f"{name} has key {key!r} here, {wanted['key']!r} in 0.3.1"]
    return []


def _is_constant(entry: Any) -> bool:
    return entry == "constant" or (isinstance(entry, dict) and ("value" in entry or "key" in entry))


def test_the_recorded_surface_covers_every_module() -> None:
    modules = {name.split(":")[0] for name in SIGNATURES}
    assert len(modules) == 8, sorted(modules)
    assert SIGNATURES["flink_agents.integrations.mcp.utils:extract_mcp_content_item"]["args"] == ["content_item"]
    assert SIGNATURES["flink_agents.api.memory.long_term_memory:LongTermMemoryOptions.Mem0.VECTOR_STORE"] == {
        "key": "long-term-memory.mem0.vector-store"
    }


@pytest.mark.parametrize(
    "name", sorted(SIGNATURES), ids=lambda name: name.split(".", 2)[-1]
)
def test_the_031_name_exists_with_compatible_parameters(name: str) -> None:
    wanted = SIGNATURES[name]
    found = _constant_problems(name, wanted) if _is_constant(wanted) else problems(name, wanted)
    assert not found, "; ".join(found)
