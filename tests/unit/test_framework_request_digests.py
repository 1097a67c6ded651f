"""A framework turn's model request digest (what a replay is checked
against, ``DurableTurn.model_request``) changes when one field of one part
the model sees changes, and only then (issue 29, part 6): in every
integration (Pydantic AI, OpenAI Agents SDK, LangGraph, Google ADK), for
every part field, with the production digest functions. First the case
that matters most: the same tool, the same call id, a result of 42 against
43. Volatile fields (timestamps, ids and data the framework or provider
makes per attempt, usage) leave the digest as it is.

Fast: no engine, no server, no model; each framework is imported in its
own tests (``pytest.importorskip``)."""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

Path = Tuple[Any, ...]


def _leaves(value: Any, path: Path = ()) -> Iterator[Tuple[Path, Any]]:
    """``(path, scalar)`` for every scalar in ``value`` (dict keys, list
    indexes), ``None`` included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, path + (index,))
    else:
        yield path, value


def _with(value: Any, path: Path, new: Any) -> Any:
    """A deep copy of ``value`` with ``new`` at ``path``."""
    changed = copy.deepcopy(value)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return changed


def _other(leaf: Any) -> Any:
    """Another scalar of the same type."""
    if isinstance(leaf, bool):
        return not leaf
    if isinstance(leaf, int):
        return leaf + 1
    if isinstance(leaf, float):
        return leaf + 0.5
    if isinstance(leaf, str):
        return leaf + " (changed)"
    raise AssertionError(f"no other value for {leaf!r}")


# == Pydantic AI ===================================================================================
# request_digest(messages, settings, parameters); messages are ModelMessages.

# Left out by design: when a part was made, the provider's ids, names, details
# and signatures (they come back with the journaled response), and what is
# never sent to the model (metadata, a dynamic prompt's function ref).
_PYD_VOLATILE = {
    "timestamp": "2031-01-02T03:04:05Z", "id": "other-id", "provider_name": "other-provider",
    "provider_details": {"other": "details"}, "signature": "other-signature", "metadata": {"other": 1},
    "dynamic_ref": "other_function",
}
# part index in the history -> the part's fields the digest must depend on
# (all but part_kind, which the role test swaps, and the volatile ones).
_PYD_FIELDS = {
    "system-prompt": ("content", "context_id", "scope"),
    "user-prompt": ("content",),
    "speech": ("transcript", "audio", "interrupted_at_ms", "timestamps"),
    "tool-availability-delta": ("tools_added", "tool_call_id"),
    "capability-load-delta": ("loaded", "tool_call_id"),
    "model-settings-delta": ("settings", "top_level"),
    "instruction-delta": ("id", "content", "base_hash"),
    "instruction-baseline": ("instructions",),
    "compaction": ("content",),
    "thinking": ("content",),
    "text": ("content", "citations"),
    "tool-call": ("tool_name", "args", "tool_call_id", "tool_kind"),
    "builtin-tool-call": ("tool_name", "args", "tool_call_id", "tool_kind"),
    "builtin-tool-return": ("tool_name", "content", "tool_call_id", "tool_kind", "outcome"),
    "file": ("content",),
    "tool-return": ("tool_name", "content", "tool_call_id", "tool_kind", "outcome", "retry"),
    "retry-feedback": ("content", "retry"),
}
# Values for fields the base history leaves at None, and for literals.
_PYD_SET = {
    ("speech", "audio"): {"data": "YWJj", "media_type": "audio/wav", "kind": "binary"},
    ("file", "content"): {"data": "YWJk", "media_type": "image/png", "kind": "binary"},
    ("instruction-delta", "id"): "capability:math",
    ("model-settings-delta", "settings"): {"thinking": "low"},
    ("tool-return", "retry"): {"cause": "model_retry", "attempt": 1, "max_retries": 3},
    ("tool-return", "outcome"): "failed",
    ("builtin-tool-return", "outcome"): "failed",
    ("system-prompt", "scope"): "conversation",
    ("tool-return", "tool_kind"): "inventory.lookup",
    ("builtin-tool-call", "tool_kind"): "inventory.search",
    ("builtin-tool-return", "tool_kind"): "inventory.search",
}
# Nested scalars that are discriminators or enums: set whole, above, or kept.
_PYD_FIXED_LEAVES = {"kind", "part_kind", "cause", "on_change", "media_type", "identifier", "data", "granularity"}
# Fields with one possible value where the part sits (a speech part in a request is the user's).
_PYD_FIXED = {("speech", "speaker")}


def _pyd_history() -> List[Dict[str, Any]]:
    """A history (ModelMessages JSON) with one part of every kind, in
    three messages: request, response, request."""
    from pydantic_ai.messages import (
        BinaryContent, CapabilityLoadDeltaPart, Citation, CompactionPart, FilePart, ImageUrl, InstructionBaselinePart,
        InstructionDeltaPart, InstructionPart, ModelMessagesTypeAdapter, ModelRequest, ModelResponse,
        ModelSettingsDeltaPart, NativeToolCallPart, NativeToolReturnPart, RetryFeedbackPart, RetryInfo, SpeechPart,
        SpeechTimestamp, SystemPromptPart, TextPart, ThinkingPart, ToolAvailabilityDeltaPart, ToolCallPart,
        ToolReturnPart, UserPromptPart, WebCitationSource,
    )

    messages = [
        ModelRequest(parts=[
            SystemPromptPart("Be brief.", context_id="system_prompt:units", scope="request"),
            UserPromptPart(["What is 6*7?", ImageUrl("https://example.com/a.png")]),
            SpeechPart(speaker="user", transcript="six times seven", interrupted_at_ms=5,
                       timestamps=[SpeechTimestamp(text="six", start_ms=0, duration_ms=200)]),
            ToolAvailabilityDeltaPart(tools_added=["lookup"], tool_call_id="call_0"),
            CapabilityLoadDeltaPart(loaded=["math"], tool_call_id="call_0"),
            ModelSettingsDeltaPart(settings={"thinking": "high"}, top_level=True),
            InstructionDeltaPart(id=None, content="Use metric units.", base_hash="ab12"),
            InstructionBaselinePart(instructions=[InstructionPart(content="Answer briefly.", name="brief")]),
            CompactionPart(content="earlier: the user asked about units"),
        ], instructions="Answer briefly."),
        ModelResponse(parts=[
            ThinkingPart("multiply"),
            TextPart("Let me check.", citations=[Citation(sources=[WebCitationSource(url="https://example.com/s",
                                                                                     excerpts=["6*7=42"])])]),
            ToolCallPart("lookup", {"n": 6}, tool_call_id="call_1", tool_kind="inventory.lookup"),
            NativeToolCallPart("web_search", {"q": "6*7"}, tool_call_id="search_1"),
            NativeToolReturnPart("web_search", {"hits": 1}, tool_call_id="search_1"),
            FilePart(BinaryContent(b"abc", media_type="image/png")),
        ]),
        ModelRequest(parts=[
            ToolReturnPart("lookup", 42, tool_call_id="call_1"),
            RetryFeedbackPart(content="Answer with a number.", retry=RetryInfo(cause="no_output", attempt=1,
                                                                               max_retries=2)),
        ]),
    ]
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def _pyd_digest(history: List[Dict[str, Any]], settings: Any = None) -> Dict[str, Any]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models import ModelRequestParameters

    from flink_agents.integrations.frameworks.pydantic_ai import request_digest

    return request_digest(ModelMessagesTypeAdapter.validate_python(history), settings, ModelRequestParameters())


def _pyd_where(history: List[Dict[str, Any]], kind: str) -> Tuple[int, int]:
    return next((i, j) for i, message in enumerate(history) for j, part in enumerate(message["parts"])
                if part["part_kind"] == kind)


def _pyd_tool_results(result: Any) -> Any:
    history = _pyd_history()
    i, j = _pyd_where(history, "tool-return")
    return _pyd_digest(_with(history, (i, "parts", j, "content"), result))


def test_pydantic_ai_parts_are_all_classified() -> None:
    """Every part kind Pydantic AI can put in a request is in the history
    these tests change, and every field of it is either checked here or
    volatile (a new field or kind fails here until it is classified)."""
    pytest.importorskip("pydantic_ai")
    import dataclasses
    import typing

    from pydantic_ai import messages

    kinds = set()

    def walk(t: Any) -> None:
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            kinds.add(next(f.default for f in dataclasses.fields(t) if f.name == "part_kind"))
        for arg in typing.get_args(t):
            walk(arg)

    walk(messages.ModelRequestPart)
    walk(messages.ModelResponsePart)
    kinds.discard("retry-prompt")  # deprecated: loads as tool-return or retry-feedback, never dumped
    history = _pyd_history()
    dumped = {part["part_kind"]: part for message in history for part in message["parts"]}
    assert kinds <= set(dumped), kinds - set(dumped)
    for kind, part in dumped.items():
        fields = set(part) - {"part_kind", "content_file_digests"} - set(_PYD_VOLATILE) - {f for k, f in _PYD_FIXED
                                                                                            if k == kind}
        if kind == "instruction-delta":
            fields.add("id")  # the block it replaces: not a provider id
        assert fields == set(_PYD_FIELDS[kind]), (kind, fields ^ set(_PYD_FIELDS[kind]))


@pytest.mark.parametrize("kind,field", [(k, f) for k, fs in _PYD_FIELDS.items() for f in fs])
def test_pydantic_ai_digest_changes_with_each_part_field(kind: str, field: str) -> None:
    pytest.importorskip("pydantic_ai")
    history = _pyd_history()
    i, j = _pyd_where(history, kind)
    base = _pyd_digest(history)
    value = history[i]["parts"][j][field]
    if (kind, field) in _PYD_SET:
        changes = [((), _PYD_SET[kind, field])]
    else:
        changes = [(path, _other(leaf)) for path, leaf in _leaves(value)
                   if leaf is not None and not set(map(str, path)) & _PYD_FIXED_LEAVES]
    assert changes, f"nothing to change in {kind}.{field} = {value!r}"
    for path, new in changes:
        changed = _with(history, (i, "parts", j, field) + path, new)
        assert _pyd_digest(changed) != base, f"{kind}.{field}{list(path)} -> {new!r}: same digest"


def test_pydantic_ai_a_tool_result_of_42_is_not_one_of_43() -> None:
    pytest.importorskip("pydantic_ai")
    assert _pyd_tool_results(42) != _pyd_tool_results(43)
    assert _pyd_tool_results(42) == _pyd_tool_results(42)


@pytest.mark.parametrize("one,other", [("system-prompt", "user-prompt"), ("text", "thinking")])
def test_pydantic_ai_digest_changes_with_a_part_kind(one: str, other: str) -> None:
    """The same content said by someone else (system/user, text/thinking)."""
    pytest.importorskip("pydantic_ai")
    history = _pyd_history()
    i, j = _pyd_where(history, one)
    content = history[i]["parts"][j]["content"]
    swapped = _with(history, (i, "parts", j), {"part_kind": other, "content": content})
    assert _pyd_digest(swapped) != _pyd_digest(_with(history, (i, "parts", j), {"part_kind": one,
                                                                                  "content": content}))


def test_pydantic_ai_digest_equal_despite_volatile_fields() -> None:
    pytest.importorskip("pydantic_ai")
    history = _pyd_history()
    base = _pyd_digest(history)
    changed = copy.deepcopy(history)
    touched = 0
    for message in changed:
        message["timestamp"] = "2031-01-02T03:04:05Z"
        message["run_id"], message["conversation_id"] = "other-run", "other-conversation"
        if message["kind"] == "response":
            message.update(provider_response_id="resp-other", usage={"input_tokens": 99, "output_tokens": 7})
        for part in message["parts"]:
            for key, value in _PYD_VOLATILE.items():
                if key not in part or (key == "id" and part["part_kind"] == "instruction-delta"):
                    continue
                # A compaction part in a request is the framework's own summary: no provider fields.
                if not (part["part_kind"] == "compaction" and key in ("id", "provider_name", "provider_details")):
                    part[key] = value
                    if key == "provider_details":
                        part["provider_name"] = _PYD_VOLATILE["provider_name"]
                    touched += 1
    assert touched >= 20
    assert _pyd_digest(changed) == base


def test_pydantic_ai_plain_parts_digest_as_earlier_releases_journaled_them() -> None:
    """Parts that leave the other fields at their defaults (a default
    scope, no tool kind) digest as before those fields counted: journals
    written earlier still replay."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter, ModelRequest, ModelResponse, SystemPromptPart, TextPart, ToolCallPart,
        ToolReturnPart, UserPromptPart,
    )

    history = ModelMessagesTypeAdapter.dump_python([
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("What is 6*7?")]),
        ModelResponse(parts=[TextPart("Let me check."), ToolCallPart("lookup", {"n": 6}, tool_call_id="call_1")]),
        ModelRequest(parts=[ToolReturnPart("lookup", 42, tool_call_id="call_1")]),
    ], mode="json")
    assert [m["parts"] for m in _pyd_digest(history)["messages"]] == [
        [{"part_kind": "system-prompt", "content": "Be brief."},
         {"part_kind": "user-prompt", "content": "What is 6*7?"}],
        [{"part_kind": "text", "content": "Let me check."},
         {"part_kind": "tool-call", "tool_name": "lookup", "args": {"n": 6}, "tool_call_id": "call_1"}],
        [{"part_kind": "tool-return", "tool_name": "lookup", "content": 42, "tool_call_id": "call_1",
          "outcome": "success"}],
    ]


