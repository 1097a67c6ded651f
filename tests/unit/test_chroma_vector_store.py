"""``ChromaVectorStore`` on a real Chroma: the embedded persistent client
(a directory) and a Chroma server started on 127.0.0.1
(``tests/support/chroma_server.py``), with the hashing embedding model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from flink_agents.api.vector_stores.vector_store import Document, VectorStoreQuery
from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
    HashingEmbeddingModelConnection,
    HashingEmbeddingModelSetup,
)
from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore, chroma_where
from tests.conftest import REPO_ROOT
from tests.support.chroma_server import chroma_binary, chroma_server

chromadb = pytest.importorskip("chromadb", reason="chromadb (the 'chroma' extra) is not installed")

REVIEWS = [
    Document(content="The battery lasts two full days of heavy use", metadata={"product": "P1", "stars": 5}, id="r1"),
    Document(content="Battery died after a week, the screen cracked too", metadata={"product": "P1", "stars": 1}, id="r2"),
    Document(content="The blender crushes ice and makes smooth soup", metadata={"product": "P2", "stars": 4}, id="r3"),
    Document(content="Loud blender, the lid leaks when it runs", metadata={"product": "P2", "stars": 2}, id="r4"),
]


def _model() -> HashingEmbeddingModelSetup:
    return HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection())


def _store(**fields: Any) -> ChromaVectorStore:
    return ChromaVectorStore(embedding_model=_model(), **{"collection": "reviews", **fields})


def _copies(documents: List[Document]) -> List[Document]:
    return [d.model_copy() for d in documents]


@pytest.fixture(autouse=True)
def _no_chroma_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chroma must never compute embeddings itself (it would download an ONNX model)."""

    def refuse(self: Any, input: Any) -> Any:
        raise AssertionError("Chroma's default embedding function was called")

    monkeypatch.setattr(chromadb.api.types.DefaultEmbeddingFunction, "__call__", refuse)


def _contents(documents: List[Document]) -> List[str]:
    return [d.content for d in documents]


def check_crud(store: ChromaVectorStore) -> None:
    """add / query / get / update / delete against one store."""
    assert store.add(_copies(REVIEWS)) == ["r1", "r2", "r3", "r4"]

    found = store.query(VectorStoreQuery(query_text="battery lasts days", limit=2)).documents
    assert [d.id for d in found] == ["r1", "r2"]
    assert found[0].score is not None and found[0].score < found[1].score  # distances, closest first
    assert found[0].metadata == {"product": "P1", "stars": 5}

    filtered = store.query(VectorStoreQuery(query_text="battery", limit=5, filters={"product": "P2"})).documents
    assert sorted(d.id for d in filtered) == ["r3", "r4"]
    both = store.query(VectorStoreQuery(query_text="blender", limit=5, filters={"product": "P2", "stars": 2})).documents
    assert [d.id for d in both] == ["r4"]
    native = store.query(VectorStoreQuery(query_text="blender", limit=5, extra_args={"where": {"stars": {"$gte": 4}}}))
    assert sorted(d.id for d in native.documents) == ["r1", "r3"]

    assert _contents(store.get(ids="r3")) == [REVIEWS[2].content]
    assert sorted(d.id for d in store.get(filters={"product": "P1"})) == ["r1", "r2"]
    assert len(store.get(limit=None)) == 4

    store.update(Document(content="Battery lasts a week now after the update", metadata={"product": "P1", "stars": 4}, id="r2"))
    assert store.get(ids=["r2"])[0].metadata == {"product": "P1", "stars": 4}
    assert store.query(VectorStoreQuery(query_text="battery lasts a week", limit=1)).documents[0].id == "r2"

    store.delete(ids=["r1"])
    store.delete(filters={"product": "P2"})
    assert [d.id for d in store.get(limit=None)] == ["r2"]
    store.delete()  # no selector: every document of the collection
    assert store.get(limit=None) == []


def test_embedded_persistent_store_add_query_get_update_delete(tmp_path: Path) -> None:
    check_crud(_store(persist_directory=str(tmp_path / "db")))


