"""SKILL.md skills (issue 15, "Skills"), as Flink Agents 0.3.1 offers them.

Skills load from a directory, a ``.zip``, an installed package (on disk or
zipped) and a URL; a bad SKILL.md or source is named in the error. An agent
declares them with ``@skills`` or ``add_resource(..., ResourceType.SKILLS)``;
a chat model setup that lists skills sends the model their names and
descriptions and offers ``load_skill``, whose calls go through the tool loop:
journaled (a replay does not read the file again) and confined to the
skill's directory.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.decorators import skills
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import InputEvent
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.skills import LOAD_SKILL_TOOL, Skills, SkillSourceSpec
from flink_agents.api.tools.tool import Tool
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError
from flink_agents.plan.skills import SKILLS_CONFIG
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.features.skills import (
    SkillCatalog,
    SkillFormatError,
    SkillNotFound,
    SkillPathError,
    SkillSourceError,
)
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.chat_turn import ChatSetup, answer, ask
from tests.support.engine_runs import run_record
from tests.support import host_runs

MATH_MD = """---
name: math-calculator
description: Calculate arithmetic expressions. Use when the user asks for a number.
license: Apache-2.0
---

# Math Calculator

Write the expression, then compute it step by step.
See reference/operators.md for the operators.
"""

JOKE_MD = """---
name: joke-generator
description: Tell a short joke on a topic.
---
Pick a topic word and make a pun on it.
"""


def _write_skill(base: Path, directory: str, text: str, files: Dict[str, str] | None = None) -> Path:
    skill = base / directory
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(text, encoding="utf-8")
    for relative, content in (files or {}).items():
        (skill / relative).parent.mkdir(parents=True, exist_ok=True)
        (skill / relative).write_text(content, encoding="utf-8")
    return skill


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    base = tmp_path / "skills"
    _write_skill(base, "math-calculator", MATH_MD, {"reference/operators.md": "+ - * / and ^ for powers"})
    _write_skill(base, "joke-generator", JOKE_MD)
    (base / "not-a-skill").mkdir()  # no SKILL.md: ignored
    (tmp_path / "secret.txt").write_text("do not leak", encoding="utf-8")
    return base


def _zip_of(directory: Path, archive: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                zipped.write(path, prefix + path.relative_to(directory).as_posix())
    return archive


# ---- loading -------------------------------------------------------------------------------


def test_skills_load_from_a_directory_with_their_fields_and_files(skills_dir: Path) -> None:
    catalog = SkillCatalog.load(Skills.from_local_dir(str(skills_dir)).sources)
    try:
        assert catalog.names == ["joke-generator", "math-calculator"]  # by directory name
        math = catalog.get("math-calculator")
        assert math.document.description == "Calculate arithmetic expressions. Use when the user asks for a number."
        assert math.document.license == "Apache-2.0"
        assert math.document.body.strip().startswith("# Math Calculator")
        assert math.directory == (skills_dir / "math-calculator").resolve()
        assert catalog.files("math-calculator") == ["reference/operators.md"]
        assert catalog.read("math-calculator", "reference/operators.md") == "+ - * / and ^ for powers"
    finally:
        catalog.close()


def test_skills_load_from_a_zip_into_a_temporary_directory_removed_on_close(skills_dir: Path, tmp_path: Path) -> None:
    archive = _zip_of(skills_dir, tmp_path / "skills.zip")
    catalog = SkillCatalog.load(Skills.from_local_dir(str(archive)).sources)
    extracted = catalog.get("math-calculator").directory
    assert catalog.read("math-calculator", "reference/operators.md") == "+ - * / and ^ for powers"
    assert extracted.is_dir() and not extracted.is_relative_to(tmp_path)

    catalog.close()

    assert not extracted.exists()


def test_a_later_source_replaces_a_skill_of_the_same_name(skills_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    _write_skill(other, "math-calculator", MATH_MD.replace("Calculate arithmetic", "Newer arithmetic"))
    catalog = SkillCatalog.load(Skills.from_local_dir(str(skills_dir), str(other)).sources)
    try:
        assert catalog.get("math-calculator").document.description.startswith("Newer arithmetic")
        assert sorted(catalog.names) == ["joke-generator", "math-calculator"]
    finally:
        catalog.close()


def _make_package(root: Path, name: str) -> None:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    _write_skill(package / "bundled", "joke-generator", JOKE_MD, {"examples.txt": "a pun on cheese"})


def test_skills_load_from_an_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_package(tmp_path / "site", "skills_pkg_on_disk")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    catalog = SkillCatalog.load(Skills.from_package(("skills_pkg_on_disk", "bundled")).sources)
    try:
        assert catalog.names == ["joke-generator"]
        assert catalog.read("joke-generator", "examples.txt") == "a pun on cheese"
        # Read in place, nothing copied.
        assert catalog.get("joke-generator").directory == (tmp_path / "site/skills_pkg_on_disk/bundled/joke-generator").resolve()
    finally:
        catalog.close()


def test_skills_load_from_a_zipped_package_through_a_temporary_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_package(tmp_path / "site", "skills_pkg_zipped")
    archive = _zip_of(tmp_path / "site", tmp_path / "site.zip")
    monkeypatch.syspath_prepend(str(archive))  # imported through zipimport
    monkeypatch.delitem(sys.modules, "skills_pkg_zipped", raising=False)

    catalog = SkillCatalog.load(Skills.from_package(("skills_pkg_zipped", "bundled")).sources)
    copied = catalog.get("joke-generator").directory
    assert catalog.read("joke-generator", "examples.txt") == "a pun on cheese"
    catalog.close()
    assert not copied.exists()


def test_skills_load_from_a_url(skills_dir: Path, tmp_path: Path) -> None:
    payload = _zip_of(skills_dir, tmp_path / "served.zip").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/skills.zip":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        catalog = SkillCatalog.load(Skills.from_url(f"{base}/skills.zip").sources)
        assert catalog.names == ["joke-generator", "math-calculator"]
        catalog.close()
        with pytest.raises(SkillSourceError, match=r"url:http://127\.0\.0\.1:\d+/missing\.zip: download failed .*404"):
            SkillCatalog.load(Skills.from_url(f"{base}/missing.zip").sources)
    finally:
        server.shutdown()
        server.server_close()


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# Just markdown\nNo front matter.\n", "has no YAML front matter"),
        ("---\ndescription: d\n---\nbody\n", "front matter has no 'name'"),
        ("---\nname: x\n---\nbody\n", "front matter has no 'description'"),
        ("---\nname: [x\ndescription: d\n---\nbody\n", "front matter is not valid YAML on line 3"),
        ("---\nname: 7\ndescription: d\n---\nbody\n", "field 'name' must be a string, got int"),
        ("---\nname: x\ndescription: d\n---\n\n", "has no instructions"),
        ("---\nname: x\ndescription: d\nbody\n", "front matter is not closed"),
        (f"---\nname: {'n' * 65}\ndescription: d\n---\nbody\n", "field 'name' is 65 characters long; at most 64"),
    ],
    ids=["no-front-matter", "no-name", "no-description", "bad-yaml", "name-not-text", "empty-body", "unclosed", "long-name"],
)
def test_a_bad_skill_file_is_named_with_its_problem(tmp_path: Path, text: str, problem: str) -> None:
    _write_skill(tmp_path / "skills", "broken", text)
    skill_file = tmp_path / "skills" / "broken" / "SKILL.md"

    with pytest.raises(SkillFormatError) as raised:
        SkillCatalog.load(Skills.from_local_dir(str(tmp_path / "skills")).sources)

    assert str(raised.value).startswith(f"{skill_file}: ")
    assert problem in str(raised.value)
    assert raised.value.path == str(skill_file)


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(SkillSourceError, match=r"local:/no/such/dir: /no/such/dir does not exist"):
        SkillCatalog.load(Skills.from_local_dir("/no/such/dir").sources)
    with pytest.raises(SkillSourceError, match=r"unknown skill source scheme 'classpath'; this runtime reads \['local', 'package', 'url'\]"):
        SkillCatalog.load([SkillSourceSpec(scheme="CLASSPATH", params={"resource": "skills"})])
    with pytest.raises(SkillSourceError, match=r"package:no_such_skills_pkg/skills: package 'no_such_skills_pkg' cannot be imported"):
        SkillCatalog.load(Skills.from_package(("no_such_skills_pkg", "skills")).sources)
    with pytest.raises(SkillSourceError, match=r"url:file:///etc/passwd: only http\(s\) URLs are supported"):
        SkillCatalog.load(Skills.from_url("file:///etc/passwd").sources)
    with pytest.raises(SkillSourceError, match=r"package:json.decoder/skills: 'json.decoder' is not a package"):
        SkillCatalog.load(Skills.from_package(("json.decoder", "skills")).sources)
    with pytest.raises(SkillSourceError, match=r"package:json/skills: package 'json' has no directory or .zip 'skills'"):
        SkillCatalog.load(Skills.from_package(("json", "skills")).sources)


def test_a_zip_entry_that_would_land_outside_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("ok/SKILL.md", JOKE_MD)
        zipped.writestr("../../escaped.txt", "x")

    with pytest.raises(SkillSourceError, match=r"zip entry '\.\./\.\./escaped\.txt' would be written outside"):
        SkillCatalog.load(Skills.from_local_dir(str(archive)).sources)
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_a_zip_that_expands_past_the_limit_is_refused(skills_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flink_agents.runtime.features.skills import sources

    archive = _zip_of(skills_dir, tmp_path / "skills.zip")
    monkeypatch.setattr(sources, "MAX_EXTRACTED_BYTES", 100)

    with pytest.raises(SkillSourceError, match=r"skills\.zip: the zip expands to \d+ bytes; at most 100 are extracted"):
        SkillCatalog.load(Skills.from_local_dir(str(archive)).sources)


@pytest.mark.parametrize(
    "path",
    ["../../secret.txt", "../joke-generator/SKILL.md", "/etc/passwd", "reference/../../../secret.txt", "C:\\Windows\\win.ini"],
)
def test_reading_outside_the_skill_directory_is_refused(skills_dir: Path, path: str) -> None:
    catalog = SkillCatalog.load(Skills.from_local_dir(str(skills_dir)).sources)
    try:
        with pytest.raises(SkillPathError, match="skill 'math-calculator'"):
            catalog.read("math-calculator", path)
    finally:
        catalog.close()


def test_a_link_out_of_the_skill_directory_is_refused_and_not_listed(skills_dir: Path, tmp_path: Path) -> None:
    (skills_dir / "math-calculator" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    catalog = SkillCatalog.load(Skills.from_local_dir(str(skills_dir)).sources)
    try:
        assert catalog.files("math-calculator") == ["reference/operators.md"]
        with pytest.raises(SkillPathError, match="leads outside the directory of skill 'math-calculator'"):
            catalog.read("math-calculator", "leak.txt")
    finally:
        catalog.close()


def test_a_skill_md_that_is_a_link_out_of_its_directory_is_refused(skills_dir: Path, tmp_path: Path) -> None:
    # Issue 27: the SKILL.md itself was followed, so the model was given (as
    # instructions) whatever file the link named outside the skill.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "SKILL.md").write_text(JOKE_MD.replace("joke-generator", "leaked"), encoding="utf-8")
    skill_md = skills_dir / "joke-generator" / "SKILL.md"
    skill_md.unlink()
    skill_md.symlink_to(outside / "SKILL.md")

    with pytest.raises(SkillPathError, match=r"joke-generator/SKILL\.md .*is a link to .*elsewhere/SKILL\.md"):
        SkillCatalog.load(Skills.from_local_dir(str(skills_dir)).sources)

    # A link that stays inside the skill's directory is as good as the file.
    skill_md.unlink()
    (skills_dir / "joke-generator" / "docs").mkdir()
    (skills_dir / "joke-generator" / "docs" / "main.md").write_text(JOKE_MD, encoding="utf-8")
    skill_md.symlink_to(Path("docs") / "main.md")
    catalog = SkillCatalog.load(Skills.from_local_dir(str(skills_dir)).sources)
    try:
        assert catalog.get("joke-generator").document.name == "joke-generator"
    finally:
        catalog.close()


# ---- plan --------------------------------------------------------------------------------------


class ScriptedSkillModel(BaseChatModelConnection):
    """Round 0: the calls in ``CALLS`` (``load_skill`` ones). Then: the tool
    results, in call order, as the answer (JSON list). Records what it saw;
    ``CRASH_AFTER_TOOLS`` makes it die once when it gets the tool results."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        SEEN.append({"messages": list(messages), "tools": [t.name for t in tools or []]})
        # Tool results of this turn only (a per-key conversation holds earlier turns).
        last_user = max(i for i, m in enumerate(messages) if m.role == MessageRole.USER)
        results = [str(m.content) for m in messages[last_user:] if m.role == MessageRole.TOOL]
        if not results:
            calls = [{"name": LOAD_SKILL_TOOL, "arguments": arguments} for arguments in CALLS] + EXTRA_CALLS
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": f"call_{i}", "type": "function", "function": call} for i, call in enumerate(calls)
            ])
        if CRASH_AFTER_TOOLS.pop("once", False):
            raise Crash("process died after the skill was loaded")
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(results))


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing may catch it)."""


SEEN: List[Dict[str, Any]] = []
CALLS: List[Dict[str, Any]] = []  # load_skill arguments the model sends in its first round
EXTRA_CALLS: List[Dict[str, Any]] = []  # other tools' calls, after those
CRASH_AFTER_TOOLS: Dict[str, bool] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()
    CALLS.clear()
    EXTRA_CALLS.clear()
    CRASH_AFTER_TOOLS.clear()


SkillSetup = ChatSetup


SKILLS_DIR: Dict[str, str] = {}


class MathAgent(Agent):
    """Skills from ``@skills`` (the directory in ``SKILLS_DIR``); the setup
    offers math-calculator only, with a system prompt."""

    @skills
    @staticmethod
    def my_skills() -> Skills:
        return Skills.from_local_dir(SKILLS_DIR["path"])

    def __init__(self, **setup: Any) -> None:
        super().__init__()
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ScriptedSkillModel))
        self.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
            clazz=SkillSetup, connection="conn", prompt="system", skills=["math-calculator"], **setup,
        ))
        self.add_resource("system", ResourceType.PROMPT, Prompt.from_messages([
            ChatMessage(role=MessageRole.SYSTEM, content="You answer questions. Load the skill first."),
        ]))
        self.add_action("ask", [InputEvent], ask)
        self.add_action("answer", [ChatResponseEvent], answer)


def test_the_plan_merges_skills_into_one_resource_and_adds_the_load_skill_tool(skills_dir: Path, tmp_path: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    agent = MathAgent()
    agent.add_resource("more", ResourceType.SKILLS, Skills.from_local_dir(str(skills_dir), str(tmp_path / "more")))

    plan = AgentPlan.from_json(AgentPlan.from_agent(agent).to_json())

    [spec] = plan.resources[ResourceType.SKILLS].values()
    assert spec.name == SKILLS_CONFIG
    # The decorator's source first, then add_resource's; the repeated one dropped.
    assert spec.descriptor.arguments == {"sources": [
        {"scheme": "local", "params": {"path": str(skills_dir)}},
        {"scheme": "local", "params": {"path": str(tmp_path / "more")}},
    ]}
    assert plan.has_resource(LOAD_SKILL_TOOL, ResourceType.TOOL)


def test_a_setup_listing_skills_on_an_agent_without_skills_fails_to_compile() -> None:
    agent = Agent()
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ScriptedSkillModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=SkillSetup, connection="conn", skills=["math-calculator"]))

    with pytest.raises(PlanError, match=r"chat model setup 'model' of Agent lists skills \['math-calculator'\], but Agent declares no skills"):
        AgentPlan.from_agent(agent)


def test_an_agent_tool_named_load_skill_next_to_skills_fails_to_compile(skills_dir: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    agent = MathAgent()
    agent.add_resource(LOAD_SKILL_TOOL, ResourceType.TOOL, lambda name: name)

    with pytest.raises(PlanError, match="clashes with the built-in skill tool"):
        AgentPlan.from_agent(agent)


# ---- a chat agent using a skill ----------------------------------------------------------------


def _run(agent: Agent, store: InMemoryJournalStore, value: str = "what is 6 * 7?") -> LocalDriver:
    """One record of key "k" on a fresh engine (a restore to before the record)."""
    return run_record(agent, store, value)


def test_a_chat_agent_on_the_local_runner_sees_the_skill_list_and_loads_a_skill(skills_dir: Path) -> None:
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    SKILLS_DIR["path"] = str(skills_dir)
    CALLS.extend([{"name": "math-calculator"}, {"name": "math-calculator", "path": "reference/operators.md"}, {"name": "nope"}])
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list([{"key": "k", "value": "what is 6 * 7?"}]).apply(MathAgent()).to_list()
    env.execute()

    first = SEEN[0]
    assert first["tools"] == [LOAD_SKILL_TOOL]
    roles = [m.role for m in first["messages"]]
    assert roles == [MessageRole.SYSTEM, MessageRole.SYSTEM, MessageRole.USER]  # after the prompt's system message
    listing = first["messages"][1].content
    assert "<name>math-calculator</name>" in listing
    assert "<description>Calculate arithmetic expressions. Use when the user asks for a number.</description>" in listing
    assert "joke-generator" not in listing  # declared, but this setup does not offer it
    assert 'load_skill(name="<skill name>")' in listing

    [record] = outputs
    instructions, operators, unknown = json.loads(record["k"])
    assert instructions.startswith('<skill_content name="math-calculator">\n# Skill: math-calculator\n\n# Math Calculator\n')
    assert "Write the expression, then compute it step by step." in instructions
    assert "<file>reference/operators.md</file>" in instructions
    assert operators == "+ - * / and ^ for powers"
    assert unknown == "Skill 'nope' not found. Available skills: joke-generator, math-calculator"


def test_a_model_asking_for_a_file_outside_the_skill_gets_an_error_result(skills_dir: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    CALLS.extend([{"name": "math-calculator", "path": "../../secret.txt"}, {"name": "math-calculator", "path": "/etc/passwd"}])

    driver = _run(MathAgent(), InMemoryJournalStore())

    traversal, absolute = json.loads(driver.outputs[0]["k"])
    assert traversal == (
        "Error: SkillPathError: path '../../secret.txt' leads outside the directory of skill 'math-calculator'; "
        "only the skill's own files can be read"
    )
    assert absolute == "Error: SkillPathError: path '/etc/passwd' of skill 'math-calculator' must be relative to the skill's directory"
    assert "do not leak" not in driver.outputs[0]["k"]
    assert driver.errors == []


def test_a_replay_gets_the_journaled_skill_without_reading_the_files_again(skills_dir: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    CALLS.extend([{"name": "math-calculator"}, {"name": "math-calculator", "path": "reference/operators.md"}])
    store = InMemoryJournalStore()
    CRASH_AFTER_TOOLS["once"] = True
    with pytest.raises(Crash):
        _run(MathAgent(), store)

    # Between the crash and the restart the skill changes on disk: the
    # instructions are rewritten and the reference file is gone.
    skill = skills_dir / "math-calculator"
    (skill / "SKILL.md").write_text(MATH_MD.replace("step by step", "IN ONE GO"), encoding="utf-8")
    (skill / "reference" / "operators.md").unlink()

    driver = _run(MathAgent(), store)

    instructions, operators = json.loads(driver.outputs[0]["k"])
    assert "compute it step by step" in instructions and "IN ONE GO" not in instructions
    assert operators == "+ - * / and ^ for powers"
    # A fresh run reads the files as they are now.
    fresh = json.loads(_run(MathAgent(), InMemoryJournalStore(), "again").outputs[0]["k"])
    assert "IN ONE GO" in fresh[0]
    assert fresh[1] == "File 'reference/operators.md' not found in skill 'math-calculator'. Its files: []"


def test_a_setup_listing_an_unknown_skill_fails_the_run_naming_the_known_ones(skills_dir: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    agent = MathAgent()
    agent.resources[ResourceType.CHAT_MODEL]["model"].arguments["skills"] = ["math-calculator", "pdf"]

    with pytest.raises(ActionFailed) as raised:
        _run(agent, InMemoryJournalStore())

    assert isinstance(raised.value.__cause__, SkillNotFound)
    assert "SkillNotFound: no skill is called 'pdf'; the agent's skills are ['joke-generator', 'math-calculator']" in str(raised.value)
    assert SEEN == []  # the model was never asked


def test_bash_settings_are_ignored_with_a_warning_and_a_bash_call_is_refused(
    skills_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    agent = MathAgent(allowed_commands=["echo", "bc"])
    CALLS.append({"name": "math-calculator"})

    with caplog.at_level("WARNING", logger="flink_agents.plan.skills"):
        AgentPlan.from_agent(agent)
    assert "does not offer Flink Agents' 'bash' tool (shell commands from skills); allowed_commands ignored" in caplog.text

    # A model that calls bash anyway (as 0.3.1's skills tell it to) is refused.
    EXTRA_CALLS.append({"name": "bash", "arguments": {"command": "echo 6*7 | bc"}})
    driver = _run(agent, InMemoryJournalStore())
    loaded, bash = json.loads(driver.outputs[0]["k"])
    assert loaded.startswith('<skill_content name="math-calculator">')
    assert bash == "Error: ToolNotOffered: tool 'bash' was not offered to the model; the tools offered are: 'load_skill'"


def test_a_setup_has_0_3_1s_skill_fields_its_listing_filled_when_opened(skills_dir: Path) -> None:
    """0.3.1 code reads ``skill_discovery_prompt`` (filled by ``open``) and
    the bash tool's settings on its setup: they are fields here too."""
    from flink_agents.runtime.execution.resources import ResourceCache

    SKILLS_DIR["path"] = str(skills_dir)
    cache = ResourceCache(AgentPlan.from_agent(MathAgent(allowed_commands=["bc"], allowed_script_dirs=["scripts"])))
    try:
        setup = cache.get("model", ResourceType.CHAT_MODEL)
        assert setup.allowed_commands == ["bc"] and setup.allowed_script_dirs == ["scripts"]
        listing = setup.skill_discovery_prompt
        assert "<name>math-calculator</name>" in listing and "joke-generator" not in listing
    finally:
        cache.close()
    bare = SkillSetup(connection="conn")
    assert bare.skill_discovery_prompt is None and bare.allowed_commands == [] and bare.allowed_script_dirs == []


