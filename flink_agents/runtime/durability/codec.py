"""The typed codec: every value that crosses a journal, a checkpoint or keyed
state, as JSON that reads back as the same value, with its type.

JSON values pass through (``None``, ``bool``, ``int`` (up to
``sys.get_int_max_str_digits()`` digits, else refused), finite ``float``,
``str``, ``list``, dicts with ``str`` keys). Other values become one-key
tagged dicts (a few tags carry more keys beside the tag, which comes first):

=================================  ============================================
value                              encoded
=================================  ============================================
``tuple`` / ``set`` / ``frozenset``  ``{"$tuple"|"$set"|"$frozenset": [...]}``
                                   (set elements sorted by their encoding)
``bytes``                          ``{"$bytes": base64}``
``float`` nan, inf, -inf           ``{"$float": "nan"|"inf"|"-inf"}``
``datetime`` / ``date`` / ``time``   ``{"$datetime": iso, ["zone": key],
                                   ["tzname": name], ["fold": 1]}`` (likewise
                                   ``$date``, ``$time``): fixed offsets and
                                   ``zoneinfo`` zones kept
``timedelta``                      ``{"$timedelta": [days, seconds, microseconds]}``
``Decimal`` / ``UUID``             ``{"$decimal"|"$uuid": text}``
``Enum`` member (also StrEnum,     ``{"$enum": "module:qualname", "value": v}``
IntEnum, Flag)
pydantic model                     ``{"$pydantic": "module:qualname", "fields":
                                   {...}, ["extra": {...}], ["set": [...]]}``,
                                   fields through this codec (``Any`` fields
                                   keep their types); rebuilt validated
                                   against the class as it is now
                                   (``rebuild_model``), private attributes
                                   at defaults
dataclass instance                 ``{"$dataclass": "module:qualname", "fields": {...}}``
                                   (fields added since get their defaults)
exception                          ``{"$exception": {"type", "message", "args",
                                   "attrs"}}`` (``codec_exceptions``)
``pyflink.common.Row``              ``{"$row": "module:qualname", "values": [...],
                                   ["fields": [...]], ["kind": name]}``: field
                                   names and a ``RowKind`` other than INSERT
                                   kept (the class found by name on reading,
                                   so only PyFlink's code needs PyFlink)
dict with a non-str key            ``{"$map": [[key, value], ...]}``
dict with a key starting ``$``     ``{"$dict": {...}}`` (so no data reads as a tag)
=================================  ============================================

Anything else (and a subclass of a built-in type that is not an enum, such as
a ``Counter`` or a namedtuple) is refused with a ``TypeError`` naming the
path of the value and its type: it could not come back as it was.
The legacy form of pydantic models, ``{"$model": ..., "data": ...}``, still
reads (validated against the class). Output is deterministic: equal values
encode to equal JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import math
import sys
import uuid
from decimal import Decimal
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Tuple
from zoneinfo import ZoneInfo

import orjson
from pydantic import BaseModel, ValidationError

from flink_agents.runtime.durability.codec_classes import (
    DATACLASS, ENUM, EXCEPTION, MODEL, ROW, ClassNotAllowed, DecodeError, Kind, class_name, has_class_name,
    resolve_class,
)
from flink_agents.runtime.durability.derived_uuid import DerivedUUID

__all__ = [
    "ClassNotAllowed", "DecodeError", "Deferred", "EncodeError", "ValueNoLongerValid", "decode", "decode_outcome",
    "dumps", "encode", "encode_outcome", "encode_result", "loads", "plain_json", "round_trip", "surely_encodes",
]

_NOT_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class EncodeError(TypeError):
    """A value the codec refuses.

    Attributes:
        path: Where the value is (``"short_term_memory.order.items[2]"``).
        reason: What is wrong with it (its type, and why).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


class ValueNoLongerValid(DecodeError):
    """A stored model or dataclass value that its class, as it is now, cannot
    take (a field retyped beyond conversion, a field added without a default)."""


