"""Golden journals (issue 29, part 4): what a few canonical runs journal,
entry by entry, committed beside the tests so that a change to it shows in
review.

Each run (``tests/support/golden_agents.py``) goes through the production
local path (``tests/support/host_runs``: ``KeyedHost`` over a
``LocalDriver`` on a ``KeyRunner``) with job id ``"golden"`` and key
``"k"``, on an in-memory store that records every write. Every entry of
every write is compared with ``tests/data/golden_journals/<run>.json``: the
write it landed in (the commit number, from 1), journal id, key, record
sequence number, step, ordinal, function id, argument digest and payload
(compared parsed). Commit times are left out, and a payload's times
(``"t": [start ns, duration ns]``, ``journal.timed``) are checked for their
shape and shown as ``"<start ns>", "<duration ns>"``; every id is derived from the
run's identity (``runtime.durability.ids``), never from time or randomness.
Within one write, entries are listed by position: a write is atomic, the
order of its entries means nothing. The commit count of each run is also
asserted here, against the counts of ``runtime/durability/journal.py``.

To accept an intended change, regenerate the files and review their diff::

    FLINK_AGENTS_UPDATE_GOLDEN=1 bash tools/test.sh tests/engine/test_golden_journals.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.journal import JournalEntry
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import golden_agents, host_runs

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "data" / "golden_journals"
UPDATE_ENV = "FLINK_AGENTS_UPDATE_GOLDEN"
JOB_ID = "golden"
KEY = "k"
COMPACT_DEPTH = 5  # below this, a value is one line of the file (an event, a memory write)


class RecordingStore(InMemoryJournalStore):
    """An in-memory journal store that keeps each write's entries."""

    def __init__(self) -> None:
        super().__init__(clock=lambda: 0.0)
        self.log: List[Dict[str, Any]] = []

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        entries = list(entries)
        super().append(journal_id, key, seq, entries)
        if entries:  # an empty append writes nothing and is not counted
            self.log.append({"write": self.writes, "journal_id": journal_id, "key": key, "seq": seq,
                             "entries": entries})


def _untimed(payload: Dict[str, Any]) -> Dict[str, Any]:
    """``payload`` with its times (which differ per run) checked and masked."""
    if "t" in payload:
        start, duration = payload["t"]
        assert isinstance(start, int) and start > 1.7e18 and isinstance(duration, int) and duration >= 0, payload["t"]
        payload["t"] = ["<start ns>", "<duration ns>"]
    return payload


def _rows(store: RecordingStore) -> List[Dict[str, Any]]:
    """Every entry written, by write, then by position within the write."""
    rows = [
        {"write": write["write"], "journal_id": write["journal_id"], "key": write["key"], "seq": write["seq"],
         "step": entry.step, "ordinal": entry.ordinal, "function_id": entry.function_id,
         "args_digest": entry.args_digest, "payload": _untimed(json.loads(entry.payload))}
        for write in store.log for entry in write["entries"]
    ]
    rows.sort(key=lambda r: (r["write"], r["journal_id"], r["seq"], r["step"], r["ordinal"]))
    return rows


def _check_store_holds_the_writes(store: RecordingStore) -> None:
    """What the store reads back is what the writes wrote, a slot's last write winning."""
    written: Dict[Any, JournalEntry] = {}
    for write in store.log:
        for entry in write["entries"]:
            written[(write["journal_id"], write["key"], write["seq"], entry.step, entry.ordinal)] = entry
    held = {(*run, step, ordinal): entry
            for run in {(w["journal_id"], w["key"], w["seq"]) for w in store.log}
            for (step, ordinal), entry in store.load_run(*run).items()}
    assert held == written


def _dump(value: Any, depth: int = 0) -> str:
    """JSON, keys sorted: indented down to ``COMPACT_DEPTH``, one line per
    value below it, so a file stays small and a diff names the entry."""
    if depth >= COMPACT_DEPTH or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, list):
        items = [inner + _dump(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [inner + json.dumps(k) + ": " + _dump(value[k], depth + 1) for k in sorted(value)]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def _run(agent: Agent, value: Any) -> tuple[RecordingStore, LocalDriver]:
    store = RecordingStore()
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id=JOB_ID, store=store)
    driver = LocalDriver()
    try:
        host_runs.process(engine, driver, KEY, value)
    finally:
        engine.close()
    return store, driver


def _assert_golden(name: str, store: RecordingStore) -> None:
    _check_store_holds_the_writes(store)
    actual = {"run": name, "commits": store.writes, "entries": _rows(store)}
    path = GOLDEN_DIR / f"{name}.json"
    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(actual) + "\n", encoding="utf-8")
    if not path.exists():
        pytest.fail(f"no golden journal {path}: write it with {UPDATE_ENV}=1", pytrace=False)
    golden = json.loads(path.read_text(encoding="utf-8"))
    if golden != actual:
        diff = "".join(difflib.unified_diff(
            (_dump(golden) + "\n").splitlines(keepends=True), (_dump(actual) + "\n").splitlines(keepends=True),
            fromfile=f"{path.name} (golden)", tofile=f"{path.name} (this run)"))
        pytest.fail(
            f"the journal of run {name!r} differs from its golden file {path}:\n{diff}\n"
            f"If the change is intended, regenerate the file with {UPDATE_ENV}=1 "
            f"bash tools/test.sh tests/engine/test_golden_journals.py, and review its diff.",
            pytrace=False,
        )


# name, agent factory, input, outputs, commits (journal.py's docstring: its counts, by commit point)
RUNS: List[tuple[str, Callable[[], Agent], Any, Any, int]] = [
    # 1 before the model call (ask's completion), 7 the reply and the rest with the run end.
    ("plain_model_call", golden_agents.plain_model_call, "hello", "answer to hello from []", 2),
    # 1 before the model, 1 before the tool, 1 before the second model call, 7.
    ("one_tool_round", golden_agents.one_tool_round, "hello", "answer to hello from ['0']", 4),
    # As one tool: the three results land together, so no group commit (2) writes them apart.
    ("parallel_tool_round", golden_agents.parallel_tool_round, "hello",
     "answer to hello from ['alpha(0)', 'beta(1)', 'gamma(2)']", 4),
    # The gathered lookups land together: 1 before join takes them; 7.
    ("async_gather", golden_agents.async_gather, "go", "L0|L1|L2", 2),
    # 1 before the fetch (the email), 3 the retry (failed attempts: 1; the error is dropped), 7.
    ("retried_action", golden_agents.retried_action, "r", ["emailed ops@example.com", "fetched r"], 3),
    # 6 the child's entries (its own journal id, no run end), 5 its result, 7.
    ("sub_agent_call", golden_agents.sub_agent_call, "hello", ["HELLO"], 3),
    # 1 the call's started mark (a reconciler: call_started.py), 7 its result in the mark's place.
    ("reconciled_call", golden_agents.reconciled_call, "o1", "charged o1", 2),
]


@pytest.mark.parametrize("name,agent,value,outputs,commits", RUNS, ids=[run[0] for run in RUNS])
def test_a_canonical_run_journals_what_its_golden_file_holds(
    name: str, agent: Callable[[], Agent], value: Any, outputs: Any, commits: int,
) -> None:
    store, driver = _run(agent(), value)
    assert driver.outputs == [{KEY: outputs}]
    _assert_golden(name, store)
    assert store.writes == commits, f"run {name!r} committed {store.writes} times, not {commits}"


def test_the_golden_files_are_the_runs_and_nothing_else() -> None:
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.json")) == sorted(run[0] for run in RUNS)
