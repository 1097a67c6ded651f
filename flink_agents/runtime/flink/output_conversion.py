"""Converting an agent's outputs to a Flink output type, with misfits named.

PyFlink serializes what a Python function yields with the coder of the
function's output type; a value that does not fit fails there, deep in a
Java stack that names neither the key nor the field. ``OutputConverter``
converts each output first (a ``Row``, a mapping, a pydantic model, a
dataclass or a tuple to the ``Row`` a ``Types.ROW_NAMED`` describes, say)
and names any misfit: ``OutputTypeError``. Used by ``to_table`` and by
``to_datastream(output_type)`` (``runtime.flink.table``).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from typing import Any, Callable, List, Mapping

from pydantic import BaseModel
from pyflink.common import Row
from pyflink.common.typeinfo import (
    BasicArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    DateTypeInfo,
    ExternalTypeInfo,
    ListTypeInfo,
    LocalTimeTypeInfo,
    MapTypeInfo,
    ObjectArrayTypeInfo,
    PickledBytesTypeInfo,
    PrimitiveArrayTypeInfo,
    RowTypeInfo,
    TimestampTypeInfo,
    TimeTypeInfo,
    TupleTypeInfo,
    TypeInformation,
)

__all__ = ["OutputConverter", "OutputTypeError", "converter"]

_INT_RANGES = {
    BasicType.BYTE: 8,
    BasicType.SHORT: 16,
    BasicType.INT: 32,
    BasicType.LONG: 64,
}


class OutputTypeError(TypeError):
    """An agent output does not fit the output type given to ``to_table``
    (or ``to_datastream``).

    Attributes:
        key: The key whose run produced the output.
        path: Where in the output the misfit is (``"review"``,
            ``"tags[2]"``, ``"address.zip"``; ``""`` for the output itself).
        value: The value that does not fit.
    """

    def __init__(self, key: Any, path: str, value: Any, expected: str, output_type: Any) -> None:
        self.key, self.path, self.value = key, path, value
        where = f"field {path!r}" if path else "the output"
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(
            f"output of key {key!r} does not fit the output type {output_type}: "
            f"{where} is {shown} ({type(value).__name__}), expected {expected}"
        )


class _Misfit(Exception):
    """Raised inside a conversion; ``OutputConverter`` adds key and type."""

    def __init__(self, path: str, value: Any, expected: str) -> None:
        super().__init__(path)
        self.path, self.value, self.expected = path, value, expected


_Convert = Callable[[Any, str], Any]  # (value, path) -> converted value


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _fields_of(value: Any, names: List[str], path: str) -> List[Any] | None:
    """The values of ``value`` for the fields ``names`` by name, or None if
    ``value`` has no names (then it is taken by position)."""
    if isinstance(value, Row):
        if not hasattr(value, "_fields"):
            return None
        named: Mapping[str, Any] = dict(zip(value._fields, value._values))
    elif isinstance(value, Mapping):
        named = value
    elif isinstance(value, BaseModel):
        named = {name: getattr(value, name) for name in type(value).model_fields}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        named = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    else:
        return None
    missing = [n for n in names if n not in named]
    extra = [str(n) for n in named if n not in names]
    if missing or extra:
        problems = ([f"missing {missing}"] if missing else []) + ([f"not in the type {extra}"] if extra else [])
        raise _Misfit(path, value, f"the fields {names} ({'; '.join(problems)})")
    return [named[n] for n in names]


def _row(row_type: RowTypeInfo) -> _Convert:
    names = list(row_type.get_field_names())
    fields = [converter(t) for t in row_type.get_field_types()]

    def convert(value: Any, path: str) -> Any:
        values = _fields_of(value, names, path)
        if values is None:
            if isinstance(value, (str, bytes)) or not isinstance(value, (Row, tuple, list)):
                raise _Misfit(path, value, f"a Row, mapping, pydantic model, dataclass or tuple with fields {names}")
            values = list(value)
            if len(values) != len(names):
                raise _Misfit(path, value, f"{len(names)} fields {names}, not {len(values)} positional values")
        row = Row(*(convert_field(v, _join(path, n)) for convert_field, v, n in zip(fields, values, names)))
        row.set_field_names(names)
        if isinstance(value, Row):
            row.set_row_kind(value.get_row_kind())
        return row

    return convert


def _tuple(tuple_type: TupleTypeInfo) -> _Convert:
    fields = [converter(t) for t in tuple_type.get_field_types()]

    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, (tuple, list, Row)) or len(value) != len(fields):
            raise _Misfit(path, value, f"a tuple of {len(fields)} values")
        return tuple(f(v, f"{path}[{i}]") for i, (f, v) in enumerate(zip(fields, value)))

    return convert


def _sequence(element_type: TypeInformation) -> _Convert:
    element = converter(element_type)

    def convert(value: Any, path: str) -> Any:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise _Misfit(path, value, "a list or tuple")
        return [element(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return convert


def _map(map_type: MapTypeInfo) -> _Convert:
    key, item = converter(map_type._key_type_info), converter(map_type._value_type_info)

    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise _Misfit(path, value, "a mapping")
        return {key(k, f"{path}[{k!r}]"): item(v, f"{path}[{k!r}]") for k, v in value.items()}

    return convert


def _instance(classes: tuple, expected: str, exclude: tuple = (), cast: Callable[[Any], Any] | None = None) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, classes) or isinstance(value, exclude):
            raise _Misfit(path, value, expected)
        return cast(value) if cast is not None else value

    return convert


def _integer(bits: int | None, name: str) -> _Convert:
    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Misfit(path, value, f"an int ({name})")
        if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise _Misfit(path, value, f"an int in the range of {name} ({bits} bits)")
        return int(value)

    return convert


def _basic(basic: BasicType) -> _Convert:
    if basic in _INT_RANGES:
        return _integer(_INT_RANGES[basic], basic.name)
    if basic == BasicType.BIG_INT:
        return _integer(None, "BIG_INT")
    if basic in (BasicType.FLOAT, BasicType.DOUBLE):
        return _instance((int, float), f"a number ({basic.name})", exclude=(bool,), cast=float)
    if basic == BasicType.BOOLEAN:
        return _instance((bool,), "a bool (BOOLEAN)")
    if basic == BasicType.STRING:
        return _instance((str,), "a str (STRING)")
    if basic == BasicType.CHAR:

        def char(value: Any, path: str) -> Any:
            if not isinstance(value, str) or len(value) != 1:
                raise _Misfit(path, value, "a str of one character (CHAR)")
            return value

        return char
    if basic == BasicType.BIG_DEC:
        return _instance((decimal.Decimal, int), "a Decimal or int (BIG_DEC)", exclude=(bool,), cast=decimal.Decimal)
    return _any  # INSTANT: pyflink's Instant, checked by its own type


def _any(value: Any, path: str) -> Any:
    return value


def _nullable(convert: _Convert) -> _Convert:
    """Fields, elements and map values may be null, as in Flink's SQL rows."""

    def nullable(value: Any, path: str) -> Any:
        return None if value is None else convert(value, path)

    return nullable