class Refused(Exception):
    """A value the codec cannot carry; ``path`` is filled on the way out."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.segments: List[str] = []


def encode(value: Any, path: str = "value") -> Any:
    """``value`` as JSON-able data (see the module docstring).

    Args:
        value: Any value.
        path: What ``value`` is, for errors (``"short_term_memory.order"``).

    Returns:
        Plain JSON data: dicts with str keys, lists, str, int, finite float,
        bool, None.

    Raises:
        EncodeError: A part of ``value`` cannot be encoded; the message names
            its path and type (a ``TypeError``).
    """
    try:
        return _enc(value)
    except Refused as refused:
        raise EncodeError(path + "".join(reversed(refused.segments)), refused.what) from None
    except RecursionError:
        raise EncodeError(path, "is nested too deeply (or holds itself)") from None


def decode(data: Any) -> Any:
    """Inverse of ``encode``. ``data`` is untrusted (a journal row, keyed
    state): a class it names is resolved only to the kind its tag promises
    and only among the classes the job holds (``codec_classes``); nothing
    else is imported or called.

    Raises:
        ClassNotAllowed: A class name the data may not use (a
            ``DecodeError``, so a ``ValueError``), naming tag and name.
        ValueError: An unknown tag.
        ClassGone: A class the data may name is not here (its module not
            loaded, or the code changed since it was written): a
            ``DecodeError`` and an ``ImportError``, naming tag and name.
    """
    kind = type(data)
    if kind is list:
        return [decode(v) for v in data]
    if kind is dict:
        for key in data:
            if key[:1] == "$":
                return _decode_tagged(key, data)
            break
        return {k: decode(v) for k, v in data.items()}
    return data


def dumps(value: Any, path: str = "value") -> str:
    """``encode(value)`` as compact JSON text.

    Raises:
        TypeError: As ``encode``.
    """
    return json_text(encode(value, path), ensure_ascii=False)


def json_text(data: Any, ensure_ascii: bool = True) -> str:
    """Compact JSON text of ``data``, which holds JSON values only, as
    ``encode`` returns them (no NaN or infinity: orjson would write them as
    ``null``), or ``Deferred`` parts, written as what their ``get`` returns.
    Written by orjson (ten times faster than ``json.dumps`` on a step
    completion; non-ASCII as UTF-8); where orjson refuses (an int beyond 64
    bits, a str with a lone surrogate), by ``json.dumps``, with non-ASCII
    escaped unless ``ensure_ascii`` is False. Both read back with
    ``json.loads`` as the same data; texts are not compared, only values.

    Raises:
        TypeError: ``data`` holds a value that is not JSON (as ``json.dumps``).
    """
    try:
        return orjson.dumps(data, default=_deferred_part).decode()
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=ensure_ascii, allow_nan=False,
                          default=_deferred_part)


class Deferred:
    """A part of a journal payload encoded only when the payload is written
    (``json_text``) or read (``get``), and then once: a step completion's
    event that no listener reads is never encoded by a run that writes no
    journal. Subclasses give ``_encode``; what it returns is JSON data, as
    ``encode`` returns it."""

    __slots__ = ("_encoded",)

    def __init__(self) -> None:
        self._encoded: Any = None

    def get(self) -> Any:
        """The encoded part (made on the first call)."""
        if self._encoded is None:
            self._encoded = self._encode()
        return self._encoded

    def _encode(self) -> Any:
        raise NotImplementedError


def _deferred_part(value: Any) -> Any:
    if isinstance(value, Deferred):
        return value.get()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def loads(text: str) -> Any:
    """Inverse of ``dumps``."""
    return decode(json.loads(text))


def round_trip(value: Any, path: str = "value") -> Any:
    """``decode(encode(value))``: what a reader of the encoded value gets.
    A value of plain JSON data (dicts with str keys not starting with
    ``$``, lists, str, bool, None, ints under the bound, finite floats),
    which both passes would only copy, is copied in one pass.

    Raises:
        TypeError: As ``encode``.
    """
    try:
        return _copy_plain(value)
    except (_NotPlain, RecursionError):  # the codec's own pass says what it makes of it
        return decode(encode(value, path))


class _NotPlain(Exception):
    """A part of the value needs the codec's tags."""


