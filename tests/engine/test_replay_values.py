"""Issue 11, parts 2 to 4 on the engine: a run sees after a replay or a
restore what it saw the first time, through one typed codec.

- part 2: a journaled call's result keeps its types across a replay;
- part 3: a journaled call's exception replays as itself (type, args, str),
  so the same ``except`` branch runs;
- part 4: memory values and queued input records read back the same on the
  local runner and after a restore through keyed state (the Flink driver's
  JSON), and a record the codec refuses names key, record and field path.

Until the journal calls ``runtime.durability.codec_exceptions.encode_outcome`` itself,
``_wired_codec`` points it there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import uuid
from collections import Counter
from enum import Enum, IntEnum
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.durability import journal as journal_module
from flink_agents.runtime.durability.codec_exceptions import decode_outcome, encode_outcome
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import InputRecordError
from flink_agents.runtime.flink.driver import FlinkDriver
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.execution.memory import OBJECT
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support import host_runs
from tests.support.pythons import StrEnum

CALLS: Counter = Counter()
CRASH_ONCE: Dict[str, bool] = {"armed": False}


class Crash(BaseException):
    """A simulated process crash: nothing may catch it."""


class Tier(StrEnum):
    GOLD = "gold"


class Level(IntEnum):
    HIGH = 3


class Shape(Enum):
    ROUND = "round"


class PriceError(Exception):
    def __init__(self, sku: str, price: float) -> None:
        super().__init__(f"{sku} costs {price}")
        self.sku = sku
        self.price = price


class Checked(Event):
    facts: Any = None


@pytest.fixture(autouse=True)
def _wired_codec(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(journal_module, "_encode_outcome",
                        lambda result=None, error=None: encode_outcome(result, error, call="test"), raising=False)
    monkeypatch.setattr(journal_module, "_decode_outcome", decode_outcome, raising=False)
    CALLS.clear()
    CRASH_ONCE["armed"] = False
    yield
    CALLS.clear()


def _run(agent: Agent, records: List[Any], store: InMemoryJournalStore, driver: LocalDriver | None = None,
         key: Any = "k") -> LocalDriver:
    engine = AgentEngine(AgentPlan.from_agent(agent), {}, job_id="job", store=store)
    driver = driver or LocalDriver()
    try:
        for record in records:
            host_runs.process(engine, driver, key, record)
    finally:
        engine.close()
    return driver


def _crash_once() -> str:
    if CRASH_ONCE["armed"]:
        CRASH_ONCE["armed"] = False
        raise Crash("the process dies here")
    return "survived"


def _first_run_then_replay(agent: Agent) -> tuple[list, list]:
    """Outputs of a run that crashes after its journaled calls (then replays
    them in a new engine with fresh state) and of a run without a crash."""
    CRASH_ONCE["armed"] = True
    crashed_store = InMemoryJournalStore()
    with pytest.raises(Crash):
        _run(agent, ["go"], crashed_store)
    replayed = _run(agent, ["go"], crashed_store).outputs
    plain = _run(agent, ["go"], InMemoryJournalStore()).outputs
    return plain, replayed


# --- part 2: values ------------------------------------------------------------------


def lookup() -> Dict[str, Any]:
    CALLS["lookup"] += 1
    return {"prices": {1: 9.5}, "pair": (1, 2), "tier": Tier.GOLD, "id": uuid.UUID(int=11)}


def decide(event: InputEvent, ctx: Any) -> None:
    found = ctx.durable_execute(lookup)
    ctx.durable_execute(_crash_once)
    ctx.send_event(OutputEvent(output={
        "price_of_1": found["prices"].get(1),
        "pair": "tuple" if isinstance(found["pair"], tuple) else type(found["pair"]).__name__,
        "tier": "enum" if found["tier"] is Tier.GOLD else type(found["tier"]).__name__,
        "id": "uuid" if isinstance(found["id"], uuid.UUID) else type(found["id"]).__name__,
    }))


def test_a_journaled_result_keeps_its_types_after_a_replay() -> None:
    agent = Agent().add_action("decide", [InputEvent], decide)

    plain, replayed = _first_run_then_replay(agent)

    expected = [{"k": {"price_of_1": 9.5, "pair": "tuple", "tier": "enum", "id": "uuid"}}]
    assert plain == expected
    assert replayed == expected
    assert CALLS["lookup"] == 2  # once per store: the replay did not call again


def returns_a_counter() -> Counter:
    return Counter(a=1)


def keeps_a_counter(event: InputEvent, ctx: Any) -> None:
    ctx.durable_execute(returns_a_counter)


def test_a_result_that_would_change_type_on_replay_fails_the_first_run_naming_the_call() -> None:
    agent = Agent().add_action("keeps", [InputEvent], keeps_a_counter)

    with pytest.raises(Exception, match=r"result is a collections\.Counter") as failure:
        _run(agent, ["go"], InMemoryJournalStore())

    assert "keeps" in str(failure.value)


# --- part 3: exceptions ------------------------------------------------------------------


def bad_json() -> Any:
    CALLS["bad_json"] += 1
    return json.loads('{"sku": ')


def missing_sku() -> Any:
    CALLS["missing_sku"] += 1
    return {}["sku-1"]


def too_expensive() -> Any:
    CALLS["too_expensive"] += 1
    raise PriceError("sku-1", 99.5)


def catches(event: InputEvent, ctx: Any) -> None:
    seen = []
    for call in (bad_json, missing_sku, too_expensive):
        try:
            ctx.durable_execute(call)
        except json.JSONDecodeError as exc:
            seen.append(["json", exc.pos, exc.msg])
        except KeyError as exc:
            seen.append(["key", str(exc), exc.args[0]])
        except PriceError as exc:
            seen.append(["price", exc.sku, exc.price, str(exc)])
        except Exception as exc:  # the wrong branch: what a replay must not reach
            seen.append(["other", type(exc).__name__, str(exc)])
    ctx.durable_execute(_crash_once)
    ctx.send_event(OutputEvent(output=seen))


def test_journaled_exceptions_replay_as_themselves_and_reach_the_same_except_branch() -> None:
    agent = Agent().add_action("catches", [InputEvent], catches)

    plain, replayed = _first_run_then_replay(agent)

    expected = [{"k": [
        ["json", 8, "Expecting value"],
        ["key", "'sku-1'", "sku-1"],
        ["price", "sku-1", 99.5, "sku-1 costs 99.5"],
    ]}]
    assert plain == expected
    assert replayed == expected
    assert CALLS == Counter({"bad_json": 2, "missing_sku": 2, "too_expensive": 2})  # once per store


# --- part 4: memory and input values -----------------------------------------------------


def remember(event: InputEvent, ctx: Any) -> None:
    memory = ctx.short_term_memory
    if event.input == "set":
        memory.set("tier", Tier.GOLD)
        memory.set("level", Level.HIGH)
        memory.set("shape", {"s": Shape.ROUND, "pair": (1, 2)})
        ctx.send_event(Checked(facts=_facts(memory)))  # read back within the run
    else:
        ctx.send_event(Checked(facts=_facts(memory)))  # read back by a later record


def _facts(memory: Any) -> List[str]:
    shape = memory.get("shape")
    return [type(memory.get("tier")).__name__, type(memory.get("level")).__name__,
            type(shape["s"]).__name__, type(shape["pair"]).__name__]


def report(event: Checked, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.facts))


def _memory_agent() -> Agent:
    return Agent().add_action("remember", [InputEvent], remember).add_action("report", [Checked], report)


ENUM_FACTS = ["Tier", "Level", "Shape", "tuple"]


def test_enums_in_memory_read_back_as_enums_on_the_local_runner() -> None:
    driver = _run(_memory_agent(), ["set", "get"], InMemoryJournalStore())

    assert driver.outputs == [{"k": ENUM_FACTS}, {"k": ENUM_FACTS}]


def test_enums_in_memory_read_back_as_enums_after_a_restore_through_keyed_state() -> None:
    first = _run(_memory_agent(), ["set"], InMemoryJournalStore())
    restored = LocalDriver()
    restored.states["k"] = KeyState.from_json(first.states["k"].to_json())

    _run(_memory_agent(), ["get"], InMemoryJournalStore(), driver=restored)

    assert restored.outputs == [{"k": ENUM_FACTS}]


class _Value:
    """A Flink ``ValueState[str]`` stand-in."""

    def __init__(self, text: str | None = None) -> None:
        self.text = text

    def value(self) -> str | None:
        return self.text

    def update(self, text: str) -> None:
        self.text = text

    def clear(self) -> None:
        self.text = None


class _Map:
    """A Flink ``MapState[str, str]`` stand-in that counts writes per entry."""

    def __init__(self) -> None:
        self.entries: Dict[str, str] = {}
        self.writes: Dict[str, int] = {}

    def items(self) -> Any:
        return list(self.entries.items())

    def put(self, path: str, entry: str) -> None:
        self.entries[path] = entry
        self.writes[path] = self.writes.get(path, 0) + 1

    def remove(self, path: str) -> None:
        del self.entries[path]


def test_the_flink_driver_keeps_memory_as_plain_json_and_reads_it_back_typed() -> None:
    first = _run(_memory_agent(), ["set"], InMemoryJournalStore())
    key_state, memory_state = _Value(), _Map()
    driver = FlinkDriver(key_state, memory_state)
    driver.begin("k")
    driver.store("k", first.states["k"])

    assert json.loads(memory_state.entries["tier"]) == {"$enum": f"{__name__}:Tier", "value": "gold"}
    driver.forget("k")  # the runner let go of the key: its next load reads state
    driver.begin("k")
    loaded = driver.load("k")
    assert loaded is not None and loaded.short_term_memory == first.states["k"].short_term_memory


def _store_memory(driver: FlinkDriver, memory: Dict[str, Any]) -> None:
    driver.begin("k")
    state = driver.load("k") or KeyState(journal_id="job")
    state.short_term_memory = memory
    driver.store("k", state)


def test_the_flink_driver_rewrites_only_the_memory_entries_a_run_changed() -> None:
    # Flink's state TTL renews a MapState entry when it is written: an entry
    # rewritten unchanged would never expire (0.3.1: TTL per memory path).
    key_state, memory_state = _Value(), _Map()
    driver = FlinkDriver(key_state, memory_state)
    _store_memory(driver, {"event1": 1, "user": OBJECT, "user.name": "ann"})
    _store_memory(driver, {"event1": 1, "event2": 1, "user": OBJECT, "user.name": "ann", "user.age": 3})
    _store_memory(driver, {"event2": 2, "user": OBJECT, "user.name": "ann", "user.age": 3})

    assert memory_state.writes == {"event1": 1, "event2": 2, "user": 2, "user.name": 1, "user.age": 1}
    assert set(memory_state.entries) == {"event2", "user", "user.name", "user.age"}
    driver.forget("k")
    driver.begin("k")
    loaded = driver.load("k")
    assert loaded is not None and loaded.short_term_memory["event2"] == 2


def test_the_flink_driver_moves_memory_of_the_earlier_single_value_state_over() -> None:
    key_state, memory_state = _Value(), _Map()
    legacy = _Value(json.dumps({"order": OBJECT, "order.total": 12.5}))
    driver = FlinkDriver(key_state, memory_state, legacy)
    key_state.update(KeyState(journal_id="job", next_seq=1, runs_finished=1).to_json(include_memory=False))

    driver.begin("k")
    state = driver.load("k")
    assert state is not None and state.short_term_memory == {"order": OBJECT, "order.total": 12.5}
    driver.store("k", state)

    assert legacy.text is None
    assert {p: json.loads(t) for p, t in memory_state.entries.items()} == {"order": OBJECT, "order.total": 12.5}


def test_keyed_state_of_schema_version_1_still_reads() -> None:
    # A restored operator compiles its plan, which reaches this module,
    # before it reads keyed state; this test reads state first.
    trust_package(__name__)
    v1 = json.dumps({
        "v": 1, "journal_id": "job", "next_seq": 3, "runs_finished": 2,
        "pending": [{"seq": 2, "value": {"$model": f"{__name__}:Checked", "data": {"facts": [1]}}, "ts": None}],
        "stm": None,
    })
    v1_memory = json.dumps({"order": OBJECT, "order.total": 12.5, "order.ops": {"$set": {"qty": 1}}})

    state = KeyState.from_json(v1, v1_memory)

    assert isinstance(state.pending[0].value, Checked) and state.pending[0].value.facts == [1]
    driver = LocalDriver()
    driver.states["k"] = state
    _run(Agent().add_action("read", [InputEvent], read_order), ["next"], InMemoryJournalStore(), driver=driver)
    assert driver.outputs[-1] == {"k": {"total": 12.5, "ops": {"$set": {"qty": 1}}}}


def test_a_queued_record_read_from_schema_version_1_is_written_back_in_the_current_form() -> None:
    """A record read from an earlier release's state is encoded anew when
    the state is next written (version 2 entries are written back as read)."""
    trust_package(__name__)
    v1 = json.dumps({
        "v": 1, "journal_id": "job", "next_seq": 3, "runs_finished": 2,
        "pending": [{"seq": 2, "value": {"$model": f"{__name__}:Checked", "data": {"facts": [1]}}, "ts": None}],
        "stm": None,
    })

    written = json.loads(KeyState.from_json(v1, "{}").to_json(include_memory=False))

    assert written["v"] == 2
    assert written["pending"][0]["value"]["$pydantic"] == f"{__name__}:Checked"
    again = KeyState.from_json(json.dumps(written), "{}").pending[0].value
    assert isinstance(again, Checked) and again.facts == [1]


def test_a_key_state_copy_has_every_field_in_containers_of_its_own() -> None:
    state = KeyState(
        journal_id="job", next_seq=4, pending=[PendingRecord(3, {"x": 1}, 7)], short_term_memory={"a": 1},
        runs_finished=3, callback_deadlines=[["cb", 9, 3]], steering=[[0, "m"]], next_steering_seq=1,
        usage={"records": 3}, failed=[[1, "r", 5]], budget={"v": 1}, memory_reads={"a"},
    )

    copy = state.copy()

    for name in (f.name for f in dataclasses.fields(KeyState)):
        if name in ("short_term_memory", "memory_reads"):  # a driver keeps memory apart
            continue
        mine, theirs = getattr(state, name), getattr(copy, name)
        assert theirs == mine, name
        assert isinstance(mine, (str, int)) or theirs is not mine, f"{name} shares its container"
    assert copy.short_term_memory == {} and copy.memory_reads is None
    copy.callback_deadlines[0][1] = 10
    assert state.callback_deadlines == [["cb", 9, 3]]


def read_order(event: InputEvent, ctx: Any) -> None:
    if event.input == "next":
        ctx.send_event(OutputEvent(output={"total": ctx.short_term_memory.get("order.total"),
                                           "ops": ctx.short_term_memory.get("order.ops")}))


def echo_types(event: InputEvent, ctx: Any) -> None:
    record = event.input
    ctx.send_event(OutputEvent(output={
        "at": record["at"].isoformat(), "at_type": type(record["at"]).__name__,
        "tags": sorted(record["tags"]), "tags_type": type(record["tags"]).__name__,
    }))


DATED = {"at": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc), "tags": {"b", "a"}}
DATED_OUTPUT = {"at": "2024-05-01T12:30:00+00:00", "at_type": "datetime", "tags": ["a", "b"], "tags_type": "set"}


def test_an_input_with_a_datetime_and_a_set_runs_and_keeps_its_types_after_a_restore() -> None:
    agent = Agent().add_action("echo", [InputEvent], echo_types)
    driver = _run(agent, [DATED], InMemoryJournalStore())
    assert driver.outputs == [{"k": DATED_OUTPUT}]

    state = driver.states["k"]
    state.pending.append(PendingRecord(state.next_seq, DATED))  # queued behind a busy record, say
    restored = KeyState.from_json(state.to_json())
    assert restored.pending[0].value == DATED and isinstance(restored.pending[0].value["tags"], set)


class Opaque:
    pass


def test_a_refused_input_record_names_key_record_and_field_on_the_local_runner() -> None:
    agent = Agent().add_action("echo", [InputEvent], echo_types)

    with pytest.raises(InputRecordError) as refused:
        _run(agent, [DATED, {"at": DATED["at"], "rows": [1, Opaque()]}], InMemoryJournalStore(), key="order-7")

    error = refused.value
    assert (error.key, error.seq, error.path) == ("order-7", 1, "record.rows[1]")
    assert "input record #1 of key 'order-7'" in str(error) and "Opaque" in str(error)
    assert isinstance(error, TypeError)
