"""Stored data never picks what code runs (docs/guarantees.md#security).

Whoever can write one row of a journal a team shares (a PostgreSQL schema, a
SQLite file in a directory others can read) or one keyed-state value must not
run code in the jobs that replay it. Each crafted value here names a callable
(``os:system``, ``subprocess:check_output``), a class of another kind than its
tag promises, or a module with import side effects: it is refused with a
``ClassNotAllowed`` naming tag and name, and nothing is imported or called (a
marker file the command would create stays absent). The replay tests run the
local runner over a real SQLite file and a real PostgreSQL schema, the way a
rerun with the same ``job-identifier`` replays a journaled run.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.runtime.durability.codec import ClassNotAllowed, DecodeError, decode, encode
from flink_agents.runtime.durability.codec_classes import ClassGone
from flink_agents.runtime.durability.codec_exceptions import decode_outcome
from flink_agents.runtime.errors import ActionFailed, TERMINAL, classify
from flink_agents.runtime.execution.event_codec import decode_event
from flink_agents.runtime.execution.state import KeyState
from tests.support.journal_stores import postgres_schema


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ran"
    yield path
    assert not path.exists(), "a crafted stored value ran a command"


def _crafted(marker: Path) -> Dict[str, Any]:
    touch = f"touch {marker}"
    return {
        "enum naming os.system": {"$enum": "os:system", "value": touch},
        "row naming subprocess.check_output": {"$row": "subprocess:check_output", "values": [["touch", str(marker)]]},
        "row naming another class": {"$row": "subprocess:Popen", "values": [["touch", str(marker)]]},
        "exception naming os.system": {
            "$exception": {"type": "os:system", "message": "", "args": [touch], "attrs": {}},
        },
        "exception naming a class that is no exception": {
            "$exception": {"type": "subprocess:Popen", "message": "", "args": [["touch", str(marker)]], "attrs": {}},
        },
        "pydantic naming a class that is no model": {"$pydantic": "subprocess:Popen", "fields": {"args": touch}},
        "dataclass naming a function": {"$dataclass": "os:system", "fields": {}},
        "legacy model naming a function": {"$model": "os:system", "data": touch},
        "enum of a class that is no enum": {"$enum": "builtins:ValueError", "value": touch},
        "a name reaching through attributes": {"$enum": "flink_agents.runtime.durability.codec:json.loads", "value": "1"},
        "a dunder path": {"$enum": "flink_agents:__builtins__.eval", "value": "1"},
        "a dunder module": {"$enum": "flink_agents.__main__:Anything", "value": "1"},
        "not a name": {"$enum": ["os", "system"], "value": touch},
    }


_CRAFTED_NAMES = list(_crafted(Path("x")))


@pytest.mark.parametrize("case", _CRAFTED_NAMES)
def test_a_crafted_value_is_refused_naming_tag_and_name(case: str, marker: Path) -> None:
    data = _crafted(marker)[case]
    tag = next(iter(data))
    name = data["$exception"]["type"] if tag == "$exception" else data[tag]

    with pytest.raises(ClassNotAllowed) as refused:
        decode({"nested": [data]})

    assert refused.value.tag == tag and refused.value.name == name
    assert tag in str(refused.value) and repr(name) in str(refused.value)
    assert isinstance(refused.value, ValueError) and classify(refused.value) == TERMINAL  # a retry reads it again


def test_a_legacy_error_outcome_naming_a_callable_is_refused(marker: Path) -> None:
    payload = json.dumps({"error": {"type": "os:system", "message": f"touch {marker}"}})

    with pytest.raises(ClassNotAllowed, match=r"'os:system' under error"):
        decode_outcome(payload)


def test_an_outcome_naming_a_callable_as_its_exception_is_refused(marker: Path) -> None:
    payload = json.dumps({"c": 2, "error": {"type": "os:system", "message": "", "args": [f"touch {marker}"], "attrs": {}}})

    with pytest.raises(ClassNotAllowed, match=r"'os:system' under \$exception"):
        decode_outcome(payload)


def test_a_journaled_event_naming_a_model_that_is_no_event_is_refused() -> None:
    with pytest.raises(ClassNotAllowed, match=r"'flink_agents.api.chat_message:ChatMessage' under event type"):
        decode_event({"type": "flink_agents.api.chat_message:ChatMessage", "fields": {}, "c": 2})


def test_a_module_named_by_data_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "side_effect_module_7f3a.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nimport enum\nclass Color(enum.Enum):\n    RED = 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(ClassNotAllowed, match=r"not a class of a package this job uses"):
        decode({"$enum": "side_effect_module_7f3a:Color", "value": 1})

    assert not marker.exists() and "side_effect_module_7f3a" not in sys.modules


def test_a_standard_library_module_that_is_not_loaded_is_not_imported() -> None:
    assert "antigravity" not in sys.modules  # importing it opens a web browser

    with pytest.raises(ClassGone, match=r"'antigravity:Anything' under \$enum.*not loaded.*nothing was imported") as gone:
        decode({"$enum": "antigravity:Anything", "value": 1})
    # A decode error (terminal: the same row would be read again on a retry).
    assert isinstance(gone.value, DecodeError) and classify(gone.value) == TERMINAL

    assert "antigravity" not in sys.modules


def test_classes_a_job_legitimately_holds_still_read_back() -> None:
    import http
    import json as json_module

    class_values = [
        KeyError("sku-1"),                                     # a built-in exception
        json_module.JSONDecodeError("bad", "{x", 1),           # a standard-library exception
        http.HTTPStatus.OK,                                    # a standard-library enum
        ActionFailed("k", 1, "act", ValueError("x")),         # one of the runtime's own
    ]
    for value in class_values:
        back = decode(encode(value))
        assert type(back) is type(value) and str(back) == str(value)


def test_keyed_state_naming_a_callable_is_refused(marker: Path) -> None:
    """What the Flink driver reads from a checkpoint's keyed state."""
    state = json.loads(KeyState(journal_id="job").to_json())
    state["pending"] = [{"seq": 0, "value": {"$enum": "os:system", "value": f"touch {marker}"}, "ts": None}]

    with pytest.raises(ClassNotAllowed, match=r"'os:system' under \$enum"):
        KeyState.from_json(json.dumps(state))


