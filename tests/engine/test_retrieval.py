"""Context retrieval and journaled vector store calls on the engine.

The built-in retrieval action answers a ``ContextRetrievalRequestEvent``
with one journaled query; an action's ``ctx.get_resource(name,
VECTOR_STORE)`` calls are journaled one by one. After a crash the replay
returns what was journaled: no second query, no second add; an add that ran
but whose journal entry was lost writes the same ids again (an upsert), not
a second copy. The store is a real Chroma directory, wrapped to count (and
crash) the calls that reach it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent,
    ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.vector_stores.vector_store import Document, VectorStoreQuery
from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.execution.journaled_vector_store import JournaledVectorStore
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record

pytest.importorskip("chromadb", reason="chromadb (the 'chroma' extra) is not installed")

CALLS: Dict[str, int] = {"query": 0, "add": 0, "other": 0}
CRASH: Dict[str, Any] = {"after_add_write": False, "after": False}
QUERY_THREADS: List[str] = []


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing catches it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.update(query=0, add=0, other=0)
    CRASH.update(after_add_write=False, after=False)
    QUERY_THREADS.clear()


class CountingChroma(ChromaVectorStore):
    """A Chroma store that counts the queries and adds reaching it, and can
    crash right after an add has written (before its journal entry exists)."""

    def _query_embedding(self, embedding: List[float], limit: int = 10, collection_name: str | None = None,
                         filters: Dict[str, Any] | None = None, **kwargs: Any) -> List[Document]:
        CALLS["query"] += 1
        QUERY_THREADS.append(threading.current_thread().name)
        return super()._query_embedding(embedding, limit, collection_name, filters, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> List[Document]:
        CALLS["other"] += 1
        return super().get(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        CALLS["other"] += 1
        super().delete(*args, **kwargs)

    def _update_embedding(self, **kwargs: Any) -> None:
        CALLS["other"] += 1
        super()._update_embedding(**kwargs)

    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        CALLS["other"] += 1
        super().create_collection_if_not_exists(name, **kwargs)

    def delete_collection(self, name: str) -> None:
        CALLS["other"] += 1
        super().delete_collection(name)

    def _add_embedding(self, *, documents: List[Document], collection_name: str | None = None, **kwargs: Any) -> List[str]:
        CALLS["add"] += 1
        ids = super()._add_embedding(documents=documents, collection_name=collection_name, **kwargs)
        if CRASH["after_add_write"]:
            CRASH["after_add_write"] = False
            raise Crash("process died after the store wrote, before the journal did")
        return ids


REVIEWS = [
    Document(content="The battery lasts two full days", metadata={"product": "P1"}, id="r1"),
    Document(content="Battery died after one week", metadata={"product": "P1"}, id="r2"),
    Document(content="The battery of this blender pack is fine", metadata={"product": "P2"}, id="r3"),
]


def _agent(directory: Path, *actions: tuple) -> Agent:
    agent = Agent()
    agent.add_resource("hashing", ResourceType.EMBEDDING_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_CONNECTION))
    agent.add_resource("embedder", ResourceType.EMBEDDING_MODEL,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_SETUP, connection="hashing"))
    agent.add_resource("reviews", ResourceType.VECTOR_STORE, ResourceDescriptor(
        clazz=CountingChroma, embedding_model="embedder", persist_directory=str(directory), collection="reviews"))
    for name, events, fn in actions:
        agent.add_action(name, events, fn)
    return agent


def _filled(tmp_path: Path) -> Path:
    directory = tmp_path / "chroma"
    ChromaVectorStore(embedding_model=None, persist_directory=str(directory), collection="reviews").add(
        [Document(content=d.content, metadata=d.metadata, id=d.id,
                  embedding=_hashing().embed(d.content)) for d in REVIEWS])
    return directory


def _hashing() -> Any:
    from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
        HashingEmbeddingModelConnection,
        HashingEmbeddingModelSetup,
    )

    return HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection())


def _journal_functions(store: InMemoryJournalStore) -> List[str]:
    return sorted(entry.function_id for run in store._runs.values() for (entry, _) in run.values()
                  if entry.function_id.startswith("vector_store:"))


# -- the built-in retrieval action ------------------------------------------------


def after_calls() -> None:
    """The journaled call after the store calls; crashes once when asked."""
    if CRASH["after"]:
        CRASH["after"] = False
        raise Crash("process died after the store calls were journaled")


def ask(event: Event, ctx: Any) -> None:
    question = event.input
    ctx.send_event(ContextRetrievalRequestEvent(question["q"], question.get("store", "reviews"), max_results=2,
                                                filters=question.get("filters")))


def answer(event: Event, ctx: Any) -> None:
    ctx.durable_execute(after_calls)  # commits what is journaled before it runs (crashes when asked)
    response = ContextRetrievalResponseEvent.from_event(event)
    ctx.send_event(OutputEvent(output={
        "query": response.query,
        "ids": [d.id for d in response.documents],
        "scored": all(d.score is not None for d in response.documents),
    }))


def retrieval_agent(directory: Path) -> Agent:
    return _agent(directory, ("ask", [InputEvent], ask), ("answer", [ContextRetrievalResponseEvent], answer))


def test_the_retrieval_action_answers_with_the_closest_documents(tmp_path: Path) -> None:
    agent = retrieval_agent(_filled(tmp_path))
    driver = run_record(agent, InMemoryJournalStore(), {"q": "how long does the battery last"})
    assert driver.outputs == [{"k": {"query": "how long does the battery last", "ids": ["r1", "r2"], "scored": True}}]
    filtered = run_record(agent, InMemoryJournalStore(), {"q": "battery", "filters": {"product": "P2"}})
    assert filtered.outputs[0]["k"]["ids"] == ["r3"]
    assert QUERY_THREADS and threading.main_thread().name not in QUERY_THREADS  # off the event loop's thread


def test_a_crash_after_the_retrieval_replays_without_querying_again(tmp_path: Path) -> None:
    directory, store = _filled(tmp_path), InMemoryJournalStore()
    CRASH["after"] = True
    with pytest.raises(Crash):
        run_record(retrieval_agent(directory), store, {"q": "battery lasts"})
    assert CALLS["query"] == 1
    recovered = run_record(retrieval_agent(directory), store, {"q": "battery lasts"})  # a restore to before the record
    assert recovered.outputs == [{"k": {"query": "battery lasts", "ids": ["r1", "r2"], "scored": True}}]
    assert CALLS["query"] == 1  # the journaled documents came back
    assert _journal_functions(store) == ["vector_store:reviews.query"]


def test_a_request_for_an_unknown_store_names_it(tmp_path: Path) -> None:
    with pytest.raises(ActionFailed, match="vector store 'no_such_store'.*known: \\['reviews'\\]"):
        run_record(retrieval_agent(_filled(tmp_path)), InMemoryJournalStore(), {"q": "x", "store": "no_such_store"})
    with pytest.raises(ActionFailed, match="vector store 'embedder'"):  # a resource, but not a vector store
        run_record(retrieval_agent(_filled(tmp_path)), InMemoryJournalStore(), {"q": "x", "store": "embedder"})
    assert CALLS["query"] == 0


# -- the journaled store in an action ------------------------------------------------


async def write_and_read_async(event: Event, ctx: Any) -> None:
    store = ctx.get_resource("reviews", ResourceType.VECTOR_STORE)
    ids = await store.aadd([Document(content=text, metadata={"n": n}) for n, text in enumerate(event.input)])
    found = await store.aquery(VectorStoreQuery(query_text=event.input[0], limit=1))
    await ctx.durable_execute_async(after_calls)
    ctx.send_event(OutputEvent(output={"ids": ids, "top": found.documents[0].id,
                                       "journaled": isinstance(store, JournaledVectorStore)}))


def write_and_read_sync(event: Event, ctx: Any) -> None:
    store = ctx.get_resource("reviews", ResourceType.VECTOR_STORE)
    ids = store.add([Document(content=text, metadata={"n": n}) for n, text in enumerate(event.input)])
    found = store.query(VectorStoreQuery(query_text=event.input[0], limit=1))
    ctx.durable_execute(after_calls)
    ctx.send_event(OutputEvent(output={"ids": ids, "top": found.documents[0].id,
                                       "journaled": isinstance(store, JournaledVectorStore)}))


TEXTS = ["the lid leaks when blending soup", "the motor is loud but strong"]


@pytest.mark.parametrize("fn", [write_and_read_async, write_and_read_sync], ids=["async", "sync"])
def test_a_crash_after_journaled_store_calls_replays_them_without_touching_the_store(fn: Any, tmp_path: Path) -> None:
    agent, store = _agent(tmp_path / "db", ("write", [InputEvent], fn)), InMemoryJournalStore()
    CRASH["after"] = True
    with pytest.raises(Crash):
        run_record(agent, store, TEXTS)
    assert CALLS == {"query": 1, "add": 1, "other": 0}
    recovered = run_record(_agent(tmp_path / "db", ("write", [InputEvent], fn)), store, TEXTS)
    output = recovered.outputs[0]["k"]
    assert CALLS == {"query": 1, "add": 1, "other": 0}  # neither the query nor the add ran again
    assert output["journaled"] is True and output["top"] == output["ids"][0]
    assert len(ChromaVectorStore(persist_directory=str(tmp_path / "db"), collection="reviews").get(limit=None)) == 2
    assert _journal_functions(store) == ["vector_store:reviews.add", "vector_store:reviews.query"]


def test_an_add_re_executed_before_its_journal_entry_upserts_the_same_ids(tmp_path: Path) -> None:
    agent, store = _agent(tmp_path / "db", ("write", [InputEvent], write_and_read_async)), InMemoryJournalStore()
    CRASH["after_add_write"] = True
    with pytest.raises(Crash):
        run_record(agent, store, TEXTS)
    written = sorted(d.id for d in ChromaVectorStore(persist_directory=str(tmp_path / "db"), collection="reviews").get(limit=None))
    assert len(written) == 2
    recovered = run_record(_agent(tmp_path / "db", ("write", [InputEvent], write_and_read_async)), store, TEXTS)
    assert CALLS["add"] == 2  # the add ran again (its journal entry was lost) ...
    after = ChromaVectorStore(persist_directory=str(tmp_path / "db"), collection="reviews").get(limit=None)
    assert sorted(d.id for d in after) == written  # ... with the same ids: no duplicate
    assert sorted(recovered.outputs[0]["k"]["ids"]) == written


def test_derived_ids_differ_per_record_and_per_add(tmp_path: Path) -> None:
    async def two_adds(event: Event, ctx: Any) -> None:
        store = ctx.get_resource("reviews", ResourceType.VECTOR_STORE)
        first = await store.aadd(Document(content=event.input))
        second = store.add([Document(content=event.input), Document(content="given", id="mine")])
        ctx.send_event(OutputEvent(output=first + second))

    agent, journal = _agent(tmp_path / "db", ("write", [InputEvent], two_adds)), InMemoryJournalStore()
    first_record = run_record(agent, journal, "same text").outputs[0]["k"]
    second_record = run_record(agent, journal, "same text", key="other").outputs[0]["other"]
    assert first_record[2] == "mine" and len(set(first_record)) == 3
    assert not set(first_record[:2]) & set(second_record[:2])
    assert len(ChromaVectorStore(persist_directory=str(tmp_path / "db"), collection="reviews").get(limit=None)) == 5


async def write_and_read_other_texts(event: Event, ctx: Any) -> None:
    """``write_and_read_async`` changed: it writes other text for the same record."""
    event.input = ["other", "texts"]
    await write_and_read_async(event, ctx)


def test_a_replay_that_queries_other_text_is_refused(tmp_path: Path) -> None:
    store = InMemoryJournalStore()
    CRASH["after"] = True
    with pytest.raises(Crash):
        run_record(_agent(tmp_path / "db", ("write", [InputEvent], write_and_read_async)), store, TEXTS)
    # The same record (another one fails earlier, on its input digest: tests/engine/test_journal_isolation.py).
    with pytest.raises(ActionFailed, match="vector_store:reviews.add"):
        run_record(_agent(tmp_path / "db", ("write", [InputEvent], write_and_read_other_texts)), store, TEXTS)


async def manage(event: Event, ctx: Any) -> None:
    store = ctx.get_resource("reviews", ResourceType.VECTOR_STORE)
    await store.acreate_collection_if_not_exists("archive")
    store.add(Document(content="old review", id="a1"), collection_name="archive")
    await store.aupdate(Document(content="old review, edited", id="a1"), collection_name="archive")
    kept = [d.content for d in await store.aget(ids="a1", collection_name="archive")]
    store.delete(ids="a1", collection_name="archive")
    left = store.get(collection_name="archive")
    await store.adelete_collection("archive")
    await ctx.durable_execute_async(after_calls)
    ctx.send_event(OutputEvent(output={"kept": kept, "left": len(left)}))


def test_every_store_call_is_journaled_and_replayed(tmp_path: Path) -> None:
    journal = InMemoryJournalStore()
    CRASH["after"] = True
    with pytest.raises(Crash):
        run_record(_agent(tmp_path / "db", ("manage", [InputEvent], manage)), journal, "x")
    assert CALLS == {"query": 0, "add": 1, "other": 6}
    recovered = run_record(_agent(tmp_path / "db", ("manage", [InputEvent], manage)), journal, "x")
    assert recovered.outputs == [{"k": {"kept": ["old review, edited"], "left": 0}}]
    assert CALLS == {"query": 0, "add": 1, "other": 6}  # the replay touched nothing
    assert _journal_functions(journal) == sorted(f"vector_store:reviews.{m}" for m in [
        "create_collection_if_not_exists", "add", "update", "get", "delete", "get", "delete_collection"])
