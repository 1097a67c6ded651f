"""YAML agents (Flink Agents 0.3.1's declarative API): a file declaring an
agent with actions, a prompt, a tool and a chat model runs unchanged on the
local runner and through ``flink-agents run-yaml`` (on the mini-cluster:
tests/e2e/test_yaml_agents_e2e.py); every mistake in a file is reported with
its file, line and key."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.yaml.loader import YamlAgentError, build_agents, resolve_function
from flink_agents.api.yaml.specs import YamlAgentsDocument, export
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl"

# The review-analysis agent of jobs/review_analysis.py, declared in YAML the
# way 0.3.1's quickstart (yaml_review_analysis_agent.yaml) declares its own:
# the actions and the tool are the class's static methods; the prompt, the
# tool list and the chat model are wired here. The connection is shared (a
# file-level resource registered on the environment).
REVIEW_YAML = """\
agents:
  - name: review_analysis_agent
    description: Scores product reviews; notifies shipping about damage.
    actions:
      - name: process_input
        function: flink_agents.jobs.review_analysis:ReviewAnalysisAgent.process_input
        listen_to: [input]
        type: python
      - name: process_chat_response
        function: flink_agents.jobs.review_analysis:ReviewAnalysisAgent.process_chat_response
        listen_to: [chat_response]
    prompts:
      - name: review_analysis_prompt
        messages:
          - role: system
            content: |
              You analyze product reviews. Answer only with a JSON object
              {"score": <1-5>, "reasons": [<up to 3 short reasons>]}.
              If the product arrived damaged, first call notify_shipping_manager.
    tools:
      - name: notify_shipping_manager
        function: flink_agents.jobs.review_analysis:ReviewAnalysisAgent.notify_shipping_manager
    chat_model_setups:
      - name: review_analysis_model
        clazz: local
        connection: review_model_connection
        prompt: review_analysis_prompt
        tools: [notify_shipping_manager]

chat_model_connections:
  - name: review_model_connection
    clazz: local
"""


def _reviews(n: int = 12) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()[:n]]


def _run_local(env: AgentsExecutionEnvironment, agent: Any, reviews: List[Dict[str, Any]]) -> List[Any]:
    outputs = env.from_list([{"key": r["id"], "value": r} for r in reviews]).apply(agent).to_list()
    env.execute()
    return [value for output in outputs for value in output.values()]


def _code_agent_outputs(reviews: List[Dict[str, Any]]) -> List[Any]:
    return _run_local(AgentsExecutionEnvironment.get_execution_environment(), ReviewAnalysisAgent(), reviews)


@pytest.fixture
def review_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "review_agent.yaml"
    path.write_text(REVIEW_YAML)
    return path


def _by_review(output: Dict[str, Any]) -> tuple:
    return output["id"], output["ts"]


# -- runs ---------------------------------------------------------------------


def test_yaml_agent_runs_like_the_code_agent_on_the_local_runner(review_yaml: Path, caplog) -> None:
    reviews = _reviews()
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(review_yaml)
    assert ResourceType.CHAT_MODEL_CONNECTION in env.resources
    assert "review_model_connection" in env.resources[ResourceType.CHAT_MODEL_CONNECTION]
    with caplog.at_level(logging.INFO, logger="flink_agents.jobs.review_analysis"):
        outputs = _run_local(env, "review_analysis_agent", reviews)
        # Taken now: the Python agent run below logs the same lines.
        notified = [
            r.getMessage() for r in caplog.records
            if r.name == "flink_agents.jobs.review_analysis" and "shipping manager notified" in r.getMessage()
        ]

    # Per key in input order (keys interleave by model latency), and the
    # same outputs as the agent written in Python.
    assert sorted(outputs, key=_by_review) == sorted(_code_agent_outputs(reviews), key=_by_review)
    for product in {r["id"] for r in reviews}:
        assert [o["ts"] for o in outputs if o["id"] == product] == [r["ts"] for r in reviews if r["id"] == product]
    # The tool declared in YAML was offered to the model and called for the
    # sample's two damaged deliveries, which score 1.
    assert sorted(m.split("product ")[1].split(":")[0] for m in notified) == ["B0FD4H6W1Z", "B0FF3Q1Y9D"]
    assert {
        (o["id"], o["ts"], o["score"], o["reviews_seen"])
        for o in outputs if "reports shipping damage" in o["reasons"]
    } == {("B0FD4H6W1Z", 1759304502, 1, 1), ("B0FF3Q1Y9D", 1759306575, 1, 1)}


def test_load_yaml_accepts_a_list_and_accumulates_over_calls(tmp_path: Path) -> None:
    """0.3.1: ``load_yaml([a, b])`` and two calls give the same result; an
    infrastructure-only file (no ``agents:``) registers shared resources."""
    topology, infrastructure = tmp_path / "agents.yaml", tmp_path / "infra.yaml"
    head, _, tail = REVIEW_YAML.partition("chat_model_connections:")
    topology.write_text(head)
    infrastructure.write_text("chat_model_connections:" + tail)
    reviews = _reviews(4)
    expected = sorted(_code_agent_outputs(reviews), key=_by_review)

    together = AgentsExecutionEnvironment.get_execution_environment()
    together.load_yaml([topology, infrastructure])
    assert sorted(_run_local(together, "review_analysis_agent", reviews), key=_by_review) == expected

    one_by_one = AgentsExecutionEnvironment.get_execution_environment()
    one_by_one.load_yaml(str(topology))
    one_by_one.load_yaml(infrastructure)
    assert sorted(_run_local(one_by_one, "review_analysis_agent", reviews), key=_by_review) == expected


# Functions bound from YAML below, by this module's import name.


def tag_input(event: InputEvent, ctx: RunnerContext) -> None:
    """A shared action: counts the key's records and tags each with the
    action's ``config``."""
    seen = (ctx.short_term_memory.get("seen") or 0) + 1
    ctx.short_term_memory.set("seen", seen)
    ctx.send_event(OutputEvent(output={"value": event.input, "seen": seen, "tag": ctx.action_config["tag"]}))


