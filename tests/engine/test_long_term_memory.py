"""Long-term memory (``ctx.long_term_memory``) over a vector store of the agent.

An agent remembers facts about a product (the key) across records, sees only
its own key's facts, gets the same ids when a write runs again, and a replay
after a crash returns what the first run got without writing again. The
store is a small in-process vector store that counts its writes and keeps
its documents in a module-level dict (an external database: it outlives an
engine); the embedding is the deterministic hashing embedding.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import datetime, timezone
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.memory.long_term_memory import LongTermMemoryOptions, MemorySetItem
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.vector_stores.vector_store import CollectionManageableVectorStore, Document
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import ActionFailed
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record
from tests.support import host_runs

COLLECTIONS: Dict[str, Dict[str, Document]] = {}  # the "external" store's data
WRITES: List[str] = []  # every add/update/delete that reached the store
FAIL: Dict[str, Any] = {"after_write": False}
CONFIG = {LongTermMemoryOptions.VECTOR_STORE.key: "memory_store"}
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class Crash(BaseException):
    """A simulated process crash (not an Exception: nothing catches it)."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    COLLECTIONS.clear()
    WRITES.clear()
    FAIL.update(after_write=False)


def _cosine_distance(a: List[float], b: List[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return 1.0 - (dot / norm if norm else 0.0)


def _matches(document: Document, filters: Dict[str, Any] | None) -> bool:
    return all(document.metadata.get(k) == v for k, v in (filters or {}).items())


class CountingVectorStore(CollectionManageableVectorStore):
    """Documents in ``COLLECTIONS``; every write logged in ``WRITES``."""

    @property
    def store_kwargs(self) -> Dict[str, Any]:
        return {}

    def create_collection_if_not_exists(self, name: str, **kwargs: Any) -> None:
        COLLECTIONS.setdefault(name, {})

    def delete_collection(self, name: str) -> None:
        COLLECTIONS.pop(name, None)

    def _docs(self, collection_name: str | None) -> Dict[str, Document]:
        return COLLECTIONS[collection_name or "default"]

    def get(self, ids=None, collection_name=None, filters=None, limit=100, **kwargs: Any) -> List[Document]:
        docs = self._docs(collection_name)
        found = [docs[i] for i in ids if i in docs] if ids is not None else [d for d in docs.values() if _matches(d, filters)]
        return [d.model_copy(deep=True) for d in (found if limit is None or ids is not None else found[:limit])]

    def delete(self, ids=None, collection_name=None, filters=None, **kwargs: Any) -> None:
        docs = self._docs(collection_name)
        doomed = [i for i in (ids if ids is not None else list(docs)) if i in docs and _matches(docs[i], filters)]
        WRITES.append(f"delete {len(doomed)}")
        for i in doomed:
            del docs[i]

    def _query_embedding(self, embedding, limit=10, collection_name=None, filters=None, **kwargs: Any) -> List[Document]:
        scored = [d.model_copy(update={"score": _cosine_distance(embedding, d.embedding)})
                  for d in self._docs(collection_name).values() if _matches(d, filters)]
        return sorted(scored, key=lambda d: (d.score, d.id))[:limit]

    def _add_embedding(self, *, documents: List[Document], collection_name=None, **kwargs: Any) -> List[str]:
        docs = self._docs(collection_name)
        for d in documents:
            if d.id in docs:
                raise AssertionError(f"duplicate add of {d.id}")  # the memory must update instead
            docs[d.id] = d.model_copy(deep=True)
        WRITES.append(f"add {len(documents)}")
        if FAIL["after_write"]:
            FAIL["after_write"] = False
            raise Crash("process died after the store write, before the journal write")
        return [d.id for d in documents]

    def _update_embedding(self, *, documents: List[Document], collection_name=None, **kwargs: Any) -> None:
        docs = self._docs(collection_name)
        for d in documents:
            docs[d.id] = d.model_copy(deep=True)
        WRITES.append(f"update {len(documents)}")


def _item(item: MemorySetItem) -> Dict[str, Any]:
    return {"id": item.id, "value": item.value, "meta": item.additional_metadata,
            "created_at": item.created_at, "updated_at": item.updated_at}


def remember(event: Event, ctx: Any) -> None:
    """Record ``{"fact": ..., "question": ...}``: remember the fact (if any),
    then answer the question from what the product's memory holds."""
    record = event.input
    facts = ctx.long_term_memory.get_memory_set("product_facts")
    ids = facts.add(record["fact"], metadatas={"source": record.get("source", "review")}) if record.get("fact") else []
    if FAIL.get("crash_after_add"):
        ctx.durable_execute(_crash_once)
    found = facts.search(record["question"], limit=record.get("limit", 3)) if record.get("question") else []
    if record.get("get_ids"):
        found = facts.get(ids=record["get_ids"])
    ctx.send_event(OutputEvent(output={"ids": ids, "found": [_item(i) for i in found]}))


async def remember_async(event: Event, ctx: Any) -> None:
    """``remember`` in an async action (the memory's calls are synchronous there too)."""
    remember(event, ctx)


def _crash_once() -> None:
    if FAIL.pop("crash_after_add"):
        raise Crash("process died after the journaled add")


def memory_agent(fn: Any = remember) -> Agent:
    agent = Agent()
    agent.add_resource("hashing", ResourceType.EMBEDDING_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_CONNECTION, dimensions=1024))
    agent.add_resource("embedder", ResourceType.EMBEDDING_MODEL,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_SETUP, connection="hashing"))
    agent.add_resource("memory_store", ResourceType.VECTOR_STORE,
                       ResourceDescriptor(clazz=CountingVectorStore, embedding_model="embedder"))
    agent.add_action("remember", [InputEvent], fn)
    return agent


