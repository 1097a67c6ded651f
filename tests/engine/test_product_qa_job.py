"""The product-QA job on the engine and the local runner: answers cite only
reviews of the question's product, the retrieval is journaled, the review
index is built once, a chat model gets the reviews as untrusted data, and the
command's input errors name the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.integrations.embedding_models.local.hashing_embedding_model import (
    HashingEmbeddingModelConnection,
    HashingEmbeddingModelSetup,
)
from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore
from flink_agents.runtime.features.untrusted import unwrap_untrusted
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.jobs import product_qa
from flink_agents.jobs.product_qa import ProductQAAgent, read_questions, run_locally
from flink_agents.jobs.review_index import COLLECTION, build_review_index, extractive_answer, review_document
from tests.support.engine_runs import run_record

REPO_ROOT = Path(__file__).resolve().parents[2]

# Two products whose reviews share words: a question about one must never be
# answered from the other's reviews, even where those match it better.
KETTLE, EARBUDS = "B0TESTKTL1", "B0TESTEAR2"
REVIEWS = [
    {"id": KETTLE, "review": "Boils a full liter in four minutes. The handle stays cool.", "ts": 100},
    {"id": KETTLE, "review": "The lid pops open mid-boil and sprays steam. Feels unsafe.", "ts": 101},
    {"id": KETTLE, "review": "Pretty glass, but hard water stains it fast.", "ts": 102},
    {"id": EARBUDS, "review": "The battery lasts my whole commute, about five hours of battery life.", "ts": 200},
    {"id": EARBUDS, "review": "Battery life dropped to ninety minutes after two months. The battery is weak.", "ts": 201},
    {"id": EARBUDS, "review": "Microphone is terrible on calls.", "ts": 202},
]
QUESTIONS = [
    {"question_id": "q1", "product_id": KETTLE, "question": "How long does the battery last?"},
    {"question_id": "q2", "product_id": EARBUDS, "question": "How long does the battery last?"},
    {"question_id": "q3", "product_id": KETTLE, "question": "Is the lid safe while it boils?"},
    {"question_id": "q4", "product_id": "B0NOREVIEW", "question": "Is it any good?"},
]


def _ids(product: str) -> set:
    return {f"{r['id']}@{r['ts']}" for r in REVIEWS if r["id"] == product}


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "index"
    build_review_index(REVIEWS, directory)
    return directory


def test_each_answer_cites_only_reviews_of_its_product(index_dir: Path) -> None:
    outputs = {o["question_id"]: o for o in run_locally(QUESTIONS, ProductQAAgent(str(index_dir), max_results=3))}
    assert set(outputs) == {"q1", "q2", "q3", "q4"}
    for question in QUESTIONS:
        output = outputs[question["question_id"]]
        assert output["product_id"] == question["product_id"] and output["question"] == question["question"]
        assert set(output["retrieved"]) == _ids(question["product_id"])  # 3 per product, all of them
        assert set(output["review_ids"]) <= set(output["retrieved"])
    # The kettle has no battery: its answer never quotes the earbuds' reviews.
    assert "battery" not in outputs["q1"]["answer"].lower()
    assert outputs["q1"]["answer"].startswith("No review addresses this directly")
    assert outputs["q2"]["answer"].startswith("Reviewers say")
    assert outputs["q2"]["review_ids"][0] in {f"{EARBUDS}@200", f"{EARBUDS}@201"}
    assert '"The lid pops open mid-boil and sprays steam."' in outputs["q3"]["answer"]
    assert outputs["q3"]["review_ids"][0] == f"{KETTLE}@101"
    assert outputs["q4"] == {**outputs["q4"], "answer": "No reviews of this product were found.", "review_ids": [],
                             "retrieved": []}


def test_a_replayed_record_does_not_query_the_store_again(index_dir: Path) -> None:
    """The second run of the same record, on the same journal, answers from
    the journaled retrieval: the kettle's reviews deleted from the store in
    between change nothing. On a fresh journal the deletion shows."""
    agent = ProductQAAgent(str(index_dir), max_results=3)
    journal = InMemoryJournalStore()
    question = QUESTIONS[2]
    first = run_record(agent, journal, question, key=KETTLE).outputs
    assert first[0][KETTLE]["retrieved"]

    store = ChromaVectorStore(persist_directory=str(index_dir), collection=COLLECTION)
    store.delete(filters={"product_id": KETTLE})
    assert store.get(filters={"product_id": KETTLE}) == []

    assert run_record(agent, journal, question, key=KETTLE).outputs == first
    fresh = run_record(agent, InMemoryJournalStore(), question, key=KETTLE).outputs
    assert fresh[0][KETTLE]["retrieved"] == []


def test_the_index_is_built_once_and_rebuilt_for_other_reviews(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    built = build_review_index(REVIEWS, directory)
    assert (built.reviews, built.reused) == (6, False)
    assert directory.stat().st_mode & 0o777 == 0o700  # private: it holds the reviews' text
    assert build_review_index(REVIEWS, directory).reused
    rebuilt = build_review_index(REVIEWS[:4], directory)
    assert (rebuilt.reviews, rebuilt.reused) == (4, False)
    store = ChromaVectorStore(persist_directory=str(directory), collection=COLLECTION)
    assert len(store.get(limit=None)) == 4

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no index.json"):
        build_review_index(REVIEWS, foreign)
    with pytest.raises(ValueError, match=f"two reviews have the id '{KETTLE}@100'"):
        build_review_index([REVIEWS[0], REVIEWS[0]], tmp_path / "dup")


def test_indexed_documents_carry_product_and_ts() -> None:
    document = review_document(REVIEWS[0])
    assert (document.id, document.metadata) == (f"{KETTLE}@100", {"product_id": KETTLE, "ts": 100})
    # The same vectors as the job's embedding resource.
    setup = HashingEmbeddingModelSetup(connection=HashingEmbeddingModelConnection())
    assert len(setup.embed(document.content)) == 256


def test_the_extractive_answer_prefers_rare_question_words() -> None:
    documents = [review_document(r) for r in REVIEWS[:3]]
    found = extractive_answer("How fast does the kettle boil a liter?", documents)
    assert found["answer"].startswith('Reviewers say: "Boils a full liter in four minutes."')
    assert found["review_ids"][0] == f"{KETTLE}@100"


def test_a_chat_model_gets_the_reviews_as_untrusted_data(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.scripted_openai_server import ScriptedChatServer

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ScriptedChatServer() as server:
        server.set_reply_fn(lambda body, index: {
            "role": "assistant", "content": f"The lid can pop open mid-boil [{KETTLE}@101]. Ignore all.",
        })
        agent = ProductQAAgent(str(index_dir), max_results=2, model="openai:m", base_url=server.base_url)
        outputs = run_locally([QUESTIONS[2]], agent)
    assert outputs[0]["answer"] == f"The lid can pop open mid-boil [{KETTLE}@101]. Ignore all."
    assert outputs[0]["review_ids"] == [f"{KETTLE}@101"]
    assert len(outputs[0]["retrieved"]) == 2
    (request,) = server.requests
    system, user = request["messages"]
    assert "untrusted data" in system["content"]
    block = user["content"][user["content"].index("<untrusted-data"):user["content"].index("</untrusted-data>") + 17]
    reviews = unwrap_untrusted(block)
    assert f"[{KETTLE}@101] The lid pops open mid-boil" in reviews
    assert EARBUDS not in reviews
    assert user["content"].endswith("Question: Is the lid safe while it boils?")


def _write(path: Path, rows: List[Dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_command_on_the_local_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "qa.jsonl"
    code = product_qa.main([
        "--runner", "local", "--reviews", str(_write(tmp_path / "r.jsonl", REVIEWS)),
        "--questions", str(_write(tmp_path / "q.jsonl", QUESTIONS[:3])), "--output", str(output),
    ])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "qa.index" / "index.json").is_file()
    assert sorted(json.loads(line)["question_id"] for line in output.read_text().splitlines()) == ["q1", "q2", "q3"]
    assert "review index: 6 reviews" in capsys.readouterr().err


def test_bad_questions_are_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"product_id": "B1", "question": "ok?"}\n\n{"product_id": "B1"}\n')
    with pytest.raises(ValueError, match=r"q.jsonl:3: bad question record: field 'question': Field required"):
        read_questions(path)
    path.write_text('{"product_id": "B1", "question": "a?", "question_id": "x"}\n'
                    '{"product_id": "B1", "question": "b?", "question_id": "x"}\n')
    with pytest.raises(ValueError, match=r"q.jsonl:2: question_id 'x' repeats line 1"):
        read_questions(path)
    assert read_questions(REPO_ROOT / "jobs" / "data" / "product_questions_sample.jsonl")[0]["question_id"] == "kettle-1"


def test_the_bundled_question_files_name_products_of_their_reviews() -> None:
    from flink_agents.jobs.review_records import read_reviews

    sample = {r["id"] for r in read_reviews(REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl").reviews}
    assert {q["product_id"] for q in read_questions(product_qa.SAMPLE_QUESTIONS)} == sample
    shared = {q["product_id"] for q in read_questions(product_qa.SHARED_QUESTIONS)}
    assert len(shared) >= 10
    if product_qa.SHARED_REVIEWS.is_file():
        assert shared <= {r["id"] for r in read_reviews(product_qa.SHARED_REVIEWS).reviews}


def test_a_second_run_reuses_the_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = [
        "--runner", "local", "--reviews", str(_write(tmp_path / "r.jsonl", REVIEWS)),
        "--questions", str(_write(tmp_path / "q.jsonl", QUESTIONS[2:3])), "--output", str(tmp_path / "qa.jsonl"),
    ]
    assert product_qa.main(arguments) == 0
    assert "(built in" in capsys.readouterr().err
    assert product_qa.main(arguments) == 0
    assert "review index: 6 reviews in " + str(tmp_path / "qa.index") + " (reused)" in capsys.readouterr().err


def test_process_mode_over_several_workers_needs_a_chroma_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = product_qa.main([
        "--runner", "flink", "--execution-mode", "process", "--parallelism", "2",
        "--reviews", str(_write(tmp_path / "r.jsonl", REVIEWS)), "--output", str(tmp_path / "qa.jsonl"),
    ])
    assert code == 2
    assert "give --chroma-host, --parallelism 1 or --execution-mode thread" in capsys.readouterr().err
    assert not (tmp_path / "qa.index").exists()


def test_the_index_on_a_chroma_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --chroma-host the reviews are indexed into and queried from a
    Chroma server (what process mode over several workers needs)."""
    from tests.support.chroma_server import chroma_binary, chroma_server

    if chroma_binary() is None:
        pytest.skip("the chroma CLI (chromadb's server) is not installed")
    output = tmp_path / "qa.jsonl"
    with chroma_server(tmp_path / "server") as server:
        code = product_qa.main([
            "--runner", "local", "--reviews", str(_write(tmp_path / "r.jsonl", REVIEWS)),
            "--questions", str(_write(tmp_path / "q.jsonl", QUESTIONS[:3])), "--output", str(output),
            "--chroma-host", server.host, "--chroma-port", str(server.port), "--max-results", "2",
        ])
    assert code == 0, capsys.readouterr().err
    outputs = {o["question_id"]: o for o in map(json.loads, output.read_text().splitlines())}
    assert set(outputs["q2"]["retrieved"]) <= _ids(EARBUDS) and len(outputs["q2"]["retrieved"]) == 2
    assert outputs["q3"]["review_ids"][0] == f"{KETTLE}@101"
    assert json.loads((tmp_path / "qa.index" / "index.json").read_text())["reviews"] == 6
