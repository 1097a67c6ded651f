"""The vector store base class (``api.vector_stores.vector_store``) and the
hashing embedding model (``integrations.embedding_models.local``).

The base class embeds what has no vector (documents in one batch), checks
ids and filters before a backend sees them; the hashing embedding is the
same in every process and closer for texts that share words.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, List, Sequence

import pytest

from flink_agents.api.embedding_models.embedding_model import BaseEmbeddingModelConnection, BaseEmbeddingModelSetup
from flink_agents.api.events.context_retrieval_event import ContextRetrievalRequestEvent
from flink_agents.api.resource import ResourceName, get_resource_class
from flink_agents.api.vector_stores.vector_store import (
    BaseVectorStore,
    Document,
    VectorStoreQuery,
    check_filters,
)
from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
    HashingEmbeddingModelConnection,
    HashingEmbeddingModelSetup,
    hashing_embedding,
)
from tests.conftest import REPO_ROOT


EMBEDDED: List[Any] = []  # the input of every embed call


class RecordingEmbeddings(BaseEmbeddingModelConnection):
    """Length-and-vowel vectors; records every call's input in EMBEDDED."""

    def embed(self, text: str | Sequence[str], **kwargs: Any) -> Any:
        EMBEDDED.append(text)
        vector = lambda t: [float(len(t)), float(sum(t.count(v) for v in "aeiou"))]  # noqa: E731
        return vector(text) if isinstance(text, str) else [vector(t) for t in text]


class ListStore(BaseVectorStore):
    """A backend that keeps what it was given, to see what the base class passes."""

    added: List[Document] = []
    updated: List[Document] = []
    queried: List[Dict[str, Any]] = []

    @property
    def store_kwargs(self) -> Dict[str, Any]:
        return {"setting": "from-store"}

    def get(self, ids=None, collection_name=None, filters=None, limit=100, **kwargs: Any) -> List[Document]:
        return list(self.added)

    def delete(self, ids=None, collection_name=None, filters=None, **kwargs: Any) -> None:
        self.added.clear()

    def _query_embedding(self, embedding, limit=10, collection_name=None, filters=None, **kwargs: Any) -> List[Document]:
        self.queried.append({"embedding": embedding, "limit": limit, "filters": filters, **kwargs})
        return [Document(content="found", score=0.5)]

    def _add_embedding(self, *, documents, collection_name=None, **kwargs: Any) -> List[str]:
        self.added.extend(documents)
        return [d.id or f"id{i}" for i, d in enumerate(documents)]

    def _update_embedding(self, *, documents, collection_name=None, **kwargs: Any) -> None:
        self.updated.extend(documents)


@pytest.fixture
def store() -> ListStore:
    EMBEDDED.clear()
    model = BaseEmbeddingModelSetup(connection=RecordingEmbeddings())
    return ListStore(embedding_model=model, added=[], updated=[], queried=[])


def test_add_embeds_the_documents_without_vectors_in_one_batch(store: ListStore) -> None:
    docs = [Document(content="apple"), Document(content="kiwi", embedding=[9.0, 9.0]), Document(content="banana")]
    assert store.add(docs) == ["id0", "id1", "id2"]
    assert EMBEDDED == [["apple", "banana"]]  # one batch, only those without vectors
    assert [d.embedding for d in store.added] == [[5.0, 2.0], [9.0, 9.0], [6.0, 3.0]]


def test_query_embeds_the_text_and_passes_limit_filters_and_store_settings(store: ListStore) -> None:
    result = store.query(VectorStoreQuery(query_text="pear", limit=2, filters={"p": "x"}, extra_args={"where": 1}))
    assert [d.content for d in result.documents] == ["found"]
    assert store.queried == [{"embedding": [4.0, 2.0], "limit": 2, "filters": {"p": "x"}, "setting": "from-store", "where": 1}]