def _values(output: Dict[str, Any]) -> List[str]:
    return [found["value"] for found in output["found"]]


def _run_many(agent: Agent, store: InMemoryJournalStore, records: List[tuple], config: Dict[str, Any] = CONFIG,
              now_ms: int = T0_MS) -> LocalDriver:
    """Records ``(key, value)`` in order through one engine (one keyed
    state), its clock stopped at ``now_ms``."""
    engine = AgentEngine(AgentPlan.from_agent(agent), dict(config), job_id="job", store=store, clock=lambda: now_ms / 1000)
    driver = LocalDriver()
    try:
        for key, value in records:
            host_runs.process(engine, driver, key, value)
    finally:
        engine.close()
    return driver


def test_an_agent_remembers_a_products_facts_across_records_and_not_another_products() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().set(LongTermMemoryOptions.VECTOR_STORE, "memory_store")
    records = [
        {"key": "kettle", "value": {"fact": "the kettle lid cracks after a month"}},
        {"key": "blender", "value": {"fact": "the blender is very loud"}},
        {"key": "kettle", "value": {"fact": "the kettle boils water in two minutes"}},
        {"key": "kettle", "value": {"question": "does the kettle lid crack", "limit": 5}},
        {"key": "blender", "value": {"question": "is the blender loud", "limit": 5}},
    ]
    out = env.from_list(records).apply(memory_agent()).to_list()
    env.execute()
    last = {key: output for record in out for key, output in record.items()}  # each key's question comes last
    kettle, blender = last["kettle"], last["blender"]
    assert _values(kettle) == ["the kettle lid cracks after a month", "the kettle boils water in two minutes"]
    assert _values(blender) == ["the blender is very loud"]
    assert kettle["found"][0]["meta"] == {"source": "review"}
    first_kettle_fact = next(r["kettle"] for r in out if "kettle" in r)
    assert kettle["found"][0]["id"] == first_kettle_fact["ids"][0]
    assert sorted(COLLECTIONS) == ["ltm_product_facts"]  # one collection per set, keys apart by metadata
    assert WRITES == ["add 1"] * 3


def test_search_ranks_by_the_embedding_and_honours_limit_and_filters() -> None:
    def search(event: Event, ctx: Any) -> None:
        facts = ctx.long_term_memory.get_memory_set("facts")
        facts.add(["red paint peels", "battery lasts ten hours", "battery charges slowly"],
                  metadatas=[{"topic": "paint"}, {"topic": "battery"}, {"topic": "battery"}])
        ranked = [i.value for i in facts.search("how many hours the battery lasts", limit=2)]
        filtered = [i.value for i in facts.search("paint", limit=3, filters={"topic": "battery"})]
        listed = [i.value for i in facts.get(filters={"topic": "battery"}, limit=10)]
        ctx.send_event(OutputEvent(output={"ranked": ranked, "filtered": filtered, "listed": listed}))

    out = run_record(memory_agent(search), InMemoryJournalStore(), "x", config=CONFIG).outputs[0]["k"]
    assert out["ranked"] == ["battery lasts ten hours", "battery charges slowly"]
    assert sorted(out["filtered"]) == ["battery charges slowly", "battery lasts ten hours"]
    assert sorted(out["listed"]) == ["battery charges slowly", "battery lasts ten hours"]