def shout(event: InputEvent, ctx: RunnerContext) -> None:
    ctx.send_event(OutputEvent(output=str(event.input).upper()))


def test_shared_actions_are_referenced_by_name_with_their_config(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(f"""\
agents:
  - name: tagger
    actions: [tag_input]
  - name: loud_tagger
    actions:
      - tag_input
      - name: shout
        function: {__name__}.shout
        listen_to: [input]
actions:
  - name: tag_input
    function: {__name__}:tag_input
    listen_to: [input]
    config: {{tag: from-yaml}}
""")
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(path)
    records = [{"key": "a", "value": "x"}, {"key": "a", "value": "y"}]
    tagged = env.from_list(records).apply("tagger").to_list()
    loud = env.from_list(records).apply("loud_tagger").to_list()
    env.execute()
    assert tagged == [
        {"a": {"value": "x", "seen": 1, "tag": "from-yaml"}},
        {"a": {"value": "y", "seen": 2, "tag": "from-yaml"}},
    ]
    assert [o["a"] for o in loud if isinstance(o["a"], str)] == ["X", "Y"]
    assert build_agents(path)[2]["tag_input"].config == {"tag": "from-yaml"}


def test_apply_by_an_unknown_name_says_which_agents_exist(review_yaml: Path) -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(review_yaml)
    with pytest.raises(ValueError, match=r"no agent named 'review_agent'.*review_analysis_agent"):
        env.from_list([{"key": "a", "value": 1}]).apply("review_agent")


def test_build_agents_and_aliases_map_to_our_classes(review_yaml: Path) -> None:
    agents, shared, shared_actions = build_agents(review_yaml)
    agent = agents["review_analysis_agent"]
    setup = agent.resources[ResourceType.CHAT_MODEL]["review_analysis_model"]
    assert isinstance(setup, ResourceDescriptor)
    assert f"{setup.target_module}.{setup.target_clazz}" == ResourceName.ChatModel.LOCAL_SETUP
    assert setup.arguments == {
        "connection": "review_model_connection",
        "prompt": "review_analysis_prompt",
        "tools": ["notify_shipping_manager"],
    }
    connection = shared[ResourceType.CHAT_MODEL_CONNECTION]["review_model_connection"]
    assert f"{connection.target_module}.{connection.target_clazz}" == ResourceName.ChatModel.LOCAL_CONNECTION
    assert shared[ResourceType.PROMPT] == {} and shared_actions == {}
    assert sorted(agent.actions) == ["process_chat_response", "process_input"]
    assert agent.actions["process_input"][0] == [InputEvent.EVENT_TYPE]
    assert agent.actions["process_input"][1].as_callable() is ReviewAnalysisAgent.process_input

    openai = build_agents(_write(review_yaml.parent / "o.yaml", """\
chat_model_connections:
  - name: c
    clazz: openai
    base_url: http://localhost:1/v1
"""))[1][ResourceType.CHAT_MODEL_CONNECTION]["c"]
    assert f"{openai.target_module}.{openai.target_clazz}" == ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION


def test_prompts_and_skills_are_built_as_0_3_1_builds_them(tmp_path: Path) -> None:
    from flink_agents.api.chat_message import MessageRole
    from flink_agents.api.skills import SkillSourceSpec, Skills

    agents, _, _ = build_agents(_write(tmp_path / "a.yaml", """\
agents:
  - name: a
    prompts:
      - name: greeting
        text: "Hello {name}"
      - name: chat
        messages:
          - {role: system, content: "Be brief."}
          - {content: "{question}"}
    skills:
      - name: team_skills
        paths: [/opt/skills]
        package:
          - {package: my_pkg, resource: skills/}
"""))
    agent = agents["a"]
    greeting = agent.resources[ResourceType.PROMPT]["greeting"]
    assert isinstance(greeting, Prompt) and greeting.format_string(name="Ada") == "Hello Ada"
    chat = agent.resources[ResourceType.PROMPT]["chat"].format_messages(question="why?")
    assert [(m.role, m.content) for m in chat] == [(MessageRole.SYSTEM, "Be brief."), (MessageRole.USER, "why?")]
    skills = agent.resources[ResourceType.SKILLS]["team_skills"]
    assert isinstance(skills, Skills)
    assert skills.sources == [
        SkillSourceSpec(scheme="local", params={"path": "/opt/skills"}),
        SkillSourceSpec(scheme="package", params={"package": "my_pkg", "resource": "skills/"}),
    ]


def test_an_agents_own_resource_wins_over_a_shared_one(review_yaml: Path) -> None:
    """0.3.1: shared resources fill in what an agent lacks; a decorated
    resource of a code agent keeps its own value."""
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.jobs.review_analysis import REVIEW_PROMPT

    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(review_yaml)
    env.add_resource("review_analysis_prompt", ResourceType.PROMPT, Prompt.from_text("shared"))
    plan = AgentPlan.from_agent(env._agent_to_apply(ReviewAnalysisAgent()))
    prompt = plan.resources[ResourceType.PROMPT]["review_analysis_prompt"]
    assert prompt.value == REVIEW_PROMPT.model_dump(mode="json")
    assert "review_model_connection" in plan.resources[ResourceType.CHAT_MODEL_CONNECTION]


def test_function_references_take_both_forms() -> None:
    """0.3.1's ``resolve_function(name=, function=)`` gives a
    ``PythonFunction``; here it also takes a dotted path and checks the
    target exists."""
    for reference in (
        "flink_agents.jobs.review_analysis:ReviewAnalysisAgent.process_input",
        "flink_agents.jobs.review_analysis.ReviewAnalysisAgent.process_input",
    ):
        function = resolve_function(name="process_input", function=reference)
        assert (function.module, function.qualname) == ("flink_agents.jobs.review_analysis", "ReviewAnalysisAgent.process_input")
        assert function.as_callable() is ReviewAnalysisAgent.process_input
    lazy = resolve_function(name="t", function="json:nope")  # 0.3.1: resolved on first use
    with pytest.raises(AttributeError, match="nope"):
        lazy.as_callable()
    with pytest.raises(ValueError, match=r"'t': module 'json' has no attribute 'nope'"):
        resolve_function(name="t", function="json.nope")
    with pytest.raises(ValueError, match=r"'t': 'function' is required"):
        resolve_function(name="t", function=None)
    with pytest.raises(ValueError, match=r"'t': a Java tool needs 'parameter_types'"):
        resolve_function(name="t", function="com.example.Tools:add", language="java")
    with pytest.raises(ValueError, match=r"'t': only Java functions declare parameter_types"):
        resolve_function(name="t", function="json:dumps", parameter_types=["int"])


def test_the_json_schema_is_exported_from_the_specs() -> None:
    schema = json.loads(export())
    assert set(schema["properties"]) == set(YamlAgentsDocument.model_fields)
    assert schema["additionalProperties"] is False
    # 0.3.1's listen_to or Flink Agents HEAD's trigger_conditions, exactly one.
    assert schema["$defs"]["ActionSpec"]["oneOf"] == [{"required": ["listen_to"]}, {"required": ["trigger_conditions"]}]


# -- errors: file, line and key -------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


AGENT_HEAD = """\
agents:
  - name: a
    actions:
      - name: act
        function: json:dumps
        listen_to: [input]
"""

ERROR_CASES = {
    "unknown key": (AGENT_HEAD + "    tool:\n      - name: t\n", 7, "agents[0].tool", r"unknown key \(allowed: .*tools"),
    "unknown key in an action": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n        function: json:dumps\n"
        "        listen_to: [input]\n        listens: [output]\n",
        7, "agents[0].actions[0].listens", "unknown key",
    ),
    "missing required key": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n        function: json:dumps\n",
        4, "agents[0].actions[0]", "give exactly one of listen_to .0.3.1. and trigger_conditions .HEAD.",
    ),
    "missing function": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n        listen_to: [input]\n",
        4, "agents[0].actions[0].function", "missing required key",
    ),
    "wrong type": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n        function: json:dumps\n        listen_to: input\n",
        6, "agents[0].actions[0].listen_to", r"valid list, got string 'input'",
    ),
    "wrong type of a section": ("prompts: {name: p}\n", 1, "prompts", "valid list"),
    "module without the attribute": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n        function: json:no_such_function\n"
        "        listen_to: [input]\n",
        5, "agents[0].actions[0].function", "module 'json' has no attribute 'no_such_function'",
    ),
    "class without the method": (
        "agents:\n  - name: a\n    actions:\n      - name: act\n"
        "        function: flink_agents.jobs.review_analysis:ReviewAnalysisAgent.nope\n        listen_to: [input]\n",
        5, "agents[0].actions[0].function", "'flink_agents.jobs.review_analysis:ReviewAnalysisAgent' has no attribute 'nope'",
    ),
    "module that does not exist": (
        AGENT_HEAD + "    tools:\n      - name: t\n        function: no_such_pkg.tools:t\n",
        9, "agents[0].tools[0].function", "cannot import module 'no_such_pkg.tools'",
    ),
    "a reference that is not a function": (
        AGENT_HEAD + "    tools:\n      - name: t\n        function: flink_agents.jobs.review_analysis:MODEL_SETUP\n",
        9, "agents[0].tools[0].function", "is a str, not a function",
    ),
    "unknown alias": (
        "chat_model_connections:\n  - name: c\n    clazz: olama\n",
        3, "chat_model_connections[0].clazz", r"unknown chat_model_connection alias 'olama' \(aliases: .*local.*openai",
    ),
    # Every 0.3.1 class alias ships now (chroma last): the chroma alias
    # resolves and its class is checked like any other.
    "chroma alias with a misspelt setting": (
        AGENT_HEAD + "    vector_stores:\n      - name: v\n        clazz: chroma\n        persist_dir: /tmp/x\n",
        10, "agents[0].vector_stores[0].persist_dir", r"unknown key for ChromaVectorStore \(its settings: .*persist_directory",
    ),
    "class that does not exist": (
        "chat_model_connections:\n  - name: c\n    clazz: my_pkg.models.Connection\n",
        3, "chat_model_connections[0].clazz", "cannot import class 'my_pkg.models.Connection'",
    ),
    "connection class in the setups section": (
        "chat_model_setups:\n  - name: m\n    clazz: " + ResourceName.ChatModel.LOCAL_CONNECTION + "\n",
        3, "chat_model_setups[0].clazz", "LocalChatModelConnection is a chat_model_connection resource, not a chat_model",
    ),
    "unknown setting of the resource class": (
        "chat_model_connections:\n  - name: c\n    clazz: openai\n    base_urll: http://x\n",
        4, "chat_model_connections[0].base_urll", r"unknown key for OpenAIChatModelConnection \(its settings: .*base_url",
    ),
    "java mcp server": (
        "mcp_servers:\n  - name: m\n    clazz: x\n    type: java\n",
        4, "mcp_servers[0].type", "'java' is not available for a mcp_server resource",
    ),
    "python tool with parameter_types": (
        AGENT_HEAD + "    tools:\n      - name: t\n        function: json:dumps\n        parameter_types: [int]\n",
        10, "agents[0].tools[0].parameter_types", "only Java tools",
    ),
    "prompt with text and messages": (
        "prompts:\n  - name: p\n    text: hi\n    messages:\n      - content: hi\n",
        2, "prompts[0]", "exactly one non-empty 'text' or 'messages'",
    ),
    "unknown message role": (
        "prompts:\n  - name: p\n    messages:\n      - role: robot\n        content: hi\n",
        4, "prompts[0].messages[0].role", "robot",
    ),
    "duplicate agent": (
        AGENT_HEAD + "  - name: a\n", 7, "agents[1].name", r"Duplicate agent name 'a' \(first at line 2\)",
    ),
    "duplicate tool in an agent": (
        AGENT_HEAD + "    tools:\n      - name: t\n        function: json:dumps\n"
        "      - name: t\n        function: json:loads\n",
        10, "agents[0].tools[1].name", r"Duplicate tool name 't' \(first at line 8\)",
    ),
    "duplicate action in an agent": (
        AGENT_HEAD + "      - name: act\n        function: json:loads\n        listen_to: [output]\n",
        7, "agents[0].actions[1].name", "Duplicate action name 'act'",
    ),
    "duplicate shared action": (
        "actions:\n  - {name: x, function: 'json:dumps', listen_to: [input]}\n"
        "  - {name: x, function: 'json:loads', listen_to: [input]}\n",
        3, "actions[1].name", r"Duplicate shared action name 'x' \(first at line 2\)",
    ),
    "duplicate YAML key": (
        "agents:\n  - name: a\n    name: b\n", 3, "agents[0].name", r"duplicate key \(first at line 2\)",
    ),
    "unknown shared action": (
        "agents:\n  - name: a\n    actions: [nope]\n", 3, "agents[0].actions[0]",
        r"no shared action named 'nope' in this file \(shared actions: none\)",
    ),
    "skills without a source": (
        "skills:\n  - name: s\n", 2, "skills[0]", "at least one of paths, urls, classpath, package",
    ),
    "action item that is neither": (
        "agents:\n  - name: a\n    actions: [3]\n", 3, "agents[0].actions[0]", "valid dictionary",
    ),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_name_the_file_the_line_and_the_key(case: str, tmp_path: Path) -> None:
    text, line, key, problem = ERROR_CASES[case]
    path = _write(tmp_path / "agents.yaml", text)
    env = AgentsExecutionEnvironment.get_execution_environment()
    with pytest.raises(YamlAgentError) as caught:
        env.load_yaml(path)
    error = caught.value
    assert str(error).startswith(f"{path}:{line}: {key}: "), str(error)
    assert (error.file, error.line, error.key) == (str(path), line, key)
    assert re.search(problem, error.problem), error.problem
    assert env._agents == {} and not any(env.resources.values())  # nothing half-registered


