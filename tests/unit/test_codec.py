"""The typed codec (``runtime.durability.codec``): values come back with their types,
or are refused at write time naming where they are; exceptions come back as
themselves; earlier payloads still read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import uuid
from collections import Counter, OrderedDict, namedtuple
from decimal import Decimal
from enum import Enum, Flag, IntEnum
from typing import Any, Dict, List, Tuple, Type
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel

from flink_agents.api.events.event import Event, OutputEvent
from flink_agents.runtime.durability.codec import EncodeError, decode, dumps, encode, loads, plain_json, round_trip
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.runtime.durability.codec_exceptions import decode_outcome, encode_outcome, encode_result
from flink_agents.runtime.errors import ReplayedError
from flink_agents.runtime.execution.event_codec import decode_event, encode_event
from tests.support.pythons import ExceptionGroup, StrEnum


# These tests play the job: the codec reads back classes of its own module
# (in a job, the engine trusts the packages its plan reaches).
trust_package(__name__)


class Tier(StrEnum):
    GOLD = "gold"


class Priority(IntEnum):
    HIGH = 1


class Perm(Flag):
    R = 1
    W = 2


class Sku(Enum):
    PAIR = ("a", 1)


class Line(BaseModel):
    sku: str
    extra: Any = None


class Order(BaseModel):
    lines: List[Line]
    meta: Any = None
    pair: Tuple[int, int] = (0, 0)


@dataclasses.dataclass(frozen=True)
class Price:
    amount: Decimal
    currency: Any = "EUR"


class Step(Event):
    payload: Any = None


class PriceError(Exception):
    """A user exception whose __init__ takes two arguments."""

    def __init__(self, sku: str, price: float) -> None:
        super().__init__(f"{sku} costs {price}")
        self.sku = sku
        self.price = price


class RetryAfter(Exception):
    """args are the constructor's arguments; str() is its own."""

    def __init__(self, seconds: int, reason: str) -> None:
        super().__init__(seconds, reason)

    def __str__(self) -> str:
        return f"retry after {self.args[0]} s: {self.args[1]}"


class Opaque:
    pass


class HidesItsState(Exception):
    def __init__(self, thing: Any) -> None:
        super().__init__("hidden")
        self.thing = thing

    def __str__(self) -> str:
        return f"holds {self.thing!r}"


BERLIN = ZoneInfo("Europe/Berlin")