def _copy_plain(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if -_INT_BOUND < value < _INT_BOUND:
            return value
        raise _NotPlain
    if kind is float:
        if value - value == 0.0:  # finite
            return value
        raise _NotPlain
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str or key[:1] == "$":
                raise _NotPlain
            out[key] = _copy_plain(item)
        return out
    if kind is list:
        return [_copy_plain(item) for item in value]
    raise _NotPlain


def surely_encodes(value: Any, depth: int = 32) -> bool:
    """Whether ``encode(value)`` certainly succeeds, decided without
    encoding (no output is built): True for JSON data (any float: NaN and
    infinity have tags), UUIDs, tuples and lists, dicts with str keys, and
    enum members and pydantic models of classes whose names were checked
    before (``has_class_name``), made of such values, nested at most
    ``depth`` deep. False when unsure: ``encode`` then decides (and raises
    if it refuses)."""
    return surely_encode_all((value,), depth)


def surely_encode_all(values: Iterable[Any], depth: int = 32) -> bool:
    """``surely_encodes`` of each of ``values``: one loop per level, the
    scalars (most values) checked in it, without a call each."""
    for value in values:
        kind = type(value)
        if kind in _SURE_SCALARS:
            continue
        if kind is int:
            if -_SAFE_INT < value < _SAFE_INT:
                continue
            return False
        if depth == 0:
            return False
        if kind is list or kind is tuple:
            if not surely_encode_all(value, depth - 1):
                return False
        elif kind is dict:
            for key in value:
                if type(key) is not str:
                    return False
            if not surely_encode_all(value.values(), depth - 1):
                return False
        elif isinstance(value, Enum):
            if not has_class_name(kind, ENUM) or not surely_encode_all((value._value_,), depth - 1):
                return False
        elif isinstance(value, BaseModel):
            if not has_class_name(kind, MODEL):
                return False
            state = value.__dict__
            shape = _MODEL_SHAPES.get(kind)
            for name in kind.model_fields if shape is None else shape.fields:
                if name in state and not surely_encode_all((state[name],), depth - 1):
                    return False
            extra = value.__pydantic_extra__
            if extra and not surely_encode_all((extra,), depth - 1):
                return False
        else:
            return False
    return True


_SAFE_INT = 2**63  # ints below this always have JSON text (larger ones: encode checks the digits)
# Types (exact, not subclasses) whose every value encodes: one set lookup
# instead of a comparison each, in the check made twice per sent event.
_SURE_SCALARS = frozenset((str, bool, float, type(None), DerivedUUID, uuid.UUID))


# --- encoding ---------------------------------------------------------------------


def _enc(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if -_INT_BOUND < value < _INT_BOUND else _enc_big_int(value)
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        out = []
        for i, item in enumerate(value):
            try:
                out.append(_enc(item))
            except Refused as refused:
                refused.segments.append(f"[{i}]")
                raise
        return out
    if kind is dict:
        return _enc_dict(value)
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if isinstance(value, Enum):
        encoded = _enc_enum(value)
        _remember_encoder(kind, _enc_enum)  # its name checked: the next member goes straight there
        return encoded
    if isinstance(value, BaseModel):
        return _enc_model(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"$dataclass": _name(kind, DATACLASS), "fields": _enc_dict(fields)}
    if isinstance(value, BaseException):
        from flink_agents.runtime.durability.codec_exceptions import encode_exception

        return {"$exception": encode_exception(value)}
    if kind.__qualname__ == "Row" and kind.__module__ == _ROW_MODULE:
        return _enc_row(value)
    raise Refused(
        f"is a {kind.__module__}.{kind.__qualname__}, which the codec cannot carry with its type "
        "(supported: JSON values, tuple, set, frozenset, bytes, datetime, date, time, timedelta, "
        "Decimal, UUID, Enum, pydantic models, dataclasses, exceptions, pyflink.common.Row, "
        "dicts with any such keys)"
    )


# Ints below this bound in magnitude (640 digits: the least limit
# ``sys.set_int_max_str_digits`` accepts) always have JSON text.
_INT_BOUND = 10**640


def _enc_big_int(value: int) -> int:
    """``value`` if JSON text can carry it under this interpreter's
    ``sys.get_int_max_str_digits()`` (4300 digits by default), else refused:
    ``json.dumps`` would fail later, far from the code that handed it over."""
    try:
        str(value)
    except ValueError:
        raise Refused(
            f"is an int of about {int(value.bit_length() * 0.30103)} digits, more than JSON text can carry here "
            f"({sys.get_int_max_str_digits()} digits, sys.get_int_max_str_digits()); store it as a str"
        ) from None
    return value


def _enc_part(value: Any, segment: str) -> Any:
    try:
        return _enc(value)
    except Refused as refused:
        refused.segments.append(segment)
        raise


def _name(cls: type, kind: Kind) -> str:
    try:
        return class_name(cls, kind)
    except TypeError as exc:
        raise Refused(f"is a {cls.__qualname__}: {exc}") from None


def _enc_dict(value: Dict[Any, Any]) -> Any:
    # One pass for the common case (str keys, none starting with "$");
    # any other key: the tagged forms, from the start.
    out = {}
    for key, item in value.items():
        if type(key) is not str or key[:1] == "$":
            return _enc_tagged_dict(value)
        try:
            out[key] = _enc(item)
        except Refused as refused:
            if not all(type(k) is str and k[:1] != "$" for k in value):
                return _enc_tagged_dict(value)  # says it with the tagged form's path
            refused.segments.append(f".{key}")
            raise
    return out


def _enc_tagged_dict(value: Dict[Any, Any]) -> Any:
    if all(type(key) is str for key in value):
        return {"$dict": {key: _enc_part(item, f".{key}") for key, item in value.items()}}
    return {"$map": [[_enc_part(k, f"[{k!r}] (key)"), _enc_part(v, f"[{k!r}]")] for k, v in value.items()]}


def _enc_items(tag: str) -> Callable[[Any], Any]:
    def encode_items(value: Any) -> Any:
        items = [_enc_part(item, f"[{i}]") for i, item in enumerate(value)]
        if tag != "$tuple":  # sets: order by encoding, so equal sets encode equally
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return {tag: items}

    return encode_items


def _enc_enum(value: Enum) -> Any:
    return {"$enum": _name(type(value), ENUM), "value": _enc_part(value._value_, ".value")}


class _ModelShape:
    """What encoding a model class needs, worked out once per class: its
    checked name, its field names, and those names as a set (to tell
    whether every field was set)."""

    __slots__ = ("name", "fields", "all_set")

    def __init__(self, cls: type) -> None:
        self.name = _name(cls, MODEL)
        self.fields: Tuple[str, ...] = tuple(cls.model_fields)  # type: ignore[attr-defined]
        self.all_set = frozenset(self.fields)


_MODEL_SHAPES: Dict[type, _ModelShape] = {}


def _enc_model(value: BaseModel) -> Any:
    cls = type(value)
    shape = _MODEL_SHAPES.get(cls)
    if shape is None:
        shape = _ModelShape(cls)  # raises Refused for a class that cannot be named
        if len(_MODEL_SHAPES) >= _MAX_REMEMBERED:
            _MODEL_SHAPES.clear()
        _MODEL_SHAPES[cls] = shape
        _remember_encoder(cls, _enc_model)
    state = value.__dict__
    fields: Dict[str, Any] = {}
    for name in shape.fields:
        if name in state:  # field names are identifiers: never "$..."
            try:
                fields[name] = _enc(state[name])
            except Refused as refused:
                refused.segments.append(f".{name}")
                raise
    out: Dict[str, Any] = {"$pydantic": shape.name, "fields": fields}
    extra = value.__pydantic_extra__
    fields_set = value.__pydantic_fields_set__
    if extra:
        out["extra"] = _enc_dict(extra)
        if fields_set != shape.all_set | extra.keys():
            out["set"] = sorted(fields_set)
    elif fields_set != shape.all_set:
        out["set"] = sorted(fields_set)
    return out


# The module of ``pyflink.common.Row``, matched by name: the codec carries
# Rows without importing PyFlink (only runtime/flink does).
_ROW_MODULE = "pyflink.common.types"


def _enc_row(value: Any) -> Any:
    """A ``pyflink.common.Row``: its values through this codec, its field
    names (a Row built with keywords, or given names) and its ``RowKind``
    when not INSERT."""
    out: Dict[str, Any] = {
        "$row": _name(type(value), ROW),
        "values": [_enc_part(item, f"[{i}]") for i, item in enumerate(value._values)],
    }
    fields = value.__dict__.get("_fields")
    if fields is not None:
        out["fields"] = [_enc_part(name, f"(field name {i})") for i, name in enumerate(fields)]
    kind = value.get_row_kind()
    if kind.name != "INSERT":
        out["kind"] = kind.name
    return out


def _tz_fields(tz: Any, what: str) -> Dict[str, Any]:
    """How a value's time zone is written beside its ISO text."""
    if tz is None or tz is dt.timezone.utc:
        return {}
    if type(tz) is dt.timezone:
        name = tz.tzname(None)
        return {} if name == dt.timezone(tz.utcoffset(None)).tzname(None) else {"tzname": name}
    if type(tz) is ZoneInfo and tz.key is not None:
        return {"zone": tz.key}
    raise Refused(f"is a {what} with time zone {tz!r} ({type(tz).__name__}); the codec keeps "
                  "fixed offsets (datetime.timezone) and zoneinfo.ZoneInfo zones")


def _enc_clock(what: str) -> Callable[[Any], Any]:
    """The encoder of a ``datetime`` or ``time`` (``what``): ISO text, its
    zone (``_tz_fields``) and ``fold``."""
    def encode(value: Any) -> Any:
        extra = _tz_fields(value.tzinfo, what)
        text = (value.replace(tzinfo=None) if "zone" in extra else value).isoformat()
        out = {f"${what}": text, **extra}
        if value.fold:
            out["fold"] = 1
        return out

    return encode


_enc_datetime = _enc_clock("datetime")
_enc_time = _enc_clock("time")


def _enc_uuid(value: uuid.UUID) -> Any:
    return {"$uuid": str(value)}


_BUILT_IN_ENCODERS: Dict[type, Callable[[Any], Any]] = {
    tuple: _enc_items("$tuple"),
    set: _enc_items("$set"),
    frozenset: _enc_items("$frozenset"),
    bytes: lambda v: {"$bytes": base64.b64encode(v).decode("ascii")},
    dt.datetime: _enc_datetime,
    dt.date: lambda v: {"$date": v.isoformat()},
    dt.time: _enc_time,
    dt.timedelta: lambda v: {"$timedelta": [v.days, v.seconds, v.microseconds]},
    Decimal: lambda v: {"$decimal": str(v)},
    uuid.UUID: _enc_uuid,
    DerivedUUID: _enc_uuid,  # an event id: read back as the uuid.UUID it is
}
# By exact type: the built-in ones, and enum and model classes once their
# name was checked (``_remember_encoder``), so their values skip the
# isinstance chain. Bounded: a job has few such classes.
_ENCODERS: Dict[type, Callable[[Any], Any]] = dict(_BUILT_IN_ENCODERS)
_MAX_REMEMBERED = 4096


def _remember_encoder(cls: type, encoder: Callable[[Any], Any]) -> None:
    global _ENCODERS
    if cls not in _ENCODERS:
        if len(_ENCODERS) >= _MAX_REMEMBERED:
            _ENCODERS = dict(_BUILT_IN_ENCODERS)
        _ENCODERS[cls] = encoder


# --- decoding ---------------------------------------------------------------------


def _with_tz(value: Any, data: Dict[str, Any]) -> Any:
    if "zone" in data:
        value = value.replace(tzinfo=ZoneInfo(data["zone"]))
    elif "tzname" in data:
        value = value.replace(tzinfo=dt.timezone(value.utcoffset(), data["tzname"]))
    return value.replace(fold=1) if data.get("fold") else value


def _dec_model(data: Dict[str, Any]) -> Any:
    cls = resolve_class(data["$pydantic"], MODEL)
    values = decode(data["fields"])
    if "extra" in data:
        values.update(decode(data["extra"]))
    return rebuild_model(cls, values, data.get("set"))


def rebuild_model(cls: Any, values: Dict[str, Any], fields_set: Any = None) -> Any:
    """An instance of the pydantic model ``cls`` as the class is now, from
    ``values`` (field name -> decoded value) written by this or an earlier
    version of it: validated, so a field retyped since (``str`` to an
    ``Enum``) is converted and a field added with a default gets it. Values
    that are already of their field's type pass unchanged; ``fields_set``
    (the names set when it was written) is kept.

    Raises:
        ValueNoLongerValid: The values do not validate against the current
            class (a ``DecodeError``; the message names the class and the
            fields).
    """
    try:
        model = cls.model_validate(values, by_name=True)
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(model)'}: {e['msg']}" for e in invalid.errors(include_input=False)[:5]
        )
        raise ValueNoLongerValid(
            f"a stored {cls.__module__}.{cls.__qualname__} does not validate against the class as it is now "
            f"({problems}); the class changed in a way its stored values cannot follow "
            "(docs/durability.md, \"What a deploy may change\")"
        ) from None
    if fields_set is not None:
        object.__setattr__(model, "__pydantic_fields_set__", set(fields_set) & model.model_fields_set)
    return model


def _dec_row(data: Dict[str, Any]) -> Any:
    cls = resolve_class(data["$row"], ROW)
    row = cls(*decode(data["values"]))
    if "fields" in data:
        row.set_field_names(decode(data["fields"]))
    if "kind" in data:
        row.set_row_kind(type(row.get_row_kind())[data["kind"]])
    return row


def _dec_dataclass(data: Dict[str, Any]) -> Any:
    """A dataclass instance as its class is now, built without ``__init__``
    (as unpickling does): stored fields the class still declares, defaults
    (``default``, ``default_factory``) for fields added since; fields it
    dropped are left out."""
    cls = resolve_class(data["$dataclass"], DATACLASS)
    stored = decode(data["fields"])
    obj = cls.__new__(cls)
    for field in dataclasses.fields(cls):
        if field.name in stored:
            value = stored[field.name]
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            raise ValueNoLongerValid(
                f"a stored {cls.__module__}.{cls.__qualname__} has no field {field.name!r}, which the class "
                "declares now without a default; give the new field a default "
                "(docs/durability.md, \"What a deploy may change\")"
            )
        object.__setattr__(obj, field.name, value)
    return obj


def _dec_exception(data: Dict[str, Any]) -> Any:
    from flink_agents.runtime.durability.codec_exceptions import decode_exception

    return decode_exception(data["$exception"], decode)


_LEGACY_MODEL = Kind("$model", MODEL.what, MODEL.accepts)

_DECODERS: Dict[str, Callable[[Dict[str, Any]], Any]] = {
    "$tuple": lambda d: tuple(decode(v) for v in d["$tuple"]),
    "$set": lambda d: {decode(v) for v in d["$set"]},
    "$frozenset": lambda d: frozenset(decode(v) for v in d["$frozenset"]),
    "$bytes": lambda d: base64.b64decode(d["$bytes"]),
    "$float": lambda d: _NOT_FINITE[d["$float"]],
    "$datetime": lambda d: _with_tz(dt.datetime.fromisoformat(d["$datetime"]), d),
    "$date": lambda d: dt.date.fromisoformat(d["$date"]),
    "$time": lambda d: _with_tz(dt.time.fromisoformat(d["$time"]), d),
    "$timedelta": lambda d: dt.timedelta(*d["$timedelta"]),
    "$decimal": lambda d: Decimal(d["$decimal"]),
    "$uuid": lambda d: uuid.UUID(d["$uuid"]),
    "$enum": lambda d: resolve_class(d["$enum"], ENUM)(decode(d["value"])),
    "$pydantic": _dec_model,
    "$model": lambda d: resolve_class(d["$model"], _LEGACY_MODEL).model_validate(d["data"]),  # the legacy form
    "$dataclass": _dec_dataclass,
    "$row": _dec_row,
    "$exception": _dec_exception,
    "$dict": lambda d: {k: decode(v) for k, v in d["$dict"].items()},
    "$map": lambda d: {decode(k): decode(v) for k, v in d["$map"]},
}


def _decode_tagged(tag: str, data: Dict[str, Any]) -> Any:
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown codec tag {tag!r} in {json.dumps(data)[:200]}")
    return decoder(data)


# --- a plain view, for people ----------------------------------------------------


def plain_json(data: Any) -> Any:
    """Encoded ``data`` as plain JSON for display (progress records, logs):
    models and dataclasses as their fields, tuples and sets as lists, enums
    as their values, other tagged scalars as text, exceptions as
    ``"Type: message"``, non-str keys as text."""
    if isinstance(data, list):
        return [plain_json(v) for v in data]
    if not isinstance(data, dict):
        return data
    tag = next(iter(data), "")
    if tag[:1] != "$":
        return {k: plain_json(v) for k, v in data.items()}
    if tag in ("$tuple", "$set", "$frozenset"):
        return [plain_json(v) for v in data[tag]]
    if tag == "$row":
        values = [plain_json(v) for v in data["values"]]
        fields = data.get("fields")
        return dict(zip((_plain_key(plain_json(f)) for f in fields), values)) if fields is not None else values
    if tag in ("$pydantic", "$dataclass"):
        return {**plain_json(data["fields"]), **plain_json(data.get("extra", {}))}
    if tag == "$model":
        return plain_json(data["data"])
    if tag == "$enum":
        return plain_json(data["value"])
    if tag == "$dict":
        return {k: plain_json(v) for k, v in data[tag].items()}
    if tag == "$map":
        return {_plain_key(plain_json(k)): plain_json(v) for k, v in data[tag]}
    if tag == "$exception":
        error = data[tag]
        return f"{error['type'].rpartition(':')[2]}: {error['message']}"
    value = data[tag]
    return value if isinstance(value, str) else json.dumps(value)


def _plain_key(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(key)



def encode_outcome(result: Any = None, error: BaseException | None = None, *, call: str) -> str:
    """A journaled call's outcome as JSON text; see ``codec_exceptions.encode_outcome``."""
    from flink_agents.runtime.durability import codec_exceptions

    return codec_exceptions.encode_outcome(result, error, call=call)


def encode_result(result: Any, *, call: str) -> Tuple[str, Any]:
    """A call's result as its outcome's JSON text, and as a replay reads it;
    see ``codec_exceptions.encode_result``."""
    from flink_agents.runtime.durability import codec_exceptions

    return codec_exceptions.encode_result(result, call=call)


def decode_outcome(payload: str) -> Any:
    """The result, or the rebuilt exception raised; see ``codec_exceptions.decode_outcome``."""
    from flink_agents.runtime.durability import codec_exceptions

    return codec_exceptions.decode_outcome(payload)