def test_documents_survive_a_new_client_on_the_same_directory(tmp_path: Path) -> None:
    directory = str(tmp_path / "db")
    first = _store(persist_directory=directory)
    first.add(_copies(REVIEWS))
    ids = first.add([Document(content="no id given", metadata={"product": "P3"})])
    assert len(ids) == 1 and ids[0] not in {"r1", "r2", "r3", "r4"}
    first.close()
    again = _store(persist_directory=directory)
    assert again.query(VectorStoreQuery(query_text="smooth soup", limit=1)).documents[0].id == "r3"
    # A new process (one at a time: Chroma's limit for an embedded directory) reads them too.
    script = (
        "import json; from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore; "
        f"print(json.dumps(sorted(d.id for d in ChromaVectorStore(collection='reviews', persist_directory={directory!r}).get(limit=None))))"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == sorted(["r1", "r2", "r3", "r4", ids[0]])


def test_add_is_an_upsert_so_a_repeated_add_leaves_one_copy(tmp_path: Path) -> None:
    store = _store(persist_directory=str(tmp_path / "db"))
    store.add(_copies(REVIEWS[:2]))
    store.add([Document(content="changed text", metadata={"product": "P1"}, id="r1")])
    assert sorted((d.id, d.content) for d in store.get(limit=None)) == [("r1", "changed text"), ("r2", REVIEWS[1].content)]


def test_collections_are_created_on_use_and_can_be_managed(tmp_path: Path) -> None:
    store = _store(persist_directory=str(tmp_path / "db"), collection_metadata={"hnsw:space": "cosine"})
    store.add(_copies(REVIEWS[:1]), collection_name="other_reviews")
    assert {c.name for c in store.client.list_collections()} == {"other_reviews"}
    found = store.query(VectorStoreQuery(query_text=REVIEWS[0].content, limit=1, collection_name="other_reviews"))
    assert found.documents[0].score == pytest.approx(0.0, abs=1e-5)  # cosine distance of the same text
    created = store.client.get_collection("other_reviews", embedding_function=None)
    assert created.metadata == {"hnsw:space": "cosine"}
    assert created.configuration_json["embedding_function"] is None  # Chroma never embeds for this collection
    store.create_collection_if_not_exists("empty_one")
    store.create_collection_if_not_exists("empty_one")  # exists: nothing happens
    store.delete_collection("other_reviews")
    assert {c.name for c in store.client.list_collections()} == {"empty_one"}


def test_a_missing_collection_without_auto_create_names_it(tmp_path: Path) -> None:
    store = _store(persist_directory=str(tmp_path / "db"), auto_create_collection=False)
    with pytest.raises(chromadb.errors.NotFoundError, match="reviews"):
        store.query(VectorStoreQuery(query_text="x"))


@pytest.mark.parametrize("value", [None, ["a", "b"], {"nested": 1}])
def test_metadata_chroma_refuses_is_an_error_naming_document_and_field(tmp_path: Path, value: Any) -> None:
    store = _store(persist_directory=str(tmp_path / "db"))
    documents = [Document(content="fine", metadata={"ok": 1}), Document(content="bad", metadata={"ok": 2, "tags": value})]
    with pytest.raises(ValueError, match=r"documents\[1\]\.metadata\['tags'\]"):
        store.add(documents)
    assert store.get(limit=None) == []  # nothing written


def test_large_adds_go_in_chunks_of_chromas_max_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(persist_directory=str(tmp_path / "db"))
    monkeypatch.setattr(type(store.client), "get_max_batch_size", lambda self: 3)
    batches: List[int] = []
    collection_class = type(store.client.get_or_create_collection("reviews", embedding_function=None))
    upsert = collection_class.upsert
    monkeypatch.setattr(collection_class, "upsert", lambda self, **kw: (batches.append(len(kw["ids"])), upsert(self, **kw))[1])
    ids = store.add([Document(content=f"review number {i}", id=f"d{i}") for i in range(8)])
    assert batches == [3, 3, 2]
    assert ids == [f"d{i}" for i in range(8)] and len(store.get(limit=None)) == 8


def test_filters_translate_to_chroma_where() -> None:
    assert chroma_where(None) is None
    assert chroma_where({"product": "P1"}) == {"product": "P1"}
    assert chroma_where({"product": "P1", "stars": 5}) == {"$and": [{"product": "P1"}, {"stars": 5}]}
    assert chroma_where({"product": "P1"}, {"stars": {"$gt": 3}}) == {"$and": [{"product": "P1"}, {"stars": {"$gt": 3}}]}
    with pytest.raises(NotImplementedError, match="'stars'"):
        chroma_where({"stars": {"$gt": 3}})
    with pytest.raises(ValueError, match="'product'"):
        chroma_where({"product": None})


def test_one_store_is_used_from_many_threads(tmp_path: Path) -> None:
    store = _store(persist_directory=str(tmp_path / "db"))
    errors: List[BaseException] = []

    def key_run(key: int) -> None:
        try:
            for n in range(10):
                store.add([Document(content=f"key {key} review {n}", id=f"{key}-{n}", metadata={"key": key})])
                found = store.query(VectorStoreQuery(query_text=f"key {key} review {n}", limit=1, filters={"key": key}))
                assert found.documents[0].id == f"{key}-{n}"
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=key_run, args=(key,)) for key in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.get(limit=None)) == 60


