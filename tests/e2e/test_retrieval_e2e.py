"""Retrieval on the local mini-cluster: an agent indexes product reviews
into a Chroma persistent store (journaled ``aadd`` through
``ctx.get_resource(..., VECTOR_STORE)``) and answers questions about a
product with a ``ContextRetrievalRequestEvent`` filtered to that product;
the embedding is the offline hashing model. Parallelism 1, the Python
code in thread mode (embedded in the JVM, the jobs' default), so the job
runs in a child process (``python -m tests.e2e.test_retrieval_e2e DIR``, which
prints one JSON output a line): thread mode has to be set up before the
first PyFlink environment of a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent,
    ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.vector_stores.vector_store import Document
from tests.conftest import REPO_ROOT
from tests.support.flink_jobs import child_environment

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RECORDS: List[Dict[str, Any]] = [
    {"product": "kettle", "review": "The kettle boils a full litre in three minutes"},
    {"product": "kettle", "review": "The handle gets hot and the lid rattles"},
    {"product": "lamp", "review": "The lamp is bright enough to read at night"},
    {"product": "lamp", "review": "The lamp switch broke after two weeks"},
    {"product": "kettle", "question": "how fast does it boil a litre"},
    {"product": "lamp", "question": "did the switch break"},
    {"product": "lamp", "question": "is it bright enough to read"},
]


async def index_or_ask(event: InputEvent, ctx: Any) -> None:
    record = event.input
    if "review" in record:
        store = ctx.get_resource("reviews", ResourceType.VECTOR_STORE)
        ids = await store.aadd(Document(content=record["review"], metadata={"product": record["product"]}))
        ctx.send_event(OutputEvent(output={"product": record["product"], "indexed": ids}))
    else:
        ctx.send_event(ContextRetrievalRequestEvent(
            record["question"], "reviews", max_results=1, filters={"product": record["product"]},
        ))


def answer(event: ContextRetrievalResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={
        "product": ctx.key, "question": event.query, "answer": [d.content for d in event.documents],
    }))


def review_qa_agent(chroma_dir: str) -> Agent:
    agent = Agent()
    agent.add_resource("hashing", ResourceType.EMBEDDING_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_CONNECTION))
    agent.add_resource("embedder", ResourceType.EMBEDDING_MODEL,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_SETUP, connection="hashing"))
    agent.add_resource("reviews", ResourceType.VECTOR_STORE, ResourceDescriptor(
        clazz=ResourceName.VectorStore.CHROMA_VECTOR_STORE, embedding_model="embedder",
        persist_directory=chroma_dir, collection="product_reviews",
    ))
    agent.add_action("index_or_ask", [InputEvent], index_or_ask)
    agent.add_action("answer", [ContextRetrievalResponseEvent], answer)
    return agent


def _product(record: Dict[str, Any]) -> str:
    return record["product"]


def run_job(directory: Path) -> None:
    """Run the job in thread mode on ``directory`` (journal and Chroma
    store inside it), printing each output as a JSON line."""
    from flink_agents.runtime.flink.environment import prepare_thread_mode

    prepare_thread_mode()
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    for key, value in {
        "restart-strategy.type": "none", "python.executable": sys.executable, "python.execution-mode": "thread",
    }.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(directory / "journal.db")}
    )
    stream = (
        agents_env.from_datastream(env.from_collection(RECORDS), _product)
        .apply(review_qa_agent(str(directory / "chroma")))
        .to_datastream()
    )
    with stream.execute_and_collect("retrieval-e2e") as collected:
        for output in collected:
            print("OUTPUT " + json.dumps(output), flush=True)


@pytest.mark.timeout(300)
def test_an_agent_answers_product_questions_from_reviews_it_indexed(tmp_path: Path) -> None:
    pytest.importorskip("chromadb", reason="chromadb (the 'chroma' extra) is not installed")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tests.e2e.test_retrieval_e2e", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=280, env=child_environment(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line[len("OUTPUT "):]) for line in done.stdout.splitlines() if line.startswith("OUTPUT ")]
    print(f"job took {time.monotonic() - started:.1f} s")

    indexed = [o for o in outputs if "indexed" in o]
    assert len(indexed) == 4 and len({o["indexed"][0] for o in indexed}) == 4  # derived ids, all distinct
    answers = {(o["product"], o["question"]): o["answer"] for o in outputs if "question" in o}
    assert answers == {
        ("kettle", "how fast does it boil a litre"): ["The kettle boils a full litre in three minutes"],
        ("lamp", "did the switch break"): ["The lamp switch broke after two weeks"],
        ("lamp", "is it bright enough to read"): ["The lamp is bright enough to read at night"],
    }

    from flink_agents.integrations.vector_stores.chroma.chroma_vector_store import ChromaVectorStore

    # The job's process has ended: this one may open the directory now.
    stored = ChromaVectorStore(persist_directory=str(tmp_path / "chroma"), collection="product_reviews").get(limit=None)
    assert sorted(d.id for d in stored) == sorted(o["indexed"][0] for o in indexed)  # one copy of each review


if __name__ == "__main__":
    run_job(Path(sys.argv[1]))
