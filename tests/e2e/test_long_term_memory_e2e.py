"""Long-term memory on the Flink mini-cluster, through a worker failover.

An agent keyed by product remembers one fact per record in a persistent
Chroma store (``ctx.long_term_memory``) and answers each record with every
fact its product's memory holds. The first batch of records is processed
and checkpointed; in the second, the kettle's first record kills its Python
worker (``os._exit``) right after its ``add`` was journaled. Flink restarts
the job from the checkpoint: the records after it run again, their journaled
writes replay (nothing written twice), and every output after the failover
sees exactly the facts written before it, each once.

Built as tests/e2e/test_react_agent_e2e.py: a checkpointed, watched
``FileSource`` input, workers in processes of their own (so that
``os._exit`` ends only a worker), a spare TaskManager.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.memory.long_term_memory import LongTermMemoryOptions
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from tests.support.flink_jobs import Collected, checkpoint_after, jsonl_stream, mini_cluster_env, write_jsonl

# The action and the key selector run in Flink's Python workers, which cannot
# import this module by name: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PRODUCTS = ("kettle", "blender")
PER_BATCH = 3


def _fact(product: str, n: int) -> str:
    return f"fact {n} about the {product}: remark number {n} from review {n * 7 + len(product)}"


def crash_worker_once(marker: str) -> str:
    """Kill this Python worker unless ``marker`` exists (then create it
    first); every run appends its pid to ``<marker>.runs``."""
    with open(marker + ".runs", "a", encoding="utf-8") as runs:
        runs.write(f"{os.getpid()}\n")
    if os.path.exists(marker):
        return "survived"
    with open(marker, "w", encoding="utf-8") as out:
        out.write(str(time.time()))
    os._exit(1)


def remember(event: Event, ctx: Any) -> None:
    """Record ``{"id", "n", "fact", ["crash": marker]}``: remember the fact,
    then answer with every fact of the product (by ``n``) and the closest one
    to this record's fact."""
    record = event.input
    facts = ctx.long_term_memory.get_memory_set("product_facts")
    facts.add(record["fact"], metadatas={"n": record["n"]})
    if record.get("crash"):
        ctx.durable_execute(crash_worker_once, record["crash"])
    seen = sorted(item.additional_metadata["n"] for item in facts.get(limit=100))
    closest = facts.search(record["fact"], limit=1)
    ctx.send_event(OutputEvent(output={"id": record["id"], "n": record["n"], "seen": seen,
                                       "closest": closest[0].value if closest else None}))


def product_of(record: Dict[str, Any]) -> str:
    return record["id"]


def memory_agent(chroma_dir: str) -> Agent:
    agent = Agent()
    agent.add_resource("hashing", ResourceType.EMBEDDING_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_CONNECTION, dimensions=512))
    agent.add_resource("embedder", ResourceType.EMBEDDING_MODEL,
                       ResourceDescriptor(clazz=ResourceName.EmbeddingModel.HASHING_SETUP, connection="hashing"))
    agent.add_resource("memory_store", ResourceType.VECTOR_STORE, ResourceDescriptor(
        clazz=ResourceName.VectorStore.CHROMA_VECTOR_STORE, embedding_model="embedder", persist_directory=chroma_dir,
    ))
    agent.add_action("remember", [InputEvent], remember)
    return agent


def _records(first: int, crash: str | None = None) -> List[Dict[str, Any]]:
    records = [{"id": p, "n": n, "fact": _fact(p, n)} for n in range(first, first + PER_BATCH) for p in PRODUCTS]
    if crash is not None:
        records[0]["crash"] = crash  # the kettle's first record of the batch
    return records


@pytest.mark.timeout(300)
def test_memory_survives_a_worker_failover_without_duplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chromadb = pytest.importorskip("chromadb")
    from pyflink.common import Types

    chroma_dir = tmp_path / "chroma"
    marker = tmp_path / "crashed"
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    checkpoints = tmp_path / "checkpoints"
    # A real crash needs the Python workers in processes of their own
    # (loopback mode runs them in this process).
    monkeypatch.setenv("_python_worker_execution_mode", "process")
    env = mini_cluster_env(1, checkpoints, 500, restart_attempts=3, **{
        "minicluster.number-of-taskmanagers": "2",  # a failover now and then takes its TaskManager along
    })
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
        "journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db"),
        LongTermMemoryOptions.VECTOR_STORE.key: "memory_store",
    })
    stream = jsonl_stream(env, input_dir, "facts", "facts-source", "decode-facts")
    outputs = agents_env.from_datastream(stream, product_of, key_type=Types.STRING()).apply(
        memory_agent(str(chroma_dir))
    ).to_datastream()

    write_jsonl(input_dir / "batch-1.jsonl", _records(0))
    started = time.monotonic()
    job = Collected(outputs, "long-term-memory-failover")
    try:
        before = job.take(len(PRODUCTS) * PER_BATCH, timeout_s=150)
        checkpoint_after(checkpoints, time.time())  # the first batch is in a checkpoint
        write_jsonl(input_dir / "batch-2.jsonl", _records(PER_BATCH, crash=str(marker)))
        after = job.take(len(PRODUCTS) * PER_BATCH, timeout_s=150)
        elapsed = time.monotonic() - started
    finally:
        job.close()

    # The worker died once, in the kettle's record 3, and the job went on in a new one.
    assert marker.is_file(), "the crash never happened"
    runs = Path(str(marker) + ".runs").read_text().split()
    assert len(runs) == 2 and runs[0] != runs[1], runs
    # One output per record; each sees exactly its product's facts so far,
    # each once (facts written before the failover included), and finds its
    # own fact closest.
    by_record = {(o["id"], o["n"]): o for o in before + after}
    assert sorted(by_record) == sorted((p, n) for p in PRODUCTS for n in range(2 * PER_BATCH))
    for (product, n), output in by_record.items():
        assert output["seen"] == list(range(n + 1)), output
        assert output["closest"] == _fact(product, n), output
    # The store holds every fact once.
    client = chromadb.PersistentClient(path=str(chroma_dir))
    documents = client.get_collection("ltm_product_facts").get()
    stored = sorted((json.loads(m["ltm_scope"]), m["n"]) for m in documents["metadatas"])
    assert stored == sorted((p, n) for p in PRODUCTS for n in range(2 * PER_BATCH))
    print(f"\nlong-term memory failover job: {len(by_record)} outputs after {elapsed:.1f} s")
