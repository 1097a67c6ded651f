"""``Mem0VectorStore`` over Mem0's Chroma provider (a directory), with the
hashing embedding model: documents round-trip as Mem0 payloads, ``add`` is
an upsert, a reopened store finds what an earlier instance stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flink_agents.api.vector_stores.vector_store import Document, VectorStoreQuery
from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
    HashingEmbeddingModelConnection,
    HashingEmbeddingModelSetup,
)
from flink_agents.integrations.vector_stores.mem0.mem0_vector_store import Mem0VectorStore

pytest.importorskip("mem0", reason="mem0ai (the 'mem0' extra) is not installed")


def _store(path: Path, **fields: Any) -> Mem0VectorStore:
    model = HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection())
    return Mem0VectorStore(embedding_model=model, provider="chroma", provider_config={"path": str(path)},
                           collection="reviews", **fields)


REVIEWS = [
    Document(content="The battery lasts two full days", metadata={"product": "P1"}, id="r1"),
    Document(content="The blender lid leaks soup", metadata={"product": "P2"}, id="r2"),
    Document(content="Battery died after one week", metadata={"product": "P1"}, id="r3"),
]


def test_add_query_get_update_delete(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.add([d.model_copy() for d in REVIEWS]) == ["r1", "r2", "r3"]
    found = store.query(VectorStoreQuery(query_text="battery lasts days", limit=2)).documents
    assert [d.id for d in found] == ["r1", "r3"]
    assert found[0].metadata == {"product": "P1"} and found[0].content == REVIEWS[0].content
    assert [d.id for d in store.query(VectorStoreQuery(query_text="battery", limit=3, filters={"product": "P2"})).documents] == ["r2"]
    assert sorted(d.id for d in store.get(filters={"product": "P1"})) == ["r1", "r3"]
    assert [d.content for d in store.get(ids=["r2", "missing"])] == [REVIEWS[1].content]
    store.update(Document(content="The blender lid no longer leaks", metadata={"product": "P2", "fixed": True}, id="r2"))
    assert store.get(ids="r2")[0].metadata == {"product": "P2", "fixed": True}
    store.delete(filters={"product": "P1"})
    assert [d.id for d in store.get(limit=None)] == ["r2"]
    store.delete_collection("reviews")
    assert store.get(limit=None) == []  # reopened empty


def test_add_is_an_upsert_and_a_new_instance_finds_stored_documents(tmp_path: Path) -> None:
    _store(tmp_path).add([d.model_copy() for d in REVIEWS[:2]])
    again = _store(tmp_path)  # a restarted worker: nothing added through this instance yet
    assert again.query(VectorStoreQuery(query_text="lid leaks", limit=1)).documents[0].id == "r2"
    again.add([Document(content="changed", metadata={"product": "P1"}, id="r1")])
    assert sorted((d.id, d.content) for d in again.get(limit=None)) == [("r1", "changed"), ("r2", REVIEWS[1].content)]


def test_a_data_metadata_key_is_refused_naming_the_document(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(ValueError, match=r"documents\[1\]\.metadata\['data'\]"):
        store.add([Document(content="ok"), Document(content="bad", metadata={"data": "x"})])
    assert store.get(limit=None) == []


def test_the_resource_name_points_at_the_class() -> None:
    from flink_agents.api.resource import ResourceName, get_resource_class

    module, _, name = ResourceName.VectorStore.MEM0_VECTOR_STORE.rpartition(".")
    assert get_resource_class(module, name) is Mem0VectorStore