def test_ids_are_deterministic_and_timestamps_come_from_the_runtime_clock() -> None:
    first = _run_many(memory_agent(), InMemoryJournalStore(), [("kettle", {"fact": "a", "question": "a"})]).outputs
    ids = first[0]["kettle"]["ids"]
    COLLECTIONS.clear()
    again = _run_many(memory_agent(), InMemoryJournalStore(), [("kettle", {"fact": "a", "question": "a"})]).outputs
    assert again[0]["kettle"]["ids"] == ids  # same record identity and call position: same id
    other_key = _run_many(memory_agent(), InMemoryJournalStore(), [("blender", {"fact": "a"})]).outputs
    assert other_key[0]["blender"]["ids"] != ids
    item = first[0]["kettle"]["found"][0]
    assert item["created_at"] == item["updated_at"] == datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("fn", [remember, remember_async], ids=["sync", "async"])
def test_a_crash_after_the_journaled_add_replays_it_without_writing_again(fn: Any) -> None:
    journal = InMemoryJournalStore()
    FAIL["crash_after_add"] = True
    with pytest.raises(Crash):
        run_record(memory_agent(fn), journal, {"fact": "ships in recycled packaging", "question": "packaging"}, config=CONFIG)
    assert WRITES == ["add 1"]
    recovered = run_record(memory_agent(fn), journal, {"fact": "ships in recycled packaging", "question": "packaging"}, config=CONFIG)
    assert WRITES == ["add 1"]  # replayed: the store saw no second write
    out = recovered.outputs[0]["k"]
    assert _values(out) == ["ships in recycled packaging"]
    assert out["ids"] == [out["found"][0]["id"]]
    entries = sorted(e.function_id for run in journal._runs.values() for (e, _) in run.values() if e.function_id.startswith("ltm:"))
    assert entries == ["ltm:product_facts.add", "ltm:product_facts.search"]


def test_a_write_whose_journal_entry_a_crash_lost_runs_again_as_an_overwrite() -> None:
    journal = InMemoryJournalStore()
    FAIL["after_write"] = True
    with pytest.raises(Crash):
        _run_many(memory_agent(), journal, [("k", {"fact": "ships in recycled packaging", "question": "ships"})])
    recovered = _run_many(memory_agent(), journal, [("k", {"fact": "ships in recycled packaging", "question": "ships"})],
                          now_ms=T0_MS + 60_000)
    assert WRITES == ["add 1", "update 1"]  # the same id again: no duplicate
    assert len(COLLECTIONS["ltm_product_facts"]) == 1
    (item,) = recovered.outputs[0]["k"]["found"]
    assert item["value"] == "ships in recycled packaging"
    assert item["created_at"] == datetime(2026, 1, 1, tzinfo=timezone.utc)  # the first write's
    assert item["updated_at"] == datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)


def test_get_delete_and_delete_memory_set_stay_within_the_key() -> None:
    def write(event: Event, ctx: Any) -> None:
        ctx.send_event(OutputEvent(output=ctx.long_term_memory.get_memory_set("notes").add(["one", "two"])))

    def manage(event: Event, ctx: Any) -> None:
        ltm = ctx.long_term_memory
        notes = ltm.get_memory_set("notes")
        other = event.input  # the other key's ids
        before = [i.value for i in notes.get()]
        foreign = notes.get(ids=other)
        notes.delete(ids=other)  # not this key's: left alone
        mine = notes.get()
        notes.delete(ids=[mine[0].id])
        after_one = [i.value for i in notes.get()]
        existed, again = ltm.delete_memory_set("notes"), ltm.delete_memory_set("notes")
        ctx.send_event(OutputEvent(output={"before": before, "foreign": len(foreign), "after_one": after_one,
                                           "existed": existed, "again": again, "left": [i.value for i in notes.get()]}))

    journal = InMemoryJournalStore()
    driver = _run_many(memory_agent(write), journal, [("a", None), ("b", None)])
    b_ids = driver.outputs[1]["b"]
    out = _run_many(memory_agent(manage), InMemoryJournalStore(), [("a", b_ids)]).outputs[0]["a"]
    assert out == {"before": ["one", "two"], "foreign": 0, "after_one": ["two"], "existed": True, "again": False, "left": []}
    assert sorted(d.content for d in COLLECTIONS["ltm_notes"].values()) == ["one", "two"]  # b's items untouched