def test_yaml_syntax_and_shape_errors_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(YamlAgentError, match=r"bad.yaml:3: not valid YAML"):
        build_agents(_write(tmp_path / "bad.yaml", "agents:\n  - name: a\n   actions: [\n"))
    with pytest.raises(YamlAgentError, match=r"empty.yaml:1: the file is empty"):
        build_agents(_write(tmp_path / "empty.yaml", "# nothing\n"))
    with pytest.raises(YamlAgentError, match=r"list.yaml:1: the document must be a mapping .*not a list"):
        build_agents(_write(tmp_path / "list.yaml", "- a\n"))
    with pytest.raises(YamlAgentError, match=r"missing.yaml: cannot read the file"):
        build_agents(tmp_path / "missing.yaml")


def test_names_already_registered_on_the_environment_are_refused(review_yaml: Path, tmp_path: Path) -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(review_yaml)
    with pytest.raises(YamlAgentError, match=rf"{re.escape(str(review_yaml))}:2: agents\[0\].name: an agent named "
                                             r"'review_analysis_agent' is already registered"):
        env.load_yaml(review_yaml)
    infra = _write(tmp_path / "infra.yaml", "\n\nchat_model_connections:\n  - name: review_model_connection\n    clazz: local\n")
    with pytest.raises(YamlAgentError, match=r"infra.yaml:4: chat_model_connections\[0\].name: a shared "
                                             r"chat_model_connection named 'review_model_connection' is already"):
        env.load_yaml(infra)


