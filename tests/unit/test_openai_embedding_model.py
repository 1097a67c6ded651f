"""The OpenAI embedding model over the real ``openai`` SDK, against a
scripted server that checks each request against OpenAI's embeddings
reference (and lists ``data`` in reverse index order)."""
from __future__ import annotations

import asyncio
from typing import Any, List

import openai
import pytest

from flink_agents.api.chat_models.errors import ModelAuthenticationError, ModelRateLimited, ModelUnreachable
from flink_agents.integrations.embedding_models import openai_embedding_model
from flink_agents.integrations.embedding_models.openai_embedding_model import (
    OpenAIEmbeddingModelConnection,
    OpenAIEmbeddingModelSetup,
)
from tests.support.scripted_http import ScriptedError
from tests.support.scripted_openai_server import OpenAIScriptedServer

MODEL = "text-embedding-3-small"


def _vector_of(text: str) -> List[float]:
    """A vector that identifies its text: [length, number at its end]."""
    return [float(len(text)), float(text.rsplit(" ", 1)[-1])]


def _reply(request: dict, index: int) -> dict:
    inputs = request["input"] if isinstance(request["input"], list) else [request["input"]]
    return {"embeddings": [_vector_of(text) for text in inputs]}


def _connection(server: OpenAIScriptedServer, **fields: Any) -> OpenAIEmbeddingModelConnection:
    return OpenAIEmbeddingModelConnection(api_key="sk-test", base_url=server.base_url, max_retries=0, **fields)


def _setup(connection: OpenAIEmbeddingModelConnection, **fields: Any) -> OpenAIEmbeddingModelSetup:
    return OpenAIEmbeddingModelSetup(connection=connection, model=MODEL, **fields)


def test_one_text_and_a_batch_keep_their_order():
    texts = [f"review number {n}" for n in range(5)]
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_reply)
        connection = _connection(server)
        try:
            setup = _setup(connection, dimensions=2, user="team-7")
            single = setup.embed("just one 9")
            batch = setup.embed(texts)
        finally:
            connection.close()
    assert single == _vector_of("just one 9")
    assert batch == [_vector_of(t) for t in texts]  # the server lists data in reverse index order
    one, many = server.requests
    assert one == {"model": MODEL, "input": ["just one 9"], "encoding_format": "float", "dimensions": 2,
                   "user": "team-7"}
    assert many["input"] == texts  # one request for the batch
    assert server.exchanges[0].headers["authorization"] == "Bearer sk-test"


def test_base64_vectors_are_decoded():
    """Without ``encoding_format`` the SDK asks for base64; vectors come back as floats all the same."""
    with OpenAIScriptedServer([{"embeddings": [[0.5, -0.25, 3.0]]}]) as server:
        connection = _connection(server)
        try:
            vector = connection.embed("text 1", model=MODEL)
        finally:
            connection.close()
    assert server.requests[0]["encoding_format"] == "base64"
    assert vector == [0.5, -0.25, 3.0]


def test_batches_over_the_api_limit_are_split_in_order(monkeypatch):
    # The real bound: 2049 inputs go as 2048 + 1 (the server rejects more than 2048).
    texts = [f"t {n}" for n in range(2049)]
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_reply)
        connection = _connection(server)
        try:
            vectors = _setup(connection).embed(texts)
            monkeypatch.setattr(openai_embedding_model, "MAX_INPUTS_PER_REQUEST", 3)
            small = _setup(connection).embed(texts[:7])
        finally:
            connection.close()
    assert [v[1] for v in vectors] == [float(n) for n in range(2049)]
    assert [len(r["input"]) for r in server.requests] == [2048, 1, 3, 3, 1]
    assert small == [_vector_of(t) for t in texts[:7]]


def test_async_embeddings_use_an_async_client_per_loop():
    texts = [f"async text {n}" for n in range(4)]
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_reply)
        connection = _connection(server)
        setup = _setup(connection, dimensions=2)
        try:
            async def both() -> tuple:
                return await asyncio.gather(setup.aembed(texts), setup.aembed("alone 5"))

            batch, single = asyncio.run(both())
            assert connection._pool().async_count() == 0  # closed with its loop
            again = asyncio.run(setup.aembed(texts[:1]))
        finally:
            connection.close()
    assert batch == [_vector_of(t) for t in texts]
    assert single == _vector_of("alone 5")
    assert again == [_vector_of(texts[0])]
    assert all(r["dimensions"] == 2 for r in server.requests) and len(server.requests) == 3


@pytest.mark.parametrize(
    ("error", "expected"),
    [(ScriptedError(401, "Incorrect API key provided"), ModelAuthenticationError),
     (ScriptedError(429, "Rate limit reached"), ModelRateLimited)],
    ids=["401", "429"],
)
def test_errors_are_classified(error: ScriptedError, expected: type):
    with OpenAIScriptedServer([error, error]) as server:
        connection = _connection(server)
        try:
            with pytest.raises(expected) as raised:
                connection.embed(["a"], model=MODEL)
            with pytest.raises(expected) as raised_async:
                asyncio.run(connection.aembed(["a"], model=MODEL))
        finally:
            connection.close()
    for exc in (raised.value, raised_async.value):
        assert (exc.provider, exc.status) == ("openai", error.status) and error.message in str(exc)
        assert isinstance(exc.__cause__, openai.APIStatusError)

    with OpenAIScriptedServer() as gone:
        closed_url = gone.base_url
    connection = OpenAIEmbeddingModelConnection("sk-test", closed_url, 5.0, 0)  # 0.3.1's positional order
    with pytest.raises(ModelUnreachable):
        connection.embed("a", model=MODEL)


def test_bad_input_is_refused_before_any_request():
    with OpenAIScriptedServer() as server:
        connection = _connection(server)
        assert connection.embed([], model=MODEL) == []
        with pytest.raises(TypeError, match="text to embed #1 must be a str"):
            connection.embed(["fine", 42], model=MODEL)
        with pytest.raises(ValueError, match="needs a model name"):
            connection.embed("a")
        connection.close()
    assert server.requests == []


def test_setup_model_kwargs():
    setup = OpenAIEmbeddingModelSetup(connection="c", model=MODEL)
    assert setup.model_kwargs == {"model": MODEL, "encoding_format": "float"}
    setup = OpenAIEmbeddingModelSetup(connection="c", model=MODEL, encoding_format="base64", dimensions=256,
                                      user="u", additional_kwargs={"dimensions": 64})
    assert setup.model_kwargs == {"model": MODEL, "encoding_format": "base64", "dimensions": 64, "user": "u"}