def _failure(fn: Any, config: Dict[str, Any] = CONFIG) -> str:
    with pytest.raises(ActionFailed) as failed:
        run_record(memory_agent(fn), InMemoryJournalStore(), "x", config=config)
    return str(failed.value.__cause__ or failed.value)


def test_without_the_option_the_error_names_it_with_an_example() -> None:
    message = _failure(lambda e, ctx: ctx.long_term_memory, config={})
    assert "long-term-memory.vector-store" in message and "'memory_store'" in message


def test_an_unknown_store_is_named_with_the_known_ones() -> None:
    message = _failure(lambda e, ctx: ctx.long_term_memory, config={LongTermMemoryOptions.VECTOR_STORE.key: "nope"})
    assert "'nope'" in message and "['memory_store']" in message


@pytest.mark.parametrize("name", ["", "a..b", "-x", "x" * 60, "has space", "ümlaut", 7])
def test_a_bad_set_name_is_refused(name: Any) -> None:
    assert "memory set name" in _failure(lambda e, ctx: ctx.long_term_memory.get_memory_set(name))


def test_metadatas_of_another_length_and_reserved_keys_are_refused() -> None:
    mismatch = _failure(lambda e, ctx: ctx.long_term_memory.get_memory_set("s").add(["a", "b"], metadatas=[{}]))
    assert "metadatas has 1 dicts for 2 memory items" in mismatch
    reserved = _failure(lambda e, ctx: ctx.long_term_memory.get_memory_set("s").add("a", metadatas={"ltm_scope": "x"}))
    assert "'ltm_scope'" in reserved
    assert WRITES == []


def test_a_memory_set_used_after_its_action_returned_is_refused() -> None:
    kept: List[Any] = []

    def keep(event: Event, ctx: Any) -> None:
        kept.append(ctx.long_term_memory.get_memory_set("facts"))

    run_record(memory_agent(keep), InMemoryJournalStore(), "x", config=CONFIG)
    with pytest.raises(RuntimeError, match="after action 'remember' returned"):
        kept[0].add("too late")
    assert WRITES == []


def test_jobs_with_different_job_identifiers_do_not_see_each_others_items() -> None:
    first = _run_many(memory_agent(), InMemoryJournalStore(), [("kettle", {"fact": "from job one"})],
                      config={**CONFIG, "job-identifier": "one"})
    assert first.outputs[0]["kettle"]["ids"]
    second = _run_many(memory_agent(), InMemoryJournalStore(), [("kettle", {"question": "job one", "limit": 3})],
                       config={**CONFIG, "job-identifier": "two"})
    assert second.outputs[0]["kettle"]["found"] == []


def test_on_a_persistent_chroma_store_the_memory_outlives_the_engine(tmp_path: Any) -> None:
    pytest.importorskip("chromadb")

    def chroma_agent() -> Agent:
        agent = memory_agent()
        agent.resources[ResourceType.VECTOR_STORE].pop("memory_store")
        agent.add_resource("memory_store", ResourceType.VECTOR_STORE, ResourceDescriptor(
            clazz=ResourceName.VectorStore.CHROMA_VECTOR_STORE, embedding_model="embedder",
            persist_directory=str(tmp_path / "chroma"),
        ))
        return agent

    journal = InMemoryJournalStore()
    first = _run_many(chroma_agent(), journal, [
        ("kettle", {"fact": "the kettle lid cracks after a month"}),
        ("blender", {"fact": "the blender is very loud"}),
        ("kettle", {"fact": "the kettle boils water in two minutes"}),
    ])
    # A new engine and keyed state (a restart without state): new records,
    # the memory is the store's.
    # The same record identity (key, seq 0) as the first fact: other text, so
    # another id, and the old fact stays.
    later = _run_many(chroma_agent(), InMemoryJournalStore(), [
        ("kettle", {"fact": "the kettle whistles", "question": "does the kettle lid crack after a month", "limit": 5}),
    ])
    found = later.outputs[0]["kettle"]["found"]
    assert found[0]["value"] == "the kettle lid cracks after a month"
    assert sorted(f["value"] for f in found) == [
        "the kettle boils water in two minutes", "the kettle lid cracks after a month", "the kettle whistles",
    ]
    assert found[0]["id"] == first.outputs[0]["kettle"]["ids"][0]
    assert found[0]["created_at"] == datetime(2026, 1, 1, tzinfo=timezone.utc)


