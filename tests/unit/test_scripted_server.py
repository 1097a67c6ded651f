"""The scripted chat server speaks enough OpenAI for real clients."""
from __future__ import annotations

import json
import threading

import openai
import pytest

from tests.support.scripted_openai_server import ScriptedChatServer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_openai_sdk_tool_call_then_text(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'},
                    }
                ],
            },
            {"role": "assistant", "content": "It is sunny in Berlin."},
        ]
    )
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)

    first_messages = [{"role": "user", "content": "Weather in Berlin?"}]
    first = client.chat.completions.create(
        model="scripted-model", messages=first_messages, tools=[WEATHER_TOOL]
    )
    assert first.model == "scripted-model"
    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].id == "call_0"
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Berlin"}
    assert first.usage is not None and first.usage.total_tokens >= first.usage.prompt_tokens

    second_messages = first_messages + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 21C"},
    ]
    second = client.chat.completions.create(model="scripted-model", messages=second_messages)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is sunny in Berlin."
    assert not second.choices[0].message.tool_calls

    assert len(server.requests) == 2
    assert server.requests[0]["model"] == "scripted-model"
    assert server.requests[0]["messages"] == first_messages
    assert server.requests[0]["tools"][0]["function"]["name"] == "get_weather"
    assert server.requests[1]["messages"] == second_messages


def test_exhausted_script_is_an_api_error(scripted_chat_server):
    server = scripted_chat_server
    server.replies.append({"role": "assistant", "content": "only one"})
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    msgs = [{"role": "user", "content": "hello"}]

    assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "only one"
    with pytest.raises(openai.APIError) as info:
        client.chat.completions.create(model="m", messages=msgs)
    assert isinstance(info.value, openai.InternalServerError)
    assert "#1" in str(info.value)
    assert len(server.requests) == 2


def test_reply_fn_and_streaming_rejected(scripted_chat_server):
    server = scripted_chat_server
    server.set_reply_fn(
        lambda req, i: {"role": "assistant", "content": f"{i}:{req['messages'][-1]['content']}"}
    )
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    for n in range(3):
        out = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"q{n}"}]
        )
        assert out.choices[0].message.content == f"{n}:q{n}"

    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
    # Kept as a violation: leaving the fixture would fail the test.
    assert len(server.violations) == 1 and "stream" in server.violations[0]
    server.violations.clear()


def test_requests_overlap_across_threads():
    """Four client threads are served at once: each request is held until
    all four are in flight (a server serving one at a time never gets there).
    The timing: tools/bench/overlap.py."""
    with ScriptedChatServer(latency_s=0.05) as server:
        server.hold_until_in_flight(4, timeout_s=10)
        server.set_reply_fn(lambda req, i: {"role": "assistant", "content": str(i)})
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        results: list[str] = []

        def call() -> None:
            out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            results.append(out.choices[0].message.content)

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == ["0", "1", "2", "3"]
    assert (server.max_in_flight, server.hold_timed_out, server.in_flight) == (4, False, 0)
    # Entry and exit times the server noted: every request entered before any left.
    assert len(server.spans) == 4
    assert max(start for start, _ in server.spans) < min(end for _, end in server.spans)


def test_a_hold_that_is_never_reached_times_out_and_says_so():
    with ScriptedChatServer() as server:
        server.hold_until_in_flight(2, timeout_s=0.2)
        server.replies += [{"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two"}]
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        msgs = [{"role": "user", "content": "x"}]
        answers = [client.chat.completions.create(model="m", messages=msgs).choices[0].message.content for _ in range(2)]
    assert answers == ["one", "two"]
    assert (server.max_in_flight, server.hold_timed_out) == (1, True)