# == OpenAI Agents SDK =============================================================================
# _request_digest(system_instructions, input, model_settings, tools, output_schema, handoffs);
# input is the Responses API input items the SDK builds.

_OAI_VOLATILE_ITEM = {"id": "other-id", "status": "incomplete", "provider_data": {"other": 1}}
_OAI_VOLATILE_PART = {"annotations": [{"type": "url_citation", "url": "https://x"}], "logprobs": [{"token": "x"}]}


def _oai_items(result: str = "42") -> List[Dict[str, Any]]:
    return [
        {"role": "developer", "content": "Use metric units."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is 6*7?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
        ]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "multiply"}],
         "encrypted_content": "enc"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [
            {"type": "output_text", "text": "Let me check.", "annotations": [], "logprobs": []},
        ]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": '{"n": 6}',
         "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": result},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "7"}]},
    ]


def _oai_digest(items: Any, settings: Any = None) -> Dict[str, Any]:
    from flink_agents.integrations.frameworks.openai_agents import _request_digest

    return _request_digest("Be brief.", items, settings, [], None, [])


def _oai_fields() -> List[Tuple[int, str]]:
    return [(i, key) for i, item in enumerate(_oai_items()) for key in item if key not in _OAI_VOLATILE_ITEM]


@pytest.mark.parametrize("index,field", _oai_fields())
def test_openai_agents_digest_changes_with_each_item_field(index: int, field: str) -> None:
    pytest.importorskip("agents")
    items = _oai_items()
    base = _oai_digest(items)
    changes = [(path, _other(leaf)) for path, leaf in _leaves(items[index][field])
               if not set(map(str, path)) & set(_OAI_VOLATILE_PART)]
    assert changes
    for path, new in changes:
        assert _oai_digest(_with(items, (index, field) + path, new)) != base, (index, field, path)