def test_a_per_key_conversation_gets_the_skill_list_once_per_call_and_does_not_store_it(skills_dir: Path) -> None:
    SKILLS_DIR["path"] = str(skills_dir)
    CALLS.append({"name": "math-calculator"})
    agent = MathAgent(conversation="per_key")
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=InMemoryJournalStore())
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, "k", "what is 6 * 7?")
        host_runs.process(engine, driver, "k", "and 6 * 8?")
    finally:
        engine.close()

    assert len(driver.outputs) == 2
    last = SEEN[-2]["messages"]  # the second record's first model call
    listings = [m for m in last if m.role == MessageRole.SYSTEM and "<available_skills>" in str(m.content)]
    assert len(listings) == 1
    assert last[1] is listings[0]  # right after the prompt's system message
    assert [m.content for m in last if m.role == MessageRole.USER] == ["what is 6 * 7?", "and 6 * 8?"]


def test_skills_added_to_the_environment_serve_its_agents(skills_dir: Path) -> None:
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    CALLS.append({"name": "joke-generator"})
    agent = Agent()
    agent.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=ScriptedSkillModel))
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(clazz=SkillSetup, connection="conn", skills=["joke-generator"]))
    agent.add_action("ask", [InputEvent], ask)
    agent.add_action("answer", [ChatResponseEvent], answer)
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.add_resource("shared_skills", ResourceType.SKILLS, Skills.from_local_dir(str(skills_dir)))

    outputs = env.from_list([{"key": "k", "value": "a joke on cheese"}]).apply(agent).to_list()
    env.execute()

    [loaded] = json.loads(outputs[0]["k"])
    assert loaded.startswith('<skill_content name="joke-generator">\n# Skill: joke-generator\n\nPick a topic word')


def test_a_resource_context_gives_the_skill_list_and_directories_as_in_0_3_1(skills_dir: Path) -> None:
    from flink_agents.runtime.execution.resources import ResourceCache, ResourceContextImpl

    SKILLS_DIR["path"] = str(skills_dir)
    cache = ResourceCache(AgentPlan.from_agent(MathAgent()))
    try:
        context = ResourceContextImpl(cache)
        assert context.get_skill_dirs("math-calculator") == [str((skills_dir / "math-calculator").resolve())]
        assert context.get_skill_dirs() == [str((skills_dir / name).resolve()) for name in ("joke-generator", "math-calculator")]
        listing = context.generate_available_skills_prompt("joke-generator")
        assert "<name>joke-generator</name>" in listing and "math-calculator" not in listing
        with pytest.raises(SkillNotFound, match="no skill is called 'pdf'"):
            context.get_skill_dirs("pdf")
    finally:
        cache.close()

    bare = Agent()
    bare.add_action("ask", [InputEvent], ask)
    cache = ResourceCache(AgentPlan.from_agent(bare))
    context = ResourceContextImpl(cache)
    assert context.generate_available_skills_prompt() == "" and context.get_skill_dirs() == []