def test_stores_of_several_subtasks_open_one_directory_at_once(tmp_path: Path) -> None:
    """Subtasks of one Python worker (thread mode) each build their own store
    and open the same directory at the same moment; chromadb's client
    creation is not thread-safe, so the store serializes it per process."""
    for attempt in range(3):  # the race, unguarded, failed 3 of 3 runs of 4 threads
        stores = [_store(persist_directory=str(tmp_path / f"db{attempt}")) for _ in range(4)]
        barrier = threading.Barrier(len(stores))
        errors: List[BaseException] = []

        def open_and_count(store: ChromaVectorStore) -> None:
            barrier.wait()
            try:
                store.add([Document(content="a review", id="r1")])
                assert store.get(ids=["r1"])[0].content == "a review"
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=open_and_count, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], f"attempt {attempt}: {errors!r}"


# -- a Chroma server --------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if chroma_binary() is None:
        pytest.skip("the 'chroma' server CLI (installed with chromadb) is absent")
    with chroma_server(tmp_path_factory.mktemp("chroma") / "data") as running:
        yield running


def test_http_server_store_add_query_get_update_delete(server: Any) -> None:
    check_crud(_store(host=server.host, port=server.port, api_key="test-token"))


def test_two_clients_of_one_server_see_each_others_documents(server: Any) -> None:
    writer = _store(host=server.host, port=server.port, collection="shared_reviews")
    reader = _store(host=server.host, port=server.port, collection="shared_reviews")
    writer.add(_copies(REVIEWS))
    assert reader.query(VectorStoreQuery(query_text="lid leaks", limit=1)).documents[0].id == "r4"
    assert reader.client is not writer.client


def test_the_api_key_and_settings_headers_reach_the_server() -> None:
    """A stub HTTP server records the headers of the client's first request."""
    import http.server

    seen: List[dict] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(dict(self.headers))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        settings = chromadb.config.Settings(chroma_server_headers={"X-Team": "reviews"})
        store = _store(host="127.0.0.1", port=stub.server_address[1], api_key="secret-token", client_settings=settings)
        # The stub answers 500 to the client's first request (its identity
        # check while connecting), which chromadb reports as a ValueError.
        with pytest.raises(ValueError):
            store.query(VectorStoreQuery(query_text="x"))
    finally:
        stub.shutdown()
        stub.server_close()
    assert seen, "the client sent no request"
    headers = {k.lower(): v for k, v in seen[0].items()}
    assert headers["x-chroma-token"] == "secret-token" and headers["x-team"] == "reviews"
