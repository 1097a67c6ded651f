"""Every public class, function and method of Flink Agents 0.3.1's model
providers, embedding models and ReAct agent exists here at the same module
path and accepts the same parameters, in the same positional order (the
check of ``tests/compat/test_api031_surface.py``, for the modules of issue 16).

``tests/data/providers031_signatures.json`` is what
``tools/extract_signatures.py`` makes of the 0.3.1 release's source, without
importing it (``tests/compat/test_recorded031_surfaces.py`` checks that and
lists the modules).

For each name: ``null`` (a class), ``"property"`` (a property or a pydantic
field), or its positional and keyword-only parameters and whether it takes
``*args``/``**kwargs``. A module imports without its provider's SDK (SDKs
load lazily), so this test needs none. The behaviour behind each name is
tested with the provider (tests/test_*_chat_model.py, the embedding model
tests, tests/engine/test_react_agent.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.signatures import problems

SIGNATURES = json.loads((Path(__file__).parents[1] / "data" / "providers031_signatures.json").read_text())


def test_the_recorded_surface_covers_every_module() -> None:
    modules = {name.split(":")[0] for name in SIGNATURES}
    assert len(modules) == 13, sorted(modules)
    assert "flink_agents.api.agents.react_agent:ReActAgent.__init__" in SIGNATURES


@pytest.mark.parametrize("name", sorted(SIGNATURES), ids=lambda name: name.split(".", 2)[-1])
def test_the_031_name_exists_with_compatible_parameters(name: str) -> None:
    found = problems(name, SIGNATURES[name])
    assert not found, "; ".join(found)