def test_openai_agents_a_tool_result_of_42_is_not_one_of_43() -> None:
    pytest.importorskip("agents")
    assert _oai_digest(_oai_items("42")) != _oai_digest(_oai_items("43"))
    assert _oai_digest(_oai_items("42")) == _oai_digest(_oai_items("42"))
    # A string input is the user's message.
    assert _oai_digest("What is 6*7?") != _oai_digest("What is 6*8?")


def test_openai_agents_digest_equal_despite_volatile_fields() -> None:
    pytest.importorskip("agents")
    from agents import ModelSettings

    items = _oai_items()
    changed = copy.deepcopy(items)
    for item in changed:
        item.update(_OAI_VOLATILE_ITEM)
        for part in item.get("content") if isinstance(item.get("content"), list) else ():
            part.update(_OAI_VOLATILE_PART)
    base = _oai_digest(items, ModelSettings(temperature=0.1, extra_args={"prompt_cache_key": "k1"}))
    assert _oai_digest(changed, ModelSettings(temperature=0.1, extra_args={"prompt_cache_key": "k2"})) == base
    assert _oai_digest(items, ModelSettings(temperature=0.2, extra_args={"prompt_cache_key": "k1"})) != base


# == LangGraph =====================================================================================
# DurableChatModel._agenerate's digest is {"messages": [_project(m) ...], "stop", "kwargs"}.