# --- a journaled run replayed from a tampered row, on both stores --------------------------


class Verdict(Enum):
    GOOD = "good"


def _lookup(review: str) -> Verdict:
    return Verdict.GOOD


class LookupAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def judge(event: InputEvent, ctx: Any) -> None:
        verdict = ctx.durable_execute(_lookup, event.input)
        ctx.send_event(OutputEvent(output=verdict.value))


def _run(config: Dict[str, Any]) -> list:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().update({"job-identifier": "shared-job", **config})
    outputs = env.from_list([{"key": "p1", "value": "fine"}]).apply(LookupAgent()).to_list()
    env.execute()
    return outputs


# The run as a crash leaves it after its call was journaled: the step's
# completion and the run's end gone (rows without a function id), the call's
# outcome replaced by the crafted payload.
_FORGET_STEPS = "DELETE FROM journal WHERE function_id = ''"
_FORGE_CALL = "UPDATE journal SET payload = {p} WHERE function_id != ''"


def _tamper_sqlite(path: Path, payload: str) -> int:
    with sqlite3.connect(path) as db:
        db.execute(_FORGET_STEPS)
        return db.execute(_FORGE_CALL.format(p="?"), (payload,)).rowcount


def _tamper_postgres(dsn: str, payload: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(_FORGET_STEPS)
        return db.execute(_FORGE_CALL.format(p="%s"), (payload,)).rowcount


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_replay_of_a_tampered_journal_row_fails_and_runs_nothing(store: str, tmp_path: Path, marker: Path) -> None:
    """Every crafted value, as the journaled result of a real store's row."""
    for i, (case, data) in enumerate(_crafted(marker).items()):
        tag = next(iter(data))
        name = data["$exception"]["type"] if tag == "$exception" else data[tag]
        crafted = json.dumps({"c": 2, "ok": data})

        def replay_tampered(config: Dict[str, Any], tamper: Any) -> None:
            assert _run(config) == [{"p1": "good"}], case  # the first run journals the call's result
            assert tamper(crafted) == 1, case
            with pytest.raises(ActionFailed) as failed:
                _run(config)  # same job-identifier, same record: replays the journaled call
            assert isinstance(failed.value.cause, ClassNotAllowed), case
            assert failed.value.cause.tag == tag and failed.value.cause.name == name, case
            assert f"{name!r} under {tag}" in str(failed.value), case

        if store == "sqlite":
            path = tmp_path / f"journal-{i}.db"
            replay_tampered({"journal.store": "sqlite", "journal.sqlite.path": str(path)},
                            lambda payload: _tamper_sqlite(path, payload))
        else:
            with postgres_schema() as dsn:
                replay_tampered({"journal.store": "postgres", "journal.postgres.dsn": dsn},
                                lambda payload: _tamper_postgres(dsn, payload))


def test_decode_errors_are_value_errors() -> None:
    assert issubclass(ClassNotAllowed, DecodeError) and issubclass(DecodeError, ValueError)


# --- names that reach past the checks (found by a review after the first fix) -------------


@pytest.mark.parametrize("data", [
    # a runtime module's attribute holding another package's module
    {"$exception": {"type": "flink_agents.api.yaml._source:yaml.YAMLError", "message": "x", "args": ["x"], "attrs": {}}},
    {"$enum": "flink_agents.runtime.durability.codec_classes:sys.flags", "value": 1},
])
def test_a_name_cannot_reach_another_packages_class_through_a_runtime_module(data: Dict[str, Any]) -> None:
    with pytest.raises(ClassNotAllowed, match=r"reaches through a module|package this job does not use"):
        decode(data)


def _imports_in_a_fresh_interpreter(tmp_path: Path, data: Dict[str, Any]) -> Dict[str, Any]:
    """Decode ``data`` in a new interpreter with its own ``$HOME``; which
    modules that loaded, and which files appeared in ``$HOME``."""
    import os
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    script = (
        "import json, sys\n"
        "from flink_agents.runtime.durability.codec import decode\n"
        "import flink_agents.runtime.engine\n"
        "before = set(sys.modules)\n"
        "try:\n"
        f"    decode(json.loads({json.dumps(json.dumps(data))}))\n"
        "    outcome = 'decoded'\n"
        "except Exception as e:\n"
        "    outcome = type(e).__name__\n"
        "print(json.dumps({'outcome': outcome, 'new': sorted(set(sys.modules) - before)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(home)}, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["home"] = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    return report


@pytest.mark.parametrize("data", [
    {"$enum": "flink_agents.runtime.memory.mem0.adapters:X", "value": 1},          # would import mem0 (writes ~/.mem0)
    {"$enum": "flink_agents.integrations.frameworks.langgraph:X", "value": 1},     # would trust langchain_core
    {"$enum": "concurrent.futures:ProcessPoolExecutor", "value": 1},               # a lazy module __getattr__
    {"$enum": "pyflink.common.types:RowKind", "value": 0},                         # Row's module, not a $row
    {"$enum": "pydantic.mypy:X", "value": 1},                                      # a submodule of a trusted package
])
def test_a_refused_name_imports_nothing_and_writes_nothing(tmp_path: Path, data: Dict[str, Any]) -> None:
    report = _imports_in_a_fresh_interpreter(tmp_path, data)

    assert report["outcome"] != "decoded"
    assert report["new"] == [] and report["home"] == [], report


# --- journal.trusted_packages: a package the plan does not reach ---------------------------


class ParcelAgent(Agent):
    """Journals a value of a package the plan does not reach: the action
    imports it only when it runs."""

    @action(InputEvent)
    @staticmethod
    def route(event: InputEvent, ctx: Any) -> None:
        import acme_parcels_5c1e

        carrier = ctx.durable_execute(acme_parcels_5c1e.pick, event.input)
        ctx.send_event(OutputEvent(output=[type(carrier).__name__, carrier.value]))


def test_journal_trusted_packages_lets_a_packages_classes_be_journaled_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flink_agents.runtime.durability import codec_classes

    (tmp_path / "acme_parcels_5c1e.py").write_text(
        "import enum\nclass Carrier(enum.Enum):\n    DHL = 'dhl'\n"
        f"def pick(order):\n    open({str(tmp_path / 'picks')!r}, 'a').write('.')\n    return Carrier.DHL\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(codec_classes, "_TRUSTED", set(codec_classes._TRUSTED))  # undone after the test
    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}

    def run(**config: Any) -> list:
        env = AgentsExecutionEnvironment.get_execution_environment()
        env.get_config().update({"job-identifier": "parcels", **journal, **config})
        outputs = env.from_list([{"key": "o1", "value": "order-1"}]).apply(ParcelAgent()).to_list()
        env.execute()
        return outputs

    # Not trusted: refused when journaled (a replay could not read it back),
    # the message naming the option.
    with pytest.raises(ActionFailed, match=r"journal.trusted_packages option \('acme_parcels_5c1e'\)"):
        run(**{"job-identifier": "untrusted"})

    # Trusted: journaled, and a replay of the same run reads the enum back.
    assert run(**{"journal.trusted_packages": ["acme_parcels_5c1e"]}) == [{"o1": ["Carrier", "dhl"]}]
    with sqlite3.connect(tmp_path / "journal.db") as db:
        db.execute(_FORGET_STEPS)  # as a crash leaves it: the call journaled, the run not ended
    assert run(**{"journal.trusted_packages": ["acme_parcels_5c1e"]}) == [{"o1": ["Carrier", "dhl"]}]
    assert (tmp_path / "picks").read_text() == "..", "the trusted run's call ran once, and the replay ran nothing"
    with sqlite3.connect(tmp_path / "journal.db") as db:
        (payload,) = db.execute("SELECT payload FROM journal WHERE function_id != ''").fetchone()
    assert "acme_parcels_5c1e:Carrier" in payload
