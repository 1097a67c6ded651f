"""Exceptions through the codec, and the journal's call outcomes.

An exception is written as its type (``module:qualname``), ``args`` (through
the codec), ``str()`` and instance attributes (``__dict__``). What the codec
cannot carry: an HTTP client's request or response (httpx, requests,
aiohttp; the provider SDKs' errors hold httpx's) is kept as a bounded
snapshot and rebuilt as the same class (``codec_http``), so
``e.response.status_code`` works on the first run and on a replay alike;
any other such arg becomes ``None`` and any other such attribute is left
out, both named in ``"dropped"`` and in a note on the rebuilt exception
(``add_note``: "journaled without: ..."). The message and text args are
journaled with their secrets redacted (``api.redaction.redact_text``: a URL's
password, ``?api_key=...``, ``Bearer ...``), so an HTTP client's message
naming a URL with a key does not put the key in a shared journal; the first
run raises that redacted exception too, as a replay will. It is rebuilt as ``cls(*args)`` if that gives the same
``args`` and ``str()``, else as ``cls.__new__`` with ``args`` set (so
``json.JSONDecodeError(msg, doc, pos)``, ``KeyError("sku-1")`` and an
exception whose ``__init__`` takes other arguments than its ``args`` come
back as themselves), then its attributes are restored. Encoding rebuilds it
at once and refuses, with a ``TypeError`` naming the type, one that does not
come back with the same type, ``args`` and ``str()``: an action learns it on
the first run, not on a replay. Tracebacks, ``__cause__`` and
``__context__`` are not kept.

A call outcome (``encode_outcome``) is ``{"c": 2, "ok": value}`` or
``{"c": 2, "error": {"type", "message", "args", "attrs"}}``; payloads without
``"c"`` are the earlier form (``{"ok": ...}`` / ``{"error": {"type",
"message"}}``) and still read.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Tuple

from flink_agents._pycompat import add_note
from flink_agents.api.redaction import redact_text
from flink_agents.runtime.durability import codec, codec_http
from flink_agents.runtime.durability.codec_classes import EXCEPTION, Kind, resolve_class
from flink_agents.runtime.errors import ReplayedError
from flink_agents.runtime.durability.values import decode_value as decode_legacy_value

__all__ = ["CODEC_VERSION", "decode_exception", "decode_outcome", "encode_exception", "encode_outcome"]

CODEC_VERSION = 2  # marks payloads written by this codec ("c")
_LEGACY_ERROR = Kind("error", EXCEPTION.what, EXCEPTION.accepts)  # the earlier outcome form


def encode_exception(exc: BaseException) -> Dict[str, Any]:
    """The data of ``exc`` (inside the codec's ``$exception`` tag).

    What the codec carries is kept; an HTTP client's request or response
    becomes its snapshot (``codec_http``); any other arg the codec cannot
    carry becomes ``None`` and any other attribute is left out, each named
    in ``"dropped"`` (and in a note on the rebuilt exception).

    Raises:
        codec.Refused: ``exc`` cannot be written so that it reads back as
            itself (type not found by name, or a rebuilt instance of another
            type or ``str()``).
    """
    cls = type(exc)
    try:
        message = redact_text(str(exc))
    except Exception as broken:  # a user __str__ that raises
        raise codec.Refused(f"is a {cls.__qualname__} whose str() raises {broken!r}") from None
    dropped: List[str] = []
    data = {
        "type": codec._name(cls, EXCEPTION),
        "message": message,
        "args": [_carry(arg, f"args[{i}]", dropped) for i, arg in enumerate(exc.args)],
        "attrs": _carried_attributes(exc, dropped),
    }
    keywords = _keyword_state(exc)
    if keywords:
        data["kw"] = codec._enc_dict(keywords)
    if dropped:
        data["dropped"] = dropped
    reason = _rebuild_difference(exc, data)
    if reason:
        raise codec.Refused(
            f"is a {cls.__module__}.{cls.__qualname__} exception that cannot be rebuilt as itself "
            f"for a replay ({reason}); raise an exception whose args rebuild it "
            "(e.g. call super().__init__ with the constructor's arguments)"
        )
    return data


def _carry(value: Any, where: str, dropped: List[str]) -> Any:
    """``value`` encoded (a text with its secrets redacted), or its HTTP
    snapshot, or ``None`` (named in ``dropped``)."""
    if type(value) is str:
        return redact_text(value)
    try:
        return codec._enc(value)
    except codec.Refused:
        pass
    snap = codec_http.snapshot(value)
    if snap is not None:
        return snap
    dropped.append(f"{where} ({type(value).__module__}.{type(value).__qualname__})")
    return None


def _carried_attributes(exc: BaseException, dropped: List[str]) -> Dict[str, Any]:
    kept: Dict[str, Any] = {}
    for name, value in getattr(exc, "__dict__", {}).items():
        lost: List[str] = []
        carried = _carry(value, name, lost)
        if lost:
            dropped.append(f"attribute {lost[0]}")  # documented: left out, and named
        else:
            kept[name] = carried
    return {"$dict": kept} if any(name[:1] == "$" for name in kept) else kept


def _decode_carried(data: Any) -> Any:
    if isinstance(data, dict) and codec_http.TAG in data:
        return codec_http.rebuild(data)
    return codec.decode(data)


def _keyword_state(exc: BaseException) -> Dict[str, Any]:
    """State of built-in exceptions kept outside ``args`` and ``__dict__``,
    given to the constructor again: an ``OSError``'s file names, an
    ``ImportError``'s module name and path."""
    if isinstance(exc, OSError) and (exc.filename is not None or exc.filename2 is not None):
        return {"filename": exc.filename, "filename2": exc.filename2}
    if isinstance(exc, ImportError) and (exc.name is not None or exc.path is not None):
        return {"name": exc.name, "path": exc.path}
    return {}


def _rebuild_difference(exc: BaseException, data: Dict[str, Any]) -> str:
    """Why ``data`` does not rebuild ``exc`` ("" if it does)."""
    try:
        rebuilt = decode_exception(data, codec.decode)
    except Exception as failed:  # a user __init__ or __new__ may raise anything
        return f"rebuilding it raised {failed!r}"
    if type(rebuilt) is not type(exc):
        return f"it comes back as {type(rebuilt).__qualname__}"
    message = _message(rebuilt)
    # With a part dropped (named in a note), str() may show its placeholder.
    if message != data["message"] and not (data.get("dropped") and message is not None):
        return f"its message comes back as {message!r} instead of {data['message']!r}"
    return "" if [_carry(arg, "", []) for arg in rebuilt.args] == data["args"] else "its args come back different"


def decode_exception(data: Dict[str, Any], decode: Callable[[Any], Any]) -> BaseException:
    """The exception written by ``encode_exception``.

    Raises:
        ImportError, AttributeError: Its class cannot be found.
        ClassNotAllowed: ``data`` names something that is not an exception
            class the job may hold (nothing is imported or called).
    """
    cls = resolve_class(data["type"], EXCEPTION)
    args = tuple(_decode_carried(arg) for arg in data["args"])
    attrs = data["attrs"]
    attrs = {name: _decode_carried(value) for name, value in (attrs.get("$dict", attrs)).items()}
    if "kw" in data:
        exc = _construct_builtin(cls, args, attrs, decode(data["kw"]))
    else:
        exc = _construct(cls, args, attrs)
        if exc is None or _message(exc) != data["message"]:
            exc = _restore(cls, args, attrs)
    if data.get("dropped"):
        add_note(exc, f"journaled without: {', '.join(data['dropped'])} (the codec cannot carry them)")
    return exc


def _message(exc: BaseException) -> str | None:
    """``str(exc)``; None if its ``__str__`` raises (an attribute left out)."""
    try:
        return str(exc)
    except Exception:  # a user __str__ reading an attribute that was left out
        return None


def _construct(cls: type, args: tuple, attrs: Dict[str, Any]) -> BaseException | None:
    """``cls(*args)`` with ``attrs`` set, if that gives an instance of ``cls``
    with these ``args``; else None."""
    try:
        exc = cls(*args)
    except Exception:  # its __init__ takes other arguments: restored instead
        return None
    if type(exc) is not cls or exc.args != args:
        return None
    exc.__dict__.update(attrs)
    return exc


def _construct_builtin(cls: type, args: tuple, attrs: Dict[str, Any], keywords: Dict[str, Any]) -> BaseException:
    """An ``OSError`` with file names or an ``ImportError`` with name/path."""
    if issubclass(cls, OSError):
        exc = cls(*args[:2], keywords["filename"], None, keywords["filename2"])
    else:
        exc = cls(*args, **keywords)
    exc.__dict__.update(attrs)
    return exc


def _restore(cls: type, args: tuple, attrs: Dict[str, Any]) -> BaseException:
    """An instance of ``cls`` made without ``__init__`` (as pickle does)."""
    try:
        exc = cls.__new__(cls, *args)
    except Exception:  # a __new__ of its own with other arguments
        exc = BaseException.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(attrs)
    return exc


def encode_outcome(result: Any = None, error: BaseException | None = None, *, call: str) -> str:
    """A journaled call's outcome as JSON text: its result, or the exception it raised.

    Args:
        result: What the call returned (ignored if ``error`` is given).
        error: What the call raised.
        call: The call, for errors (its function id or step and ordinal).

    Returns:
        ``{"c": 2, "ok": <encoded result>}`` or ``{"c": 2, "error": {...}}``.

    Raises:
        TypeError: The result cannot be read back with its type, or the
            exception cannot be rebuilt as itself; the message names ``call``
            and the offending path and type (raised from ``error``).
    """
    if error is None:
        return codec.json_text({"c": CODEC_VERSION, "ok": _encoded_result(result, call)})
    try:
        data = codec.encode(error, "exception")
    except TypeError as exc:
        raise TypeError(
            f"call {call} raised {type(error).__qualname__}: {error}; it cannot be journaled so that a "
            f"replay raises it again: {exc}"
        ) from error
    return codec.json_text({"c": CODEC_VERSION, "error": data["$exception"]})


def encode_result(result: Any, *, call: str) -> Tuple[str, Any]:
    """``(encode_outcome(result), decode_outcome(that payload))`` with the
    result decoded from its encoded data, not from the payload's text: the
    same value (the text holds that data as JSON, which reads back as the
    same data), without parsing the text the first run just wrote.

    Raises:
        TypeError: As ``encode_outcome``.
    """
    encoded = _encoded_result(result, call)
    return codec.json_text({"c": CODEC_VERSION, "ok": encoded}), codec.decode(encoded)


def _encoded_result(result: Any, call: str) -> Any:
    try:
        return codec.encode(result, "result")
    except TypeError as exc:
        raise TypeError(f"call {call} returned a value the journal cannot keep with its type: {exc}") from None


def decode_outcome(payload: str) -> Any:
    """The result written by ``encode_outcome`` (or the earlier form).

    Returns:
        The call's result.

    Raises:
        BaseException: The exception the call raised, rebuilt (same type,
            ``args`` and ``str()``).
        ReplayedError: The exception's class is gone (the code changed
            since it was journaled), or an earlier-form exception cannot be
            rebuilt from its message.
        ClassNotAllowed: The payload names a class it may not (of another
            kind, or of a package the job does not use): a forged or
            corrupted row; nothing it names was imported or called.
    """
    data = json.loads(payload)
    if "c" not in data:
        return _decode_legacy(data)
    if "ok" in data:
        return codec.decode(data["ok"])
    error = data["error"]
    try:
        exc = decode_exception(error, codec.decode)
    except (ImportError, AttributeError):
        raise ReplayedError(error["type"], error["message"]) from None
    raise exc


def _decode_legacy(data: Dict[str, Any]) -> Any:
    if "ok" in data:
        return decode_legacy_value(data["ok"])
    error = data["error"]
    try:
        cls = resolve_class(error["type"], _LEGACY_ERROR)  # ClassNotAllowed goes up: nothing is called
    except (ImportError, AttributeError):  # the class is gone
        cls = None
    rebuilt: Any = None
    if cls is not None:
        try:
            rebuilt = cls(error["message"])
        except Exception:  # it takes other arguments
            rebuilt = None
    if isinstance(rebuilt, Exception):
        raise rebuilt
    raise ReplayedError(error["type"], error["message"])