# What a message carries that the model never sees, or that varies per attempt.
_LG_VOLATILE = {"id": "other-id", "response_metadata": {"created": 99, "model_name": "other"},
                "usage_metadata": {"input_tokens": 9, "output_tokens": 9, "total_tokens": 18},
                "artifact": {"raw": "other"}}


def _lg_messages(result: str = "42") -> List[Tuple[str, Dict[str, Any]]]:
    """(class name, fields) of a history with every message type, every
    field the model sees set."""
    return [
        ("SystemMessage", {"content": "Be brief.", "name": "rules",
                           "additional_kwargs": {"__openai_role__": "developer"}}),
        ("HumanMessage", {"content": [{"type": "text", "text": "What is 6*7?"},
                                      {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
                          "name": "alice", "additional_kwargs": {}}),
        ("AIMessage", {"content": "Let me check.", "name": "calc",
                       "tool_calls": [{"id": "call_1", "name": "lookup", "args": {"n": 6}}],
                       "invalid_tool_calls": [{"id": "call_9", "name": "lookup", "args": "{n:", "error": "bad json"}],
                       "additional_kwargs": {"audio": {"id": "audio_1"}}}),
        ("ToolMessage", {"content": result, "tool_call_id": "call_1", "name": "lookup", "status": "success",
                         "additional_kwargs": {}}),
        ("ChatMessage", {"content": "Use metric units.", "role": "developer", "name": "ops", "additional_kwargs": {}}),
        ("FunctionMessage", {"content": "7", "name": "legacy_lookup", "additional_kwargs": {}}),
    ]


# Literal-valued fields, and the invalid call's error (the model sees its args, not the parser's message).
_LG_SET = {"status": "error"}
_LG_UNSEEN_LEAVES = {"error"}


def _lg_digest(messages: List[Tuple[str, Dict[str, Any]]]) -> List[Dict[str, Any]]:
    from langchain_core import messages as lc

    from flink_agents.integrations.frameworks.langgraph import _project

    return [_project(getattr(lc, name)(**fields)) for name, fields in messages]


def _lg_fields() -> List[Tuple[int, str]]:
    return [(i, key) for i, (_, fields) in enumerate(_lg_messages()) for key in fields]


def test_langgraph_message_fields_are_all_classified() -> None:
    """Every field of every message type is checked here, volatile, or the
    type itself (swapped below)."""
    pytest.importorskip("langgraph")
    from langchain_core import messages as lc

    for name, fields in _lg_messages():
        declared = set(getattr(lc, name).model_fields) - {"type"} - set(_LG_VOLATILE)
        assert declared == set(fields), (name, declared ^ set(fields))


@pytest.mark.parametrize("index,field", _lg_fields())
def test_langgraph_digest_changes_with_each_message_field(index: int, field: str) -> None:
    pytest.importorskip("langgraph")
    messages = _lg_messages()
    base = _lg_digest(messages)
    value = messages[index][1][field]
    if field in _LG_SET:
        changes = [((), _LG_SET[field])]
    elif value == {}:
        changes = [((), {"name": "bob"})]
    else:
        changes = [(path, _other(leaf)) for path, leaf in _leaves(value) if not set(map(str, path)) & _LG_UNSEEN_LEAVES]
    assert changes
    for path, new in changes:
        assert _lg_digest(_with(messages, (index, 1, field) + path, new)) != base, (index, field, path)
    # And an empty one (no name, no extra kwargs) is not a set one.
    if field in ("name", "additional_kwargs") and value:
        assert _lg_digest(_with(messages, (index, 1, field), type(value)())) != base


def test_langgraph_a_tool_result_of_42_is_not_one_of_43() -> None:
    pytest.importorskip("langgraph")
    assert _lg_digest(_lg_messages("42")) != _lg_digest(_lg_messages("43"))
    assert _lg_digest(_lg_messages("42")) == _lg_digest(_lg_messages("42"))


@pytest.mark.parametrize("one,other", [("HumanMessage", "SystemMessage"), ("HumanMessage", "AIMessage")])
def test_langgraph_digest_changes_with_the_message_type(one: str, other: str) -> None:
    pytest.importorskip("langgraph")
    assert _lg_digest([(one, {"content": "hi"})]) != _lg_digest([(other, {"content": "hi"})])


def test_langgraph_digest_equal_despite_volatile_fields() -> None:
    pytest.importorskip("langgraph")
    messages = _lg_messages()
    changed = copy.deepcopy(messages)
    for name, fields in changed:
        fields.update({k: v for k, v in _LG_VOLATILE.items()
                       if k in ("id", "response_metadata") or (k == "usage_metadata") == (name == "AIMessage")
                       and (k != "artifact" or name == "ToolMessage")})
    assert sum("usage_metadata" in f or "artifact" in f for _, f in changed) == 2
    assert _lg_digest(changed) == _lg_digest(messages)


def test_langgraph_plain_messages_digest_as_earlier_releases_journaled_them() -> None:
    """No chat-message role, no set ``additional_kwargs`` (an OpenAI reply's
    ``refusal: None``): the digest earlier releases journaled."""
    pytest.importorskip("langgraph")
    assert _lg_digest([("HumanMessage", {"content": "hi"}),
                       ("AIMessage", {"content": "yo", "additional_kwargs": {"refusal": None}}),
                       ("ToolMessage", {"content": "42", "tool_call_id": "call_1"})]) == [
        {"type": "human", "content": "hi"},
        {"type": "ai", "content": "yo", "tool_calls": []},
        {"type": "tool", "content": "42", "tool_call_id": "call_1", "status": "success"},
    ]


# == Google ADK ====================================================================================
# _request_digest(LlmRequest).

# Enums and bytes: another valid value.
_ADK_SET = {"role": {"user": "model", "model": "user"}, "language": {"PYTHON": "LANGUAGE_UNSPECIFIED"},
            "outcome": {"OUTCOME_OK": "OUTCOME_FAILED"},
            "mime_type": {"image/png": "image/jpeg", "application/pdf": "text/plain"},
            "data": {"YWJj": "YWJk"}, "thought_signature": {"c2ln": "c2lo"}}


def _adk_contents(result: int = 42) -> List[Dict[str, Any]]:
    return [
        {"role": "user", "parts": [
            {"text": "What is 6*7?"},
            {"inline_data": {"mime_type": "image/png", "data": "YWJj"}},
            {"file_data": {"file_uri": "gs://bucket/a.pdf", "mime_type": "application/pdf"}},
        ]},
        {"role": "model", "parts": [
            {"text": "multiply", "thought": True, "thought_signature": "c2ln"},
            {"text": "Let me check."},
            {"function_call": {"id": "call_1", "name": "lookup", "args": {"n": 6}}},
            {"executable_code": {"code": "print(6*7)", "language": "PYTHON"}},
            {"code_execution_result": {"outcome": "OUTCOME_OK", "output": "42"}},
        ]},
        {"role": "user", "parts": [
            {"function_response": {"id": "call_1", "name": "lookup", "response": {"result": result}}},
        ]},
    ]


def _adk_digest(contents: List[Any]) -> Dict[str, Any]:
    from google.adk.models.llm_request import LlmRequest
    from google.genai import types

    from flink_agents.integrations.frameworks.google_adk import _request_digest

    request = LlmRequest(model="gemini-2.5-flash", contents=[types.Content.model_validate(c) for c in contents],
                         config=types.GenerateContentConfig(system_instruction="Be brief."))
    return _request_digest(request)


def _adk_fields() -> List[Tuple[int, Any, str]]:
    out: List[Tuple[int, Any, str]] = []
    for i, content in enumerate(_adk_contents()):
        out.append((i, None, "role"))
        out += [(i, j, key) for j, part in enumerate(content["parts"]) for key in part]
    return out


@pytest.mark.parametrize("index,part,field", _adk_fields())
def test_google_adk_digest_changes_with_each_part_field(index: int, part: Any, field: str) -> None:
    pytest.importorskip("google.adk")
    contents = _adk_contents()
    base = _adk_digest(contents)
    at = (index, field) if part is None else (index, "parts", part, field)
    target = contents[index] if part is None else contents[index]["parts"][part]
    changes = []
    for path, leaf in _leaves(target[field]):
        key = (at + path)[-1]
        changes.append((path, _ADK_SET[key][leaf] if key in _ADK_SET else _other(leaf)))
    assert changes
    for path, new in changes:
        assert _adk_digest(_with(contents, at + path, new)) != base, (at, path)


def test_google_adk_a_tool_result_of_42_is_not_one_of_43() -> None:
    pytest.importorskip("google.adk")
    assert _adk_digest(_adk_contents(42)) != _adk_digest(_adk_contents(43))
    assert _adk_digest(_adk_contents(42)) == _adk_digest(_adk_contents(42))


def test_google_adk_digest_equal_despite_event_ids_and_timestamps() -> None:
    """The contents ADK builds from the session's events (its contents
    processor) do not carry the events' ids, invocation ids or timestamps,
    nor an id ADK made up for a function call; the result still counts."""
    pytest.importorskip("google.adk")
    from google.adk.events import Event
    from google.adk.flows.llm_flows.contents import _get_contents
    from google.genai import types

    def events(seed: int, call_id: str = "call_1", result: int = 42) -> List[Event]:
        contents = _adk_contents(result)
        contents[1]["parts"][2]["function_call"]["id"] = call_id
        contents[2]["parts"][0]["function_response"]["id"] = call_id
        return [Event(id=f"event-{seed}-{n}", invocation_id=f"inv-{seed}", timestamp=1000.0 + seed + n,
                      author="user" if n != 1 else "calc", content=types.Content.model_validate(c))
                for n, c in enumerate(contents)]

    def digest(evs: List[Event]) -> Dict[str, Any]:
        return _adk_digest([c.model_dump(mode="json", exclude_none=True) for c in _get_contents(None, evs, "calc")])

    assert digest(events(0)) == digest(events(7))
    assert digest(events(0, "adk-1111")) == digest(events(7, "adk-2222"))  # ids ADK generated: not sent
    assert digest(events(0)) != digest(events(0, result=43))


# == All integrations ==============================================================================

_TOOL_RESULTS: Dict[str, Tuple[str, Callable[[Any], Any]]] = {
    "pydantic_ai": ("pydantic_ai", _pyd_tool_results),
    "openai_agents": ("agents", lambda r: _oai_digest(_oai_items(str(r)))),
    "langgraph": ("langgraph", lambda r: _lg_digest(_lg_messages(str(r)))),
    "google_adk": ("google.adk", lambda r: _adk_digest(_adk_contents(r))),
}


@pytest.mark.parametrize("integration", sorted(_TOOL_RESULTS))
def test_only_the_tool_result_differs_and_the_digest_does(integration: str) -> None:
    """42 against 43: the same tool, the same call id, nothing else changed."""
    module, digest = _TOOL_RESULTS[integration]
    pytest.importorskip(module)
    assert digest(42) != digest(43)
    assert digest(42) == digest(42)