def test_update_needs_documents_with_ids(store: ListStore) -> None:
    with pytest.raises(ValueError, match=r"documents\[1\] has no id"):
        store.update([Document(content="a", id="1"), Document(content="b")])
    with pytest.raises(ValueError, match="at least one"):
        store.update([])
    assert store.updated == []
    store.update(Document(content="a", id="1"))
    assert [(d.id, d.embedding) for d in store.updated] == [("1", [1.0, 1.0])]


def test_a_store_without_an_embedding_model_says_so() -> None:
    bare = ListStore(added=[], updated=[], queried=[])
    with pytest.raises(TypeError, match="has no embedding_model"):
        bare.query(VectorStoreQuery(query_text="x"))
    assert bare.add(Document(content="pre-embedded", embedding=[1.0])) == ["id0"]  # vectors given: no model needed


@pytest.mark.parametrize(
    "filters, error, match",
    [
        ({"$and": [{"a": 1}]}, NotImplementedError, r"filter key '\$and'"),
        ({"price": {"$gt": 3}}, NotImplementedError, "filter on 'price'"),
        ({"tags": ["a", "b"]}, NotImplementedError, "filter on 'tags'"),
        ([("a", 1)], TypeError, "filters must be a dict"),
    ],
)
def test_filters_outside_the_equality_dsl_are_refused_naming_the_field(filters: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        check_filters(filters)
    with pytest.raises(error, match=match):
        ContextRetrievalRequestEvent("q", "store", filters=filters)


def test_equality_filters_pass() -> None:
    assert check_filters({"product": "P1", "stars": 5, "verified": True}) == {"product": "P1", "stars": 5, "verified": True}
    assert ContextRetrievalRequestEvent("q", "store").filters is None


# -- the hashing embedding ------------------------------------------------------


def _cosine(a: List[float], b: List[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_hashing_vectors_are_unit_length_and_sized() -> None:
    setup = HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection(dimensions=64))
    vector = setup.embed("The battery lasts two days")
    assert len(vector) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0)
    assert setup.embed("  ...  ") == [0.0] * 64  # no words: the zero vector
    assert len(HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection(), dimensions=32).embed("x")) == 32


def test_hashing_similar_texts_are_closer_than_unrelated_ones() -> None:
    setup = HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection())
    question, near, far = setup.embed([
        "how long does the battery last",
        "the battery does last long, two days",
        "the pasta sauce tastes of fresh tomato",
    ])
    assert _cosine(question, near) > 0.3
    assert _cosine(question, near) > _cosine(question, far) + 0.2
    # Case and punctuation do not matter; word order within pairs does.
    assert setup.embed("Battery, LAST!") == setup.embed("battery last")
    assert setup.embed("battery last") != setup.embed("last battery")


def test_hashing_embedding_is_the_same_in_other_processes_whatever_the_hash_seed() -> None:
    texts = ["battery life", "écran fissuré après une semaine"]
    here = [hashing_embedding(t, 16) for t in texts]
    script = (
        "import json; from flink_agents.integrations.embedding_models.local.hashing_embedding_model "
        f"import hashing_embedding; print(json.dumps([hashing_embedding(t, 16) for t in {texts!r}]))"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == here


def test_hashing_refuses_unknown_settings_and_bad_batches() -> None:
    connection = HashingEmbeddingModelConnection()
    with pytest.raises(TypeError, match="temperature"):
        connection.embed("x", temperature=0.5)
    with pytest.raises(TypeError, match="#1"):
        connection.embed(["ok", 3])  # type: ignore[list-item]


def test_resource_names_point_at_the_classes() -> None:
    for path, cls in [
        (ResourceName.EmbeddingModel.HASHING_CONNECTION, HashingEmbeddingModelConnection),
        (ResourceName.EmbeddingModel.HASHING_SETUP, HashingEmbeddingModelSetup),
    ]:
        module, _, name = path.rpartition(".")
        assert get_resource_class(module, name) is cls
