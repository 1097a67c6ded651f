"""The review-analysis job on structured output with every provider (issue 16, parts 3-4).

The job (its CLI, on the in-process local runner) runs a few reviews with
``--model openai:``, ``anthropic:``, ``ollama:``, ``azure:`` and ``tongyi:``,
each against its provider's scripted server (the provider's real SDK client
on 127.0.0.1) answering from one dialect-neutral script: a plain review, a
damaged one (the model calls ``notify_shipping_manager`` first), and one
whose first answer breaks the ``ReviewAnalysis`` schema and is re-asked.
Every provider must give the same output file.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.jobs import review_analysis

REVIEWS = [
    {"id": "p1", "review": "Great pan, heats evenly and cleans up fast", "ts": 1},
    {"id": "p2", "review": "The lamp arrived broken, the box was crushed", "ts": 2},
    {"id": "p3", "review": "Decent kettle for the price", "ts": 3},
]
FIRST_ANSWER = {  # review id -> the model's final answer before any re-ask
    "p1": {"score": 5, "reasons": ["heats evenly", "easy to clean"]},
    "p2": {"score": 1, "reasons": ["reports shipping damage"]},
    "p3": {"score": 7, "reasons": ["fair price"]},  # breaks ReviewAnalysis (score <= 5): re-asked
}
REASKED_ANSWER = {"score": 3, "reasons": ["fair price"]}
EXPECTED = [
    {"id": "p1", "ts": 1, "score": 5, "reasons": ["heats evenly", "easy to clean"], "reviews_seen": 1, "mean_score": 5.0},
    {"id": "p2", "ts": 2, "score": 1, "reasons": ["reports shipping damage"], "reviews_seen": 1, "mean_score": 1.0},
    {"id": "p3", "ts": 3, "score": 3, "reasons": ["fair price"], "reviews_seen": 1, "mean_score": 3.0},
]
# Requests per review: p1 one answer; p2 the tool call, then the answer; p3 the answer, then the re-ask.
EXPECTED_REQUESTS = 5


def scripted_reply(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The dialect-neutral reply to a request of any provider: which review
    it is about, and how far its conversation got, are read from the body's
    text (each dialect carries the messages in its own shape)."""
    text = json.dumps(body)
    review = next(r for r in REVIEWS if r["review"] in text)
    if review["id"] == "p2" and "shipping manager notified" not in text:
        arguments = {"id": review["id"], "review": review["review"]}
        call = {"id": "call_1", "type": "function", "function": {"name": "notify_shipping_manager", "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = REASKED_ANSWER if "does not match the output schema" in text else FIRST_ANSWER[review["id"]]
    return {"role": "assistant", "content": json.dumps(answer)}


# provider -> (scripted server module, server class, connection module, key variable, extra CLI arguments)
PROVIDERS = {
    "openai": ("tests.support.scripted_openai_server", "OpenAIScriptedServer",
               "flink_agents.integrations.chat_models.openai.openai_chat_model", "OPENAI_API_KEY", []),
    "anthropic": ("tests.support.scripted_anthropic_server", "AnthropicScriptedServer",
                  "flink_agents.integrations.chat_models.anthropic.anthropic_chat_model", "ANTHROPIC_API_KEY", []),
    "ollama": ("tests.support.scripted_ollama_server", "OllamaScriptedServer",
               "flink_agents.integrations.chat_models.ollama_chat_model", None, []),
    "azure": ("tests.support.scripted_openai_server", "AzureOpenAIScriptedServer",
              "flink_agents.integrations.chat_models.azure.azure_openai_chat_model", "AZURE_OPENAI_API_KEY",
              ["--api-version", "2024-10-21"]),
    "tongyi": ("tests.support.scripted_dashscope_server", "DashScopeScriptedServer",
               "flink_agents.integrations.chat_models.tongyi_chat_model", "DASHSCOPE_API_KEY", []),
}


def _openai_format(body: Dict[str, Any]) -> Any:
    return body["response_format"]["type"], body["response_format"]["json_schema"]["name"]


# provider -> how its requests carry the ReviewAnalysis schema (each
# provider's native structured output; none gets the runtime's instruction).
NATIVE_SCHEMA = {
    "openai": (_openai_format, ("json_schema", "ReviewAnalysis")),
    "azure": (_openai_format, ("json_schema", "ReviewAnalysis")),
    "ollama": (lambda body: body["format"]["title"], "ReviewAnalysis"),
    "anthropic": (lambda body: "ReviewAnalysis" in [t["name"] for t in body["tools"]], True),
    "tongyi": (lambda body: body["parameters"]["response_format"], {"type": "json_object"}),
}


def _server_class(provider: str) -> Any:
    server_module, server_class, connection_module, _, _ = PROVIDERS[provider]
    importlib.import_module(connection_module)
    return getattr(importlib.import_module(server_module), server_class)


def _write_reviews(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in REVIEWS), encoding="utf-8")
    return path


def _run_job(provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[List[Dict[str, Any]], Any]:
    server_class = _server_class(provider)
    _, _, _, key_variable, extra = PROVIDERS[provider]
    if key_variable:
        monkeypatch.setenv(key_variable, f"test-key-{provider}")
    output = tmp_path / f"{provider}.jsonl"
    with server_class() as server:
        server.set_reply_fn(scripted_reply)
        code = review_analysis.main([
            "--runner", "local", "--input", str(_write_reviews(tmp_path / "reviews.jsonl")), "--output", str(output),
            "--model", f"{provider}:scripted-model", "--base-url", server.base_url, "--max-retries", "0", *extra,
        ])
    assert code == 0, f"the job failed with {provider}"
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    return sorted(lines, key=lambda line: line["id"]), server


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_every_provider_gives_the_same_validated_output(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        _server_class(provider)
    except ImportError as missing:
        pytest.skip(f"{provider}: its connection or scripted server has not landed ({missing})")
    outputs, server = _run_job(provider, tmp_path, monkeypatch)
    assert outputs == EXPECTED
    assert len(server.requests) == EXPECTED_REQUESTS
    sent = json.dumps(server.requests)
    assert "does not match the output schema 'ReviewAnalysis'" in sent  # p3's answer was re-asked
    assert "shipping manager notified about product p2" in sent  # the tool's result went back
    read_schema, native = NATIVE_SCHEMA[provider]
    assert [read_schema(body) for body in server.requests] == [native] * EXPECTED_REQUESTS
    assert "Answer only with a JSON value that matches this JSON schema" not in sent
    key_variable = PROVIDERS[provider][3]
    if key_variable:  # the key came from the provider's variable
        assert any(f"test-key-{provider}" in json.dumps(dict(e.headers)) for e in server.exchanges)


def test_an_answer_still_breaking_the_schema_fails_the_job_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.scripted_openai_server import ScriptedChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ScriptedChatServer() as server:
        server.set_reply_fn(lambda body, index: {"role": "assistant", "content": json.dumps({"score": 9, "reasons": []})})
        code = review_analysis.main([
            "--runner", "local", "--input", str(_write_reviews(tmp_path / "reviews.jsonl")),
            "--output", str(tmp_path / "out.jsonl"), "--model", "openai:m", "--base-url", server.base_url,
        ])
    err = capsys.readouterr().err
    assert code == 1
    assert "StructuredOutputError" in err and "'ReviewAnalysis'" in err and "field 'score'" in err, err
    assert not (tmp_path / "out.jsonl").exists()


def test_the_local_model_answers_match_the_schema_without_a_re_ask(tmp_path: Path) -> None:
    output = tmp_path / "local.jsonl"
    code = review_analysis.main([
        "--runner", "local", "--input", str(_write_reviews(tmp_path / "reviews.jsonl")), "--output", str(output),
    ])
    assert code == 0
    lines = sorted((json.loads(line) for line in output.read_text().splitlines()), key=lambda line: line["id"])
    assert [line["id"] for line in lines] == ["p1", "p2", "p3"]
    assert all(1 <= line["score"] <= 5 and line["reasons"] for line in lines)
    assert lines[1]["reasons"][0] == "reports shipping damage"


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--model", "gemini:pro"], "--model must be one of 'local', 'openai:NAME', 'anthropic:NAME', 'ollama:NAME', "
                                    "'azure:DEPLOYMENT', 'tongyi:NAME'"),
        (["--model", "azure:my-deployment", "--base-url", "http://127.0.0.1:9"], "needs --base-url (the Azure OpenAI endpoint; or AZURE_OPENAI_ENDPOINT) and --api-version (or OPENAI_API_VERSION)"),
    ],
    ids=["unknown_provider", "azure_without_api_version"],
)
def test_a_bad_model_form_is_refused_before_the_job_runs(
    argv: List[str], problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    code = review_analysis.main(["--runner", "local", "--input", str(_write_reviews(tmp_path / "r.jsonl")),
                                 "--output", str(tmp_path / "o.jsonl"), *argv])
    assert code == 2
    assert problem in capsys.readouterr().err


def test_the_openai_model_without_a_key_fails_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--model openai:NAME`` with no ``--base-url`` and no OPENAI_API_KEY:
    the job fails on its first model call naming the variable (it used to
    report an unreachable model when offline)."""
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    import openai

    for client_class in (openai.OpenAI, openai.AsyncOpenAI):  # none built: no request leaves this machine
        monkeypatch.setattr(client_class, "__init__", lambda *a, **k: 1 / 0)
    code = review_analysis.main(["--runner", "local", "--input", str(_write_reviews(tmp_path / "r.jsonl")),
                                 "--output", str(tmp_path / "o.jsonl"), "--model", "openai:gpt-4o-mini"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "ModelAuthenticationError" in err and "OPENAI_API_KEY" in err, err
    assert "ModelUnreachable" not in err


def test_the_help_lists_every_model_form_and_key_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        review_analysis.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for form in ("openai:NAME", "anthropic:NAME", "ollama:NAME", "azure:DEPLOYMENT", "tongyi:NAME", "--api-version"):
        assert form in text
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "DASHSCOPE_API_KEY"):
        assert variable in text


@pytest.mark.parametrize("provider", [p for p, spec in PROVIDERS.items() if spec[3]])
def test_the_api_key_stays_out_of_the_plan(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans travel to workers and into snapshots: the connection reads its
    key from the environment where it runs instead."""
    from flink_agents.plan.agent_plan import AgentPlan

    monkeypatch.setenv(PROVIDERS[provider][3], "secret-key-value")
    agent = review_analysis.ReviewAnalysisAgent(
        f"{provider}:m", "http://127.0.0.1:9", api_version="2024-10-21" if provider == "azure" else None
    )
    plan = AgentPlan.from_agent(agent).to_json()
    assert "secret-key-value" not in plan and "api_key" not in plan
    assert review_analysis.MODEL_CONNECTION in plan


def test_azure_takes_endpoint_and_api_version_from_azure_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://127.0.0.1:9")
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
    arguments = review_analysis.connection_arguments("azure", None, None, 30.0, 1)
    assert (arguments["azure_endpoint"], arguments["api_version"]) == ("https://127.0.0.1:9", "2024-10-21")


def test_a_rerun_of_the_command_starts_with_a_fresh_journal(tmp_path: Path) -> None:
    """README: "the previous run's journal file is removed when the run
    starts" (a rerun is a new job id: nothing could replay it)."""
    journal = tmp_path / "out.jsonl.journal.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{journal}{suffix}").write_text("a previous run's journal")
    elsewhere = tmp_path / "keep.db"
    elsewhere.write_text("not the journal")
    linked = tmp_path / "linked.journal.db"
    linked.symlink_to(elsewhere)

    assert review_analysis._fresh_journal(journal) == journal.absolute()
    assert not any(Path(f"{journal}{suffix}").exists() for suffix in ("", "-wal", "-shm"))
    # A link is removed itself, never what it points to.
    review_analysis._fresh_journal(linked)
    assert not linked.is_symlink() and elsewhere.read_text() == "not the journal"
