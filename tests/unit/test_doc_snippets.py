"""Every ```python block of README.md and docs/*.md runs as written.

A reader's first contact is a snippet copied from a page; one that fails
(a missing import, a tool the plan cannot find) costs trust. Each block is
run in a fresh namespace, in a temporary working directory, with any file
the page declares (``<!-- file: NAME -->`` right before a fenced block: the
block is written to NAME first) and, where the block calls a model, with a
scripted model server on 127.0.0.1 whose address the block reads from the
environment variable the page names (``OLLAMA_BASE_URL``).

A block that cannot run alone (a method body, a step of a larger job, one
that starts a Flink job on a cluster) is marked on the line right before it
with ``<!-- fragment: why -->``. The marks are counted and kept few.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.support.scripted_ollama_server import OllamaScriptedServer

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*(fragment|file)\s*:\s*(.*?)\s*-->\s*$")

# Fragments are allowed, but each one is a snippet a reader cannot paste and
# run; this bound makes adding one a decision.
MAX_FRAGMENTS = 6


@dataclass(frozen=True)
class Block:
    page: Path
    line: int           # 1-based line of the opening fence
    lang: str
    code: str
    mark: Optional[str]     # "fragment" / "file"
    mark_arg: Optional[str]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> List[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(Block(page, line, match.group(1), match.group(2),
                           mark.group(1) if mark else None, mark.group(2) if mark else None))
    return found


ALL_BLOCKS = [b for page in PAGES for b in _blocks(page)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "python"]
RUNNABLE = [b for b in PYTHON_BLOCKS if b.mark != "fragment"]
FRAGMENTS = [b for b in PYTHON_BLOCKS if b.mark == "fragment"]


def _ollama_react_replies() -> list:
    """The ReAct example of docs/providers.md: (2 + 3) * 4 in two tool rounds."""
    return [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "multiply", "arguments": {"a": 5, "b": 4}}}]},
        {"role": "assistant", "content": json.dumps({"result": 20})},
    ]


# Blocks that call a model, by page and a line of their code: the scripted
# replies their server answers with.
_OLLAMA_SCRIPTS = {
    ("docs/providers.md", "agent = ReActAgent("): _ollama_react_replies,
}


# What a block's comments promise, checked on the names it leaves behind.
def _react_answer(ns: dict) -> None:
    # The registered tools ran: their results went back to the model.
    tool_results = [m["content"] for m in ns["__model_requests__"][-1]["messages"] if m["role"] == "tool"]
    assert tool_results == ["5", "20"], tool_results
    assert [{key: value.model_dump() for key, value in out.items()} for out in ns["outputs"]] == [
        {"q1": {"result": 20}}]


_CHECKS = {
    ("README.md", "class CountingAgent(Agent):"): lambda ns: _assert_equal(
        ns["outputs"], [{"a": {"value": 1, "seen": 1}}, {"a": {"value": 2, "seen": 2}}]),
    ("docs/providers.md", "agent = ReActAgent("): _react_answer,
    ("docs/tools_and_retrieval.md", "class FactAgent(Agent):"): lambda ns: _assert_equal(
        ns["outputs"][-1]["p1"][0], ("the lid cracks in the dishwasher", {"source": "r17"})),
    ("docs/yaml_agents.md", 'env.load_yaml("review_agent.yaml")'): lambda ns: _assert_equal(
        sorted(key for out in ns["outputs"] for key in out), ["B00A1", "B00A2"]),
}


def _assert_equal(actual, expected) -> None:
    assert actual == expected


def _keyed(table: dict, block: Block):
    page = str(block.page.relative_to(ROOT))
    return next((value for (p, needle), value in table.items() if p == page and needle in block.code), None)


def _script_for(block: Block):
    return _keyed(_OLLAMA_SCRIPTS, block)


def _declared_files(page: Path) -> Dict[str, str]:
    return {b.mark_arg: b.code for b in _blocks(page) if b.mark == "file"}


def test_the_pages_have_python_blocks_and_few_fragments():
    assert len(PYTHON_BLOCKS) >= 15, [b.name for b in PYTHON_BLOCKS]
    assert len(FRAGMENTS) <= MAX_FRAGMENTS, [b.name for b in FRAGMENTS]
    for block in FRAGMENTS:
        assert len(block.mark_arg) >= 10, f"{block.name}: a fragment mark says why the block cannot run alone"


def test_every_model_script_and_check_names_a_block():
    for (page, needle) in [*_OLLAMA_SCRIPTS, *_CHECKS]:
        assert any(str(b.page.relative_to(ROOT)) == page and needle in b.code for b in RUNNABLE), (page, needle)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_python_block_runs_as_written(block: Block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name, content in _declared_files(block.page).items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    script = _script_for(block)
    # A module of its own, as a script is: classes it defines are importable
    # by 'module:qualname', which the journal's codec requires.
    module = types.ModuleType("doc_snippet_" + re.sub(r"\W", "_", block.name))
    module.__file__ = str(tmp_path / "snippet.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    code = compile(block.code, block.name, "exec")
    if script is None:
        exec(code, module.__dict__)
    else:
        with OllamaScriptedServer(script()) as server:
            monkeypatch.setenv("OLLAMA_BASE_URL", server.base_url)
            exec(code, module.__dict__)
            assert len(server.sent) == len(server.replies), "the block did not run the scripted model conversation"
            module.__dict__["__model_requests__"] = list(server.requests)
    check = _keyed(_CHECKS, block)
    if check is not None:
        check(module.__dict__)
