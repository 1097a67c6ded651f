"""Journaled embedding calls (issue 16, part 2).

Inside an action, ``ctx.get_resource(name, ResourceType.EMBEDDING_MODEL)``
gives the setup with its ``embed``/``aembed`` calls journaled
(``embed:<name>``): after a crash or a retry the recorded vectors come back
and the provider is not called again. The ``@embedding_model_connection`` /
``@embedding_model_setup`` decorators declare them on an agent class.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_models.errors import ModelRateLimited
from flink_agents.api.decorators import action, embedding_model_connection, embedding_model_setup
from flink_agents.api.embedding_models.embedding_model import BaseEmbeddingModelConnection, BaseEmbeddingModelSetup
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.execution.resources import JournaledEmbeddingModel
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record

EMBEDDED: List[Any] = []  # every text the provider really embedded
FAIL: Dict[str, int] = {"embed": 0, "after": 0}  # failures still to raise


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing catches it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    EMBEDDED.clear()
    FAIL.update(embed=0, after=0)


def _vector(text: str) -> List[float]:
    return [float(len(text)), float(sum(map(ord, text)) % 97)]


class CountingEmbeddings(BaseEmbeddingModelConnection):
    """Vectors from the text; counts the calls that reach it."""

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Any:
        EMBEDDED.append((text, kwargs.get("model")))
        if FAIL["embed"]:
            FAIL["embed"] -= 1
            raise ModelRateLimited("slow down", provider="counting", status=429)
        return _vector(text) if isinstance(text, str) else [_vector(t) for t in text]


def after_embedding() -> None:
    """The journaled call after the embed calls (a vector store write, say),
    which fails: a crash, or an error the action's retry strategy retries.
    Journaled, so the embed results are durable before it runs, as the
    results of any journaled call are before the next one starts."""
    if FAIL["after"] == -1:
        FAIL["after"] = 0
        raise Crash("process died after the embed call")
    if FAIL["after"]:
        FAIL["after"] -= 1
        raise ConnectionError("store unreachable")


async def embed_async(event: Event, ctx: Any) -> None:
    model = ctx.get_resource("embedder", ResourceType.EMBEDDING_MODEL)
    one = await model.aembed(event.input)
    batch = await model.aembed([event.input, "other"])
    await ctx.durable_execute_async(after_embedding)
    ctx.send_event(OutputEvent(output={"one": one, "batch": batch}))


def embed_sync(event: Event, ctx: Any) -> None:
    model = ctx.get_resource("embedder", ResourceType.EMBEDDING_MODEL)
    one = model.embed(event.input)
    batch = model.embed([event.input, "other"])
    ctx.durable_execute(after_embedding)
    ctx.send_event(OutputEvent(output={"one": one, "batch": batch}))


def embedding_agent(fn: Any, **config: Any) -> Agent:
    agent = Agent()
    agent.add_resource("embeddings", ResourceType.EMBEDDING_MODEL_CONNECTION, ResourceDescriptor(clazz=CountingEmbeddings))
    agent.add_resource(
        "embedder", ResourceType.EMBEDDING_MODEL,
        ResourceDescriptor(clazz=BaseEmbeddingModelSetup, connection="embeddings", model="counting-v1"),
    )
    agent.add_action("embed", [InputEvent], fn, **config)
    return agent


EXPECTED = {"one": _vector("hello"), "batch": [_vector("hello"), _vector("other")]}
BOTH_CALLS = [("hello", "counting-v1"), (["hello", "other"], "counting-v1")]

RETRY = {"error_strategy": "retry", "error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001}


@pytest.mark.parametrize("fn", [embed_async, embed_sync], ids=["aembed", "embed"])
def test_a_crash_after_the_embed_calls_replays_the_vectors_without_calling_the_provider(fn: Any) -> None:
    store = InMemoryJournalStore()
    FAIL["after"] = -1
    with pytest.raises(Crash):
        run_record(embedding_agent(fn), store, "hello")
    assert EMBEDDED == BOTH_CALLS
    recovered = run_record(embedding_agent(fn), store, "hello")  # a restore to before the record
    assert recovered.outputs == [{"k": EXPECTED}]
    assert EMBEDDED == BOTH_CALLS  # nothing embedded again
    entries = [entry for run in store._runs.values() for (entry, _) in run.values()]
    assert sorted(e.function_id for e in entries if e.function_id.startswith("embed")) == ["embed:embedder"] * 2


@pytest.mark.parametrize("fn", [embed_async, embed_sync], ids=["aembed", "embed"])
def test_a_retried_action_does_not_embed_again(fn: Any) -> None:
    FAIL["after"] = 1
    driver = run_record(embedding_agent(fn, **RETRY), InMemoryJournalStore(), "hello")
    assert driver.outputs == [{"k": EXPECTED}]
    assert EMBEDDED == BOTH_CALLS


def test_a_failed_embed_call_runs_again_on_the_retry() -> None:
    FAIL["embed"] = 1
    driver = run_record(embedding_agent(embed_async, **RETRY), InMemoryJournalStore(), "hello")
    assert driver.outputs == [{"k": EXPECTED}]
    assert EMBEDDED == [BOTH_CALLS[0], *BOTH_CALLS]  # the rate-limited call, then both


def test_a_replay_that_embeds_other_text_is_refused() -> None:
    store = InMemoryJournalStore()
    FAIL["after"] = -1
    with pytest.raises(Crash):
        run_record(embedding_agent(embed_async), store, "hello")
    with pytest.raises(ActionFailed, match="Nondeterminism|nondetermin"):
        run_record(embedding_agent(embed_async), store, "goodbye")


def sees_the_setup(event: Event, ctx: Any) -> None:
    model = ctx.get_resource("embedder", ResourceType.EMBEDDING_MODEL)
    ctx.send_event(OutputEvent(output={
        "journaled": isinstance(model, JournaledEmbeddingModel),
        "setup": type(model.setup).__name__,
        "model": model.model,
        "kwargs": model.model_kwargs,
    }))


def test_the_action_sees_the_setup_attributes_through_the_journaled_view() -> None:
    driver = run_record(embedding_agent(sees_the_setup), InMemoryJournalStore(), "x")
    assert driver.outputs == [{"k": {
        "journaled": True, "setup": "BaseEmbeddingModelSetup", "model": "counting-v1", "kwargs": {"model": "counting-v1"},
    }}]


class DecoratedEmbeddingAgent(Agent):
    """Embedding resources declared with 0.3.1's decorators."""

    @embedding_model_connection
    @staticmethod
    def embeddings() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=CountingEmbeddings)

    @embedding_model_setup
    @staticmethod
    def embedder() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=BaseEmbeddingModelSetup, connection="embeddings", model="counting-v1")

    @action(InputEvent)
    @staticmethod
    async def embed(event: Event, ctx: Any) -> None:
        await embed_async(event, ctx)


def test_decorated_embedding_resources_are_in_the_plan_and_journaled() -> None:
    plan = AgentPlan.from_agent(DecoratedEmbeddingAgent())
    assert plan.has_resource("embeddings", ResourceType.EMBEDDING_MODEL_CONNECTION)
    assert plan.has_resource("embedder", ResourceType.EMBEDDING_MODEL)
    store = InMemoryJournalStore()
    FAIL["after"] = -1
    with pytest.raises(Crash):
        run_record(DecoratedEmbeddingAgent(), store, "hello")
    assert run_record(DecoratedEmbeddingAgent(), store, "hello").outputs == [{"k": EXPECTED}]
    assert EMBEDDED == BOTH_CALLS
