"""Every public class, function and method of Flink Agents 0.3.1's core API
(``flink_agents/api``, with 0.3.1's Java wrapper modules
``api.chat_models.java_chat_model`` and ``api.embedding_models.java_embedding_model``;
providers, MCP, retrieval, long-term memory and the ReAct agent are issues
of their own) exists here at the same module path and
accepts the same parameters, in the same positional order.

``tests/data/api031_signatures.json`` is what ``tools/extract_signatures.py``
makes of the 0.3.1 release's source (``tests/compat/test_recorded031_surfaces.py``
checks that): for each name, its positional parameters, keyword-only
parameters and whether it takes ``*args``/``**kwargs`` (``null`` for a
class, ``"property"`` for a property or a pydantic field). The behaviour behind
each name is tested where the name is implemented (tests/engine/test_configuration.py,
test_events_tools_compat.py, test_resources_env_compat.py, test_yaml_agents.py,
test_skills.py, test_event_log.py, test_metrics.py, test_table_api_e2e.py) and
by the 0.3.1-style agents of tests/compat/test_compat031_agents.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.signatures import lookup as _lookup
from tests.support.signatures import positional as _positional

SIGNATURES = json.loads((Path(__file__).parents[1] / "data" / "api031_signatures.json").read_text())

# Every 0.3.1 name is here with compatible parameters: no deliberate
# difference is left (the Java interop names are here too: a plan using them
# fails to compile, tested in tests/compat/test_java_interop.py). A new one
# would need its reason in docs/compatibility.md and a test of its own.


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_the_031_name_exists_with_compatible_parameters(name: str) -> None:
    try:
        found, owner = _lookup(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{name} is missing: {exc}")
    wanted = SIGNATURES[name]
    if wanted is None or wanted == "property" or found == "field":
        return
    if isinstance(found, property):
        pytest.fail(f"{name} is a property here, a method in 0.3.1")
    positional, var_args, names, var_kwargs = _positional(found, owner)
    for index, param in enumerate(wanted["args"]):
        if index < len(positional):
            assert positional[index] == param, f"{name}: parameter {index} is {positional[index]!r}, 0.3.1 has {param!r}"
        else:
            assert var_args or var_kwargs or param in names, f"{name}: no parameter {param!r} (0.3.1 has it)"
    for param in wanted["kwonly"]:
        assert param in names or var_kwargs, f"{name}: no keyword parameter {param!r}"
    if wanted["var"]:
        assert var_args, f"{name}: 0.3.1 takes *args"
    if wanted["varkw"]:
        assert var_kwargs, f"{name}: 0.3.1 takes **kwargs"