_LOCAL_TIMES = {
    LocalTimeTypeInfo.TimeType.LOCAL_DATE: (datetime.date, "a datetime.date (LOCAL_DATE)", (datetime.datetime,)),
    LocalTimeTypeInfo.TimeType.LOCAL_TIME: (datetime.time, "a datetime.time (LOCAL_TIME)", ()),
    LocalTimeTypeInfo.TimeType.LOCAL_DATE_TIME: (datetime.datetime, "a datetime.datetime (LOCAL_DATE_TIME)", ()),
}


def converter(type_info: TypeInformation) -> _Convert:
    """A conversion of values to ``type_info`` (``None`` passes: nullable).

    Types it does not know (and ``PICKLED_BYTE_ARRAY``) pass values as they
    are, for Flink's own serializer to judge.
    """
    if isinstance(type_info, ExternalTypeInfo):
        return converter(type_info._type_info)
    if isinstance(type_info, RowTypeInfo):
        convert = _row(type_info)
    elif isinstance(type_info, TupleTypeInfo):
        convert = _tuple(type_info)
    elif isinstance(type_info, BasicTypeInfo):
        convert = _basic(type_info._basic_type)
    elif isinstance(type_info, PrimitiveArrayTypeInfo) and type_info._element_type == BasicTypeInfo.BYTE_TYPE_INFO():
        convert = _instance((bytes, bytearray), "bytes (BYTE array)", cast=bytes)
    elif isinstance(type_info, (PrimitiveArrayTypeInfo, BasicArrayTypeInfo, ObjectArrayTypeInfo)):
        convert = _sequence(type_info._element_type)
    elif isinstance(type_info, ListTypeInfo):
        convert = _sequence(type_info.elem_type)
    elif isinstance(type_info, MapTypeInfo):
        convert = _map(type_info)
    elif isinstance(type_info, DateTypeInfo):
        convert = _instance((datetime.date,), "a datetime.date (DATE)", exclude=(datetime.datetime,))
    elif isinstance(type_info, TimeTypeInfo):
        convert = _instance((datetime.time,), "a datetime.time (TIME)")
    elif isinstance(type_info, TimestampTypeInfo):
        convert = _instance((datetime.datetime,), "a datetime.datetime (TIMESTAMP)")
    elif isinstance(type_info, LocalTimeTypeInfo):
        classes, expected, exclude = _LOCAL_TIMES[type_info._time_type]
        convert = _instance((classes,), expected, exclude=exclude)
    else:
        return _any
    return _nullable(convert)


class OutputConverter:
    """Converts an agent's outputs to ``output_type``.

    Args:
        output_type: A PyFlink ``TypeInformation``: ``Types.ROW_NAMED``,
            ``Types.ROW``, ``RowTypeInfo`` (also inside ``ExternalTypeInfo``),
            ``Types.TUPLE``, basic, time, array, list and map types. For a
            row, an output may be a ``Row`` (by field name if it has names,
            else by position), a mapping, a pydantic model or a dataclass
            (by field name: a missing or an extra field is a misfit), or a
            tuple or list (by position); nested values convert the same
            way. Ints widen to FLOAT/DOUBLE; nothing else is coerced
            (``"3"`` is no INT). ``None`` is allowed inside, not as the
            output itself.

    Raises:
        TypeError: ``output_type`` is not a ``TypeInformation``.
    """

    def __init__(self, output_type: TypeInformation) -> None:
        if not isinstance(output_type, TypeInformation):
            raise TypeError(
                f"output_type must be a pyflink TypeInformation (e.g. Types.ROW_NAMED([...], [...])), "
                f"not {type(output_type).__name__}"
            )
        self.output_type = output_type
        self.passes_through = isinstance(output_type, PickledBytesTypeInfo)
        self._convert = converter(output_type)

    def __call__(self, key: Any, output: Any) -> Any:
        """``output`` as ``output_type`` describes it.

        Raises:
            OutputTypeError: It does not fit; names ``key``, the field path
                and the value.
        """
        if self.passes_through:
            return output
        if output is None:
            raise OutputTypeError(key, "", output, "a value (not None)", self.output_type)
        try:
            return self._convert(output, "")
        except _Misfit as misfit:
            raise OutputTypeError(key, misfit.path, misfit.value, misfit.expected, self.output_type) from None
