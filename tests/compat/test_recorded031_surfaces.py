"""The recorded 0.3.1 surfaces that the surface tests check this project
against (``tests/data/*031_signatures.json``) are what
``tools/extract_signatures.py`` makes of the Flink Agents 0.3.1 release's
own source, unedited: no name was left out or changed by hand.

The source is the directory that holds 0.3.1's ``flink_agents`` package,
given as ``FLINK_AGENTS_031_SOURCE``: ``tools/test.sh`` unpacks the
release's source distribution (``flink-agents==0.3.1`` from the package
index, nothing installed) into ``~/.cache/flink-agents/flink-agents-0.3.1``
and sets it; the ``python/`` directory of a release-0.3.1 checkout of
apache/flink-agents works too. To record a surface again, run the tool as
``_recipe`` below says and write its output over the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "extract_signatures.py"
SOURCE = os.environ.get("FLINK_AGENTS_031_SOURCE", "")

# Each record: the tool's flags and the 0.3.1 modules it was made from, in order.
RECORDS = {
    # The core API (tests/compat/test_api031_surface.py), with the Java wrapper modules.
    "api031_signatures.json": ([], [
        "flink_agents/api/agents/agent.py", "flink_agents/api/chat_message.py",
        "flink_agents/api/chat_models/chat_model.py", "flink_agents/api/chat_models/java_chat_model.py",
        "flink_agents/api/configuration.py", "flink_agents/api/core_options.py", "flink_agents/api/decorators.py",
        "flink_agents/api/embedding_models/java_embedding_model.py", "flink_agents/api/events/chat_event.py",
        "flink_agents/api/events/event.py", "flink_agents/api/events/tool_event.py",
        "flink_agents/api/execution_environment.py", "flink_agents/api/function.py",
        "flink_agents/api/memory_object.py", "flink_agents/api/memory_reference.py",
        "flink_agents/api/metric_group.py", "flink_agents/api/prompts/prompt.py", "flink_agents/api/prompts/utils.py",
        "flink_agents/api/resource.py", "flink_agents/api/resource_context.py", "flink_agents/api/runner_context.py",
        "flink_agents/api/skills.py", "flink_agents/api/tools/function_tool.py", "flink_agents/api/tools/tool.py",
        "flink_agents/api/tools/utils.py", "flink_agents/api/yaml/aliases.py", "flink_agents/api/yaml/loader.py",
        "flink_agents/api/yaml/specs.py",
    ]),
    # Model providers, embedding models, the ReAct agent (test_providers031_surface.py).
    "providers031_signatures.json": ([], [
        "flink_agents/api/agents/react_agent.py", "flink_agents/api/agents/types.py",
        "flink_agents/api/embedding_models/embedding_model.py",
        "flink_agents/integrations/chat_models/anthropic/anthropic_chat_model.py",
        "flink_agents/integrations/chat_models/azure/azure_openai_chat_model.py",
        "flink_agents/integrations/chat_models/ollama_chat_model.py",
        "flink_agents/integrations/chat_models/tongyi_chat_model.py",
        "flink_agents/integrations/chat_models/openai/openai_chat_model.py",
        "flink_agents/integrations/chat_models/openai/openai_utils.py",
        "flink_agents/integrations/chat_models/chat_model_utils.py",
        "flink_agents/integrations/embedding_models/openai_embedding_model.py",
        "flink_agents/integrations/embedding_models/local/ollama_embedding_model.py",
        "flink_agents/integrations/embedding_models/tongyi_embedding_model.py",
    ]),
    # Vector stores, retrieval, long-term memory, MCP, with constants (test_retrieval031_surface.py).
    "retrieval031_signatures.json": (["--constants"], [
        "flink_agents/api/vector_stores/vector_store.py",
        "flink_agents/api/vector_stores/java_vector_store.py",
        "flink_agents/api/events/context_retrieval_event.py",
        "flink_agents/api/memory/long_term_memory.py",
        "flink_agents/integrations/mcp/mcp.py",
        "flink_agents/integrations/mcp/utils.py",
        "flink_agents/integrations/vector_stores/chroma/chroma_vector_store.py",
        "flink_agents/integrations/vector_stores/mem0/mem0_vector_store.py",
    ]),
}


def _recipe(record: str, source: str) -> List[str]:
    flags, modules = RECORDS[record]
    return [sys.executable, str(TOOL), *flags, source, *modules]


@pytest.mark.skipif(
    not SOURCE, reason="FLINK_AGENTS_031_SOURCE is not set (tools/test.sh sets it to 0.3.1's unpacked source)"
)
@pytest.mark.parametrize("record", sorted(RECORDS))
def test_the_recorded_surface_is_what_the_tool_extracts_from_the_0_3_1_source(record: str) -> None:
    assert (Path(SOURCE) / "flink_agents" / "__init__.py").is_file(), f"{SOURCE} holds no flink_agents package"
    done = subprocess.run(_recipe(record, SOURCE), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "tests" / "data" / record).read_text(), (
        f"tests/data/{record} differs from the tool's output on {SOURCE}"
    )