# --- Mem0 (the mem0 extra), over the scripted OpenAI server ---------------------------

MEM0_CONFIG = {
    LongTermMemoryOptions.Mem0.CHAT_MODEL_SETUP.key: "extractor",
    LongTermMemoryOptions.Mem0.EMBEDDING_MODEL_SETUP.key: "embedder",
    LongTermMemoryOptions.Mem0.VECTOR_STORE.key: "memory_store",
}


def _extracted(*facts: str) -> Dict[str, Any]:
    """The scripted model's reply to Mem0's fact extraction."""
    return {"role": "assistant", "content": json.dumps({"memory": [{"text": fact} for fact in facts]})}


def mem0_agent(base_url: str, fn: Any = remember) -> Agent:
    agent = memory_agent(fn)
    agent.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=base_url, api_key="test", max_retries=0,
    ))
    agent.add_resource("extractor", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP, connection="openai", model="scripted",
    ))
    return agent


def test_mem0_remembers_extracted_facts_per_key_and_replays_without_asking_again(scripted_chat_server: Any) -> None:
    pytest.importorskip("mem0")
    scripted_chat_server.replies.extend([
        _extracted("Kettle lid cracks after a month"),
        _extracted("Blender is very loud"),
    ])
    journal = InMemoryJournalStore()
    base = scripted_chat_server.base_url
    driver = _run_many(mem0_agent(base), journal, [
        ("kettle", {"fact": "my kettle's lid cracked after a month, sadly", "source": "review 1"}),
        ("blender", {"fact": "the blender is so loud"}),
        ("kettle", {"question": "does the kettle lid crack", "limit": 5}),
    ], config=MEM0_CONFIG)
    kettle_add, blender_add, kettle_question = (next(iter(o.values())) for o in driver.outputs)
    assert len(kettle_add["ids"]) == 1 and len(blender_add["ids"]) == 1
    assert [(f["id"], f["value"]) for f in kettle_question["found"]] == [
        (kettle_add["ids"][0], "Kettle lid cracks after a month"),
    ]
    assert kettle_question["found"][0]["meta"] == {"source": "review 1"}
    assert len(scripted_chat_server.requests) == 2  # one extraction per add; search asks no model
    # The first record again from its journal (a restore to before it): the
    # recorded ids, no model request, no write.
    writes = list(WRITES)
    again = _run_many(mem0_agent(base), journal, [("kettle", {"fact": "my kettle's lid cracked after a month, sadly",
                                                              "source": "review 1"})], config=MEM0_CONFIG)
    assert again.outputs[0]["kettle"]["ids"] == kettle_add["ids"]
    assert len(scripted_chat_server.requests) == 2 and WRITES == writes
    # By id: the key's own item, not another key's.
    by_id = _run_many(mem0_agent(base), InMemoryJournalStore(), [
        ("kettle", {"get_ids": [blender_add["ids"][0], kettle_add["ids"][0]]}),
    ], config=MEM0_CONFIG)
    assert _values(by_id.outputs[0]["kettle"]) == ["Kettle lid cracks after a month"]


def test_mem0_options_must_come_together() -> None:
    message = _failure(lambda e, ctx: ctx.long_term_memory,
                       config={LongTermMemoryOptions.Mem0.CHAT_MODEL_SETUP.key: "extractor"})
    assert "long-term-memory.mem0.embedding-model-setup" in message and "long-term-memory.mem0.vector-store" in message