# -- the command ----------------------------------------------------------------


def _cli(*args: str, env: Dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flink_agents.cli.main", "run-yaml", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=env, umask=0o022,
    )


def _input_file(tmp_path: Path, reviews: List[Dict[str, Any]]) -> Path:
    return _write(tmp_path / "reviews.jsonl", "".join(json.dumps(r) + "\n" for r in reviews))


def test_run_yaml_command_on_the_local_runner(review_yaml: Path, tmp_path: Path) -> None:
    reviews = _reviews(6)
    out = tmp_path / "out" / "analysis.jsonl"
    done = _cli(str(review_yaml), "--input", str(_input_file(tmp_path, reviews)), "--key", "id", "--output", str(out))
    assert done.returncode == 0, done.stderr
    outputs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(outputs, key=_by_review) == sorted(_code_agent_outputs(reviews), key=_by_review)
    assert "6 records, 6 outputs" in done.stderr
    # Private (issue 27): the outputs hold the model's answers; the command ran under umask 022.
    assert [oct(p.stat().st_mode & 0o777) for p in (out.parent, out)] == ["0o700", "0o600"]


def test_run_yaml_command_reports_bad_files_and_input(review_yaml: Path, tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.yaml", REVIEW_YAML.replace("ReviewAnalysisAgent.process_input", "ReviewAgent.process_input"))
    good_input = _input_file(tmp_path, _reviews(2))
    done = _cli(str(bad), "--input", str(good_input), "--key", "id")
    assert done.returncode == 2
    assert f"{bad}:6: agents[0].actions[0].function: module 'flink_agents.jobs.review_analysis' has no attribute 'ReviewAgent'" in done.stderr

    broken_input = _write(tmp_path / "broken.jsonl", json.dumps(_reviews(1)[0]) + "\n{not json\n")
    done = _cli(str(review_yaml), "--input", str(broken_input), "--key", "id")
    assert done.returncode == 2 and f"{broken_input}:2: not a JSON value" in done.stderr

    done = _cli(str(review_yaml), "--input", str(good_input), "--key", "product")
    assert done.returncode == 2 and f"{good_input}:1: the record has no field 'product'" in done.stderr

    done = _cli(str(review_yaml), "--input", str(good_input), "--agent", "other")
    assert done.returncode == 2 and "--agent 'other': no such agent" in done.stderr

    # A record the agent's action rejects fails the run (exit 1), naming the
    # action; no output file is left behind.
    out = tmp_path / "never.jsonl"
    not_a_review = _write(tmp_path / "odd.jsonl", json.dumps({"id": "B0", "text": "no review field"}) + "\n")
    done = _cli(str(review_yaml), "--input", str(not_a_review), "--key", "id", "--output", str(out))
    assert done.returncode == 1, done.stderr
    assert "the run failed" in done.stderr and "process_input" in done.stderr
    assert not out.exists() and not list(tmp_path.glob("never.jsonl*"))


# -- the docs ---------------------------------------------------------------------


def test_the_docs_yaml_examples_load(tmp_path: Path) -> None:
    """Every complete example (one with ``agents:``) in docs/yaml_agents.md
    builds; a docs change that breaks the format fails here."""
    docs = (REPO_ROOT / "docs" / "yaml_agents.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if b.startswith("agents:")]
    assert blocks
    for index, block in enumerate(blocks):
        agents, _, _ = build_agents(_write(tmp_path / f"example{index}.yaml", block))
        assert agents


def test_build_agents_leaves_shared_action_references_to_load_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path / "shared.yaml", """\
actions:
  - name: shout
    function: flink_agents.jobs.review_analysis:ReviewAnalysisAgent.process_input
    listen_to: [input]
agents:
  - name: a
    actions: [shout]
""")
    agents, _, shared_actions = build_agents(path)
    assert "shout" not in agents["a"].actions and "shout" in shared_actions  # as 0.3.1: the caller merges
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.load_yaml(path)
    assert "shout" in env._agents["a"].actions