ROUND_TRIPS = [
    {1: 9.5, 2: "x"},
    (1, "a", (2, 3)),
    {3, 1, 2},
    frozenset({"a", "b"}),
    b"\x00\xffraw",
    dt.datetime(2024, 3, 31, 2, 30, tzinfo=BERLIN),
    dt.datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN, fold=1),
    dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
    dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-5), "EST")),
    dt.datetime(2024, 1, 2, 3, 4),
    dt.date(2024, 2, 29),
    dt.time(23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.timedelta(days=-2, seconds=5, microseconds=7),
    Decimal("1.10"),
    Decimal("-0"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Tier.GOLD,
    Priority.HIGH,
    Perm.R | Perm.W,
    Sku.PAIR,
    Order(lines=[Line(sku="a", extra={1: Tier.GOLD})], meta=(1, {2}), pair=(3, 4)),
    Price(Decimal("9.99"), currency=("EUR", 2)),
    {"$set": [1], "$model": "x", "plain": {"$tuple": 1}},
    {Tier.GOLD: [Priority.HIGH], (1, 2): None},
    [math.inf, -math.inf],
    {"nested": [{"deep": (b"x", dt.date(2020, 1, 1))}]},
    Step(payload={"when": dt.datetime(2024, 1, 1)}),
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_a_value_reads_back_equal_and_of_the_same_types(value: Any) -> None:
    back = loads(dumps(value))

    assert back == value
    assert _types(back) == _types(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        assert back.tzinfo == value.tzinfo and back.fold == value.fold and back.utcoffset() == value.utcoffset()


def _types(value: Any) -> Any:
    """The type tree of ``value`` (so 1 vs True vs 1.0, tuple vs list, enum vs str differ)."""
    if isinstance(value, dict):
        return (type(value), [(_types(k), _types(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value), [_types(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value), sorted(repr(_types(v)) for v in value))
    if isinstance(value, BaseModel):
        return (type(value), _types(dict(value.__dict__)), _types(value.__pydantic_extra__ or {}))
    if dataclasses.is_dataclass(value):
        return (type(value), _types(dataclasses.asdict(value)))
    return type(value)


def test_a_nan_reads_back_as_nan() -> None:
    assert math.isnan(loads(dumps(float("nan"))))


def test_the_issue_example_keeps_int_keys_tuples_enums_and_uuids() -> None:
    value = {"prices": {1: 9.5}, "pair": (1, 2), "tier": Tier.GOLD, "id": uuid.UUID(int=7)}

    back = loads(dumps(value))

    assert back["prices"][1] == 9.5
    assert isinstance(back["pair"], tuple)
    assert back["tier"] is Tier.GOLD
    assert isinstance(back["id"], uuid.UUID)


def test_an_any_field_of_a_model_keeps_its_type_and_nothing_is_validated_again() -> None:
    order = Order(lines=[Line(sku="a")], meta={"when": dt.date(2024, 1, 1), "ids": (1, 2)})

    back = round_trip(order)

    assert isinstance(back.meta["when"], dt.date) and isinstance(back.meta["ids"], tuple)
    assert back.model_fields_set == order.model_fields_set


def test_a_model_keeps_which_fields_were_set_and_its_extras() -> None:
    step = Step(payload=1, note=(1, 2))

    back = round_trip(step)

    assert back.model_extra == {"note": (1, 2)}
    assert back.model_fields_set == step.model_fields_set
    assert round_trip(Line(sku="a")).model_dump(exclude_unset=True) == {"sku": "a"}


def test_equal_sets_encode_equally_whatever_their_order() -> None:
    a = {("b", 2), ("a", 1), 3}
    b = {3, ("a", 1), ("b", 2)}

    assert dumps(a) == dumps(b)
    assert dumps({"s": frozenset(range(50))}) == dumps({"s": frozenset(reversed(range(50)))})


def test_a_dict_whose_keys_look_like_tags_cannot_be_mistaken_for_one() -> None:
    mongo_update = {"$set": {"qty": 1}, "$inc": {"n": 2}}

    assert loads(dumps(mongo_update)) == mongo_update
    assert loads(dumps({"$memory_object": 1})) == {"$memory_object": 1}


@pytest.mark.parametrize(
    "value, where, type_name",
    [
        (Opaque(), "value", "Opaque"),
        ({"a": [1, Opaque()]}, r"value\.a\[1\]", "Opaque"),
        ({1: Opaque()}, r"value\[1\]", "Opaque"),
        (Counter(a=1), "value", "Counter"),
        (OrderedDict(a=1), "value", "OrderedDict"),
        (namedtuple("P", "x")(1), "value", "P"),
        (bytearray(b"x"), "value", "bytearray"),
        (dt.datetime(2024, 1, 1, tzinfo=ZoneInfo.no_cache("UTC").__class__("UTC")), None, None),
        ((lambda: 1), "value", "function"),
    ],
)
def test_a_value_that_cannot_come_back_as_it_was_is_refused_naming_path_and_type(value: Any, where: Any, type_name: Any) -> None:
    if where is None:  # a ZoneInfo is fine: the control case
        assert round_trip(value) == value
        return
    with pytest.raises(TypeError, match=rf"^{where} is a .*{type_name}") as refused:
        encode(value)

    assert isinstance(refused.value, EncodeError)


def test_a_class_defined_inside_a_function_is_refused_at_write_time() -> None:
    class Local(BaseModel):
        x: int = 1

    with pytest.raises(TypeError, match="Local.*defined inside a function"):
        encode({"v": Local()})
    with pytest.raises(TypeError, match="Local.*defined inside a function"):  # every time: a refusal is not remembered
        encode([Local()])


def test_a_refused_value_before_a_key_that_needs_the_tagged_form_is_named_by_that_form() -> None:
    with pytest.raises(TypeError, match=r"^value\['a'\] is a .*Opaque"):
        encode({"a": Opaque(), 1: "x"})
    with pytest.raises(TypeError, match=r"^value\.b\.a is a .*Opaque"):
        encode({"b": {"a": Opaque(), "$tag": 1}})


def test_enum_members_and_models_encode_the_same_the_first_time_and_after() -> None:
    values = [Tier.GOLD, Priority.HIGH, Order(lines=[Line(sku="a", extra=Perm.R)], meta={"k": Sku.PAIR}), Line(sku="b")]
    first = [encode(v) for v in values]

    assert [encode(v) for v in values] == first
    assert [decode(e) for e in first] == values
    assert [type(decode(e)) for e in first] == [type(v) for v in values]


# --- time zones: only datetime.timezone and zoneinfo.ZoneInfo ----------------------------------


class _CustomZone(dt.tzinfo):
    """A hand-written tzinfo: a fixed +01:00 that is not a datetime.timezone."""

    def utcoffset(self, when: Any) -> dt.timedelta:
        return dt.timedelta(hours=1)

    def dst(self, when: Any) -> dt.timedelta:
        return dt.timedelta(0)

    def tzname(self, when: Any) -> str:
        return "CUSTOM"


def _dateutil() -> Any:
    return pytest.importorskip("dateutil.tz")


def _pytz() -> Any:
    return pytest.importorskip("pytz")


def _other_zones() -> List[Any]:
    """tzinfo objects the codec cannot carry; pytz / dateutil ones skip when not installed."""
    return [
        pytest.param(_CustomZone, id="custom-tzinfo"),
        pytest.param(lambda: _pytz().timezone("Europe/Berlin"), id="pytz-zone"),
        pytest.param(lambda: _pytz().utc, id="pytz-utc"),
        pytest.param(lambda: _pytz().FixedOffset(60), id="pytz-fixed-offset"),
        pytest.param(lambda: _dateutil().gettz("Europe/Berlin"), id="dateutil-tzfile"),
        pytest.param(lambda: _dateutil().tzutc(), id="dateutil-tzutc"),
        pytest.param(lambda: _dateutil().tzoffset("X", 3600), id="dateutil-tzoffset"),
        pytest.param(lambda: _dateutil().tzlocal(), id="dateutil-tzlocal"),
    ]


def _clocks(zone: Any) -> List[Tuple[Any, str, str]]:
    """(value, path the refusal names, what it is) for a datetime and a time in
    ``zone``, alone and nested in a dict and a list."""
    when = dt.datetime(2024, 10, 27, 2, 30, tzinfo=zone)
    at = dt.time(2, 30, tzinfo=zone)
    return [
        (when, "value", "datetime"),
        (at, "value", "time"),
        ({"order": {"placed": [1, when]}}, r"value\.order\.placed\[1\]", "datetime"),
        ([{"at": at}], r"value\[0\]\.at", "time"),
        ({"k": (dt.date(2024, 1, 1), {when})}, r"value\.k\[1\]\[0\]", "datetime"),
    ]


@pytest.mark.parametrize("make_zone", _other_zones())
def test_a_datetime_or_time_in_another_tzinfo_is_refused_naming_path_and_zone_type(make_zone: Any) -> None:
    """Read back as a fixed offset, such a value would be the same instant in
    another tzinfo: date arithmetic across DST would differ after a replay."""
    zone = make_zone()
    for value, where, what in _clocks(zone):
        with pytest.raises(EncodeError, match=rf"^{where} is a {what} with time zone .*\({type(zone).__name__}\)"):
            encode(value)
        with pytest.raises(EncodeError):
            dumps(value)


@pytest.mark.parametrize(
    "zone",
    [
        pytest.param(BERLIN, id="zoneinfo-berlin"),
        pytest.param(ZoneInfo("America/New_York"), id="zoneinfo-new-york"),
        pytest.param(ZoneInfo("UTC"), id="zoneinfo-utc"),
        pytest.param(dt.timezone.utc, id="timezone-utc"),
        pytest.param(dt.timezone(dt.timedelta(hours=5, minutes=30)), id="timezone-offset"),
        pytest.param(dt.timezone(dt.timedelta(hours=-5), "EST"), id="timezone-named"),
    ],
)
def test_a_datetime_or_time_in_a_zoneinfo_or_timezone_reads_back_with_the_same_tzinfo(zone: Any) -> None:
    when = dt.datetime(2024, 10, 27, 2, 30, tzinfo=zone, fold=1)
    at = dt.time(2, 30, tzinfo=zone)
    value = {"when": when, "at": at, "nested": [when, {"at": at}, (when,)]}

    back = loads(dumps(value))

    assert back == value
    for original, read in [(when, back["when"]), (at, back["at"]), (when, back["nested"][0]),
                           (at, back["nested"][1]["at"]), (when, back["nested"][2][0])]:
        assert type(read) is type(original)
        assert type(read.tzinfo) is type(zone), (read, type(read.tzinfo))
        assert read.fold == original.fold
        if isinstance(zone, ZoneInfo):
            assert read.tzinfo.key == zone.key and read.tzinfo is zone
        else:
            assert read.tzinfo.utcoffset(None) == zone.utcoffset(None)
            assert read.tzinfo.tzname(None) == zone.tzname(None)
        if isinstance(read, dt.datetime):
            assert read.utcoffset() == original.utcoffset() and read.dst() == original.dst()
            # after the DST change, the day's arithmetic follows the zone
            assert (read + dt.timedelta(days=200)).utcoffset() == (original + dt.timedelta(days=200)).utcoffset()


def test_the_earlier_model_form_still_reads() -> None:
    legacy = {"$model": f"{Line.__module__}:Line", "data": {"sku": "a", "extra": None}}

    assert decode(legacy) == Line(sku="a")


def test_plain_json_shows_values_for_people() -> None:
    shown = plain_json(encode({"order": Order(lines=[Line(sku="a")]), "tier": Tier.GOLD, 1: (2, 3)}))

    assert shown == {"order": {"lines": [{"sku": "a", "extra": None}], "meta": None, "pair": [0, 0]},
                     "tier": "gold", "1": [2, 3]}


# --- events ---------------------------------------------------------------------------


def test_an_event_reads_back_with_its_class_ids_and_typed_fields() -> None:
    event = OutputEvent(output={"tier": Tier.GOLD, "pair": (1, 2), 3: b"x"})
    event.id = uuid.UUID(int=3)

    back = decode_event(json.loads(json.dumps(encode_event(event))))

    assert type(back) is OutputEvent and back == event
    assert back.output["tier"] is Tier.GOLD and isinstance(back.output["pair"], tuple)


def test_an_event_field_the_codec_refuses_names_the_event_and_field() -> None:
    with pytest.raises(TypeError, match=r"event Step\.payload\.x is a collections\.Counter"):
        encode_event(Step(payload={"x": Counter(a=1)}))


def test_an_event_completion_of_the_earlier_form_still_reads() -> None:
    legacy = {"type": "flink_agents.api.events.event:OutputEvent",
              "fields": {"id": "00000000-0000-0000-0000-000000000003", "output": {"a": [1, 2]}}}

    back = decode_event(legacy)

    assert back.id == uuid.UUID(int=3) and back.output == {"a": [1, 2]}


# --- exceptions and call outcomes -------------------------------------------------------


def _raised(payload: str, expected: Type[BaseException]) -> BaseException:
    """What ``decode_outcome(payload)`` raises, which must be an ``expected``."""
    with pytest.raises(expected) as raised:
        decode_outcome(payload)
    return raised.value


def _json_error() -> json.JSONDecodeError:
    try:
        json.loads('{"a": ')
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "error",
    [
        _json_error(),
        KeyError("sku-1"),
        PriceError("sku-1", 9.5),
        RetryAfter(30, "rate limited"),
        ConnectionError("reset"),
        FileNotFoundError(2, "No such file", "/x"),
        TimeoutError(),
        ImportError("no module x", name="x", path="/x.py"),
        ExceptionGroup("two", [ValueError("a"), KeyError("b")]),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_exception_reads_back_as_itself(error: BaseException) -> None:
    back = _raised(encode_outcome(error=error, call="lookup"), type(error))

    assert type(back) is type(error)
    assert str(back) == str(error)
    assert repr(back.args) == repr(error.args)
    # By repr: exceptions held in attributes (the 3.10 ExceptionGroup backport's) compare by identity.
    assert {k: repr(v) for k, v in vars(back).items()} == {k: repr(v) for k, v in vars(error).items()}


def test_the_issue_exceptions_are_caught_by_their_own_except_branches() -> None:
    caught = []
    for error in (_json_error(), KeyError("sku-1"), PriceError("sku-1", 9.5)):
        try:
            decode_outcome(encode_outcome(error=error, call="c"))
        except json.JSONDecodeError as exc:
            caught.append(("json", exc.pos, exc.doc))
        except KeyError as exc:
            caught.append(("key", str(exc)))
        except PriceError as exc:
            caught.append(("price", exc.sku, exc.price))

    assert caught == [("json", 6, '{"a": '), ("key", "'sku-1'"), ("price", "sku-1", 9.5)]


def test_an_exception_that_cannot_be_rebuilt_is_refused_when_raised_naming_call_and_type() -> None:
    error = HidesItsState(Opaque())

    with pytest.raises(TypeError, match=r"call lookup raised HidesItsState.*cannot be rebuilt") as refused:
        encode_outcome(error=error, call="lookup")

    assert refused.value.__cause__ is error


def test_an_attribute_the_codec_cannot_carry_is_left_out_when_type_args_and_message_survive() -> None:
    error = ConnectionError("reset")
    error.response = Opaque()  # e.g. an HTTP client's response object
    error.status = 503

    back = _raised(encode_outcome(error=error, call="c"), ConnectionError)

    assert str(back) == "reset" and back.status == 503 and not hasattr(back, "response")


def test_a_result_that_cannot_be_kept_is_refused_naming_the_call_and_path() -> None:
    with pytest.raises(TypeError, match=r"call lookup#2 returned .*result\.rows\[0\] is a .*Opaque"):
        encode_outcome({"rows": [Opaque()]}, call="lookup#2")


@pytest.mark.parametrize("value", ROUND_TRIPS + [2**80, "lone \ud800 surrogate", "ünï"], ids=lambda v: type(v).__name__)
def test_a_first_run_gets_the_result_a_replay_of_its_payload_reads(value: Any) -> None:
    payload, first_run = encode_result(value, call="c")
    replayed = decode_outcome(payload)
    assert payload == encode_outcome(value, call="c")
    assert first_run == replayed and _types(first_run) == _types(replayed)


def test_earlier_payloads_still_replay() -> None:
    assert decode_outcome(json.dumps({"ok": {"a": [1, 2]}})) == {"a": [1, 2]}
    assert decode_outcome(json.dumps({"ok": {"$model": f"{Line.__module__}:Line", "data": {"sku": "a"}}})) == Line(sku="a")
    back = _raised(json.dumps({"error": {"type": "builtins:ValueError", "message": "bad"}}), ValueError)
    assert type(back) is ValueError and str(back) == "bad"
    gone = _raised(json.dumps({"error": {"type": f"{__name__}:Gone", "message": "bad"}}), ReplayedError)
    assert isinstance(gone, ReplayedError) and gone.type_name == f"{__name__}:Gone"


def test_a_result_reads_back_typed_through_an_outcome() -> None:
    value: Dict[Any, Any] = {1: 9.5, "t": (1, 2), "e": Priority.HIGH}

    assert _types(decode_outcome(encode_outcome(value, call="c"))) == _types(value)


# --- classes of the job's main script (runtime.durability.codec_classes) ---------------------------


def _as_shipped_from_a_main_script(name: str, base: type = BaseModel) -> type:
    """A class as a Flink worker gets one that cloudpickle shipped by value
    from the job's script: module ``__main__``, absent from this ``__main__``."""
    cls = type(name, (base,), {"__module__": "__main__", "__qualname__": name, "__annotations__": {"x": int}})
    assert not hasattr(__import__("__main__"), name)
    return cls


def test_a_main_script_class_the_agent_does_not_reach_is_refused_on_the_first_run_naming_it() -> None:
    Unreached = _as_shipped_from_a_main_script("Unreached")

    with pytest.raises(TypeError, match=r"record\.v is a Unreached: class Unreached of the job's main script "
                                         r"\(__main__\) cannot be found by name.*actions"):
        encode({"v": Unreached(x=1)}, "record")


def test_main_script_classes_reached_from_the_plan_are_registered_and_read_back() -> None:
    from flink_agents.api.agents.agent import Agent
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime.durability.codec_reachable import register_plan_classes

    Detail = _as_shipped_from_a_main_script("ShippedDetail")
    Signal = _as_shipped_from_a_main_script("ShippedSignal", Event)
    namespace = {"Detail": Detail}
    exec("def act(event, ctx):\n    ctx.send_event(Detail(x=1))\n", namespace)  # noqa: S102
    act = namespace["act"]
    act.__module__ = "__main__"
    agent = Agent().add_action("act", [Signal], act)

    assert register_plan_classes(AgentPlan.from_agent(agent)) == 2

    assert round_trip(Detail(x=2)) == Detail(x=2)
    assert type(decode_event(encode_event(Signal(x=3)))) is Signal



def test_an_output_schema_class_of_the_main_script_on_a_setup_is_registered() -> None:
    """A setup's ``output_schema=Verdict`` (defined in the job's script) is
    only a constructor argument, never reached from an action's code; the
    validated answer in the ChatResponseEvent must still be read back."""
    from flink_agents.api.agents.agent import Agent
    from flink_agents.api.agents.types import OutputSchema
    from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime.durability.codec_reachable import register_plan_classes

    Verdict = _as_shipped_from_a_main_script("ShippedVerdict")
    Rating = _as_shipped_from_a_main_script("ShippedRating")
    agent = Agent()
    agent.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.LOCAL_SETUP, connection="c", output_schema=Verdict,
    ))
    agent.add_resource("other", ResourceType.CHAT_MODEL, ResourceDescriptor(
        clazz=ResourceName.ChatModel.LOCAL_SETUP, connection="c", output_schema=OutputSchema(Rating),
    ))

    assert register_plan_classes(AgentPlan.from_agent(agent)) == 2

    assert round_trip(Verdict(x=2)) == Verdict(x=2) and round_trip(Rating(x=1)) == Rating(x=1)
    # The chat action rebuilds a request's schema from its serialized form on every tool round.
    assert OutputSchema.model_validate(OutputSchema(Verdict).model_dump()).output_schema is Verdict


def test_a_runtime_class_named_by_its_module_before_the_runtime_was_grouped_still_decodes():
    # Journals and keyed state written before runtime/ got its sub-packages
    # name runtime classes by their old, flat module paths.
    from flink_agents.runtime.execution.state import PendingRecord

    old = {"$dataclass": "flink_agents.runtime.state:PendingRecord", "fields": {"seq": 3, "value": "x", "ts": None}}

    assert decode(old) == PendingRecord(3, "x", None)


# -- the class walk while other threads change user globals ------------------------------------

_SHARED_CACHE: Dict[int, Any] = {i: object() for i in range(2000)}


def _reads_the_shared_cache() -> int:
    return len(_SHARED_CACHE)


def test_the_class_walk_survives_a_global_dict_changing_on_another_thread() -> None:
    """Subtasks of one Python worker open their operators (and walk the
    plan's functions) on threads of their own while user code may change a
    global dict the functions reference; the walk must not fail with
    "dictionary changed size during iteration" (it did, in a CI run)."""
    import threading

    from flink_agents.runtime.durability.codec_reachable import register_reachable_classes

    stop = threading.Event()

    def churn() -> None:
        n = 10_000
        while not stop.is_set():
            _SHARED_CACHE[n] = object()
            _SHARED_CACHE.pop(n - 1000, None)
            n += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(200):
            register_reachable_classes([_reads_the_shared_cache])
    finally:
        stop.set()
        worker.join(timeout=5)


class _DisplayNamedError(ValueError):
    """An exception class shown under another name (as Pydantic AI's
    ``_HTTPModelServerError`` shows as ``ModelServerError``)."""


_DisplayNamedError.__qualname__ = "DisplayedError"
_DisplayNamedError.__name__ = "DisplayedError"


def test_an_exception_class_renamed_for_display_is_journaled_under_its_module_name() -> None:
    payload = encode_outcome(error=_DisplayNamedError("boom"), call="c")
    assert "_DisplayNamedError" in payload
    with pytest.raises(_DisplayNamedError, match="boom"):
        decode_outcome(payload)



@pytest.mark.parametrize("value", [
    {"review": "Très bien, 5★ \u0000 \"quoted\"", "n": [1, -2.5, True, None]},
    {"big": 2**70, "small": -(2**63)},  # beyond 64 bits: orjson refuses, json.dumps writes it
    {"lone": "\ud800 surrogate"},  # orjson refuses a lone surrogate; json.dumps escapes it
    {"inf": float("inf"), "t": (1, 2)},  # tagged by the codec, never written as null
])
def test_journal_text_reads_back_as_the_same_value_and_is_storable_utf8(value: Any) -> None:
    from flink_agents.runtime.durability.codec import json_text

    text = json_text(encode(value))
    assert decode(json.loads(text)) == value
    text.encode("utf-8")  # SQLite and PostgreSQL take it: no lone surrogate left raw
