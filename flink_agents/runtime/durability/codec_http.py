"""HTTP clients' requests and responses inside journaled exceptions.

The errors HTTP clients raise carry their request and response as objects:
``httpx.HTTPStatusError`` (``.request``, ``.response``), the provider SDKs'
``APIStatusError`` (OpenAI's, Anthropic's: an ``httpx.Response``),
``requests.HTTPError`` (a ``requests.Response``; the OpenAI SDK's own copy
of httpx, ``httpx2``, alike), ``aiohttp.ClientResponseError``
(an ``aiohttp.RequestInfo`` in its args, response headers as a multidict).
The codec cannot carry those objects as they are, and a caller's
``except ... as e: e.response.status_code`` must work on the first run and
on a replay alike. So inside an exception (``codec_exceptions``) each is
written as a snapshot of what callers check, ``{"$http": kind, ...}``, and
rebuilt as a real object of the same class:

- a request: its method and URL (never its headers or body: they carry the
  credentials);
- a response: status code, reason, URL, headers and body text, bounded
  (``MAX_HEADERS`` headers of up to ``MAX_HEADER_CHARS`` characters,
  ``MAX_TEXT_CHARS`` of text), ``Set-Cookie`` and authorization headers
  left out.

URLs keep their path and query, with a userinfo password and secret-named
query values (``?api_key=``, ``&token=``) redacted (``api.redaction``). A
rebuilt response has been read: its body is the bounded text. Libraries are
never imported here: an object of a library that is not loaded has no
snapshot, and a snapshot of one reads back only where it is loaded.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Tuple

from flink_agents.api.redaction import redact_text

__all__ = ["MAX_HEADERS", "MAX_HEADER_CHARS", "MAX_TEXT_CHARS", "TAG", "rebuild", "snapshot"]

TAG = "$http"
MAX_HEADERS = 64
MAX_HEADER_CHARS = 1024
MAX_TEXT_CHARS = 8192
# Response headers that grant access (a session cookie) are not journaled.
_LEFT_OUT = frozenset({"set-cookie", "set-cookie2", "authorization", "proxy-authorization", "cookie"})


def _url(url: Any) -> str:
    return redact_text(str(url))


def _headers(items: Any) -> List[List[str]]:
    kept = []
    for name, value in items:
        if str(name).lower() in _LEFT_OUT:
            continue
        kept.append([str(name), str(value)[:MAX_HEADER_CHARS]])
        if len(kept) == MAX_HEADERS:
            break
    return kept


def _text(read: Callable[[], str]) -> str | None:
    try:
        return read()[:MAX_TEXT_CHARS]
    except Exception:  # a streamed body never read, or bytes that do not decode: no text then
        return None


def _module(name: str) -> Any:
    return sys.modules.get(name)


# --- snapshots ---------------------------------------------------------------------


def snapshot(value: Any) -> Dict[str, Any] | None:
    """The snapshot of an HTTP request, response, request info or header
    multidict of httpx, requests or aiohttp; None for anything else."""
    module = type(value).__module__.partition(".")[0]
    take = _SNAPSHOTS.get(module)
    return take(value) if take is not None else None


def _httpx(value: Any) -> Dict[str, Any] | None:
    library = type(value).__module__.partition(".")[0]  # httpx, or the OpenAI SDK's httpx2
    httpx = _module(library)
    if isinstance(value, httpx.Request):
        return {TAG: "httpx.Request", "lib": library, "method": value.method, "url": _url(value.url)}
    if isinstance(value, httpx.Response):
        request = value._request  # the property raises when a response has none
        return {
            TAG: "httpx.Response", "lib": library, "status": value.status_code,
            "headers": _headers(value.headers.multi_items()), "text": _text(lambda: value.text),
            "request": None if request is None else _httpx(request),
        }
    return None


def _requests(value: Any) -> Dict[str, Any] | None:
    requests = _module("requests")
    if isinstance(value, (requests.PreparedRequest, requests.Request)):
        return {TAG: "requests.Request", "method": value.method, "url": _url(value.url)}
    if isinstance(value, requests.Response):
        return {
            TAG: "requests.Response", "status": value.status_code, "reason": value.reason,
            "url": _url(value.url), "headers": _headers(value.headers.items()),
            "text": _text(lambda: value.text) if value._content is not False else None,
            "request": None if value.request is None else _requests(value.request),
        }
    return None


def _aiohttp(value: Any) -> Dict[str, Any] | None:
    aiohttp = _module("aiohttp")
    if isinstance(value, aiohttp.RequestInfo):
        return {TAG: "aiohttp.RequestInfo", "method": value.method, "url": _url(value.url),
                "real_url": _url(value.real_url)}
    return None


def _multidict(value: Any) -> Dict[str, Any] | None:
    multidict = _module("multidict")
    if isinstance(value, (multidict.MultiDictProxy, multidict.MultiDict)):
        insensitive = isinstance(value, (multidict.CIMultiDictProxy, multidict.CIMultiDict))
        proxy = isinstance(value, multidict.MultiDictProxy)
        return {TAG: "multidict", "items": _headers(value.items()), "ci": insensitive, "proxy": proxy}
    return None


_SNAPSHOTS: Dict[str, Callable[[Any], Dict[str, Any] | None]] = {
    "httpx": _httpx, "httpx2": _httpx, "requests": _requests, "aiohttp": _aiohttp, "multidict": _multidict,
}


# --- rebuilding --------------------------------------------------------------------


def rebuild(data: Dict[str, Any]) -> Any:
    """The object a snapshot was taken of, rebuilt (see the module docstring).

    Raises:
        ValueError: An unknown snapshot kind.
        ImportError: Its library is not loaded here (nothing is imported).
    """
    kind = data[TAG]
    build = _REBUILDS.get(kind)
    if build is None:
        raise ValueError(f"unknown HTTP snapshot kind {kind!r}")
    name = data.get("lib") or kind.partition(".")[0]
    library = _module(name) if name in _SNAPSHOTS else None
    if library is None:
        raise ImportError(f"a journaled {kind} needs {name}, which is not loaded here (nothing is imported)")
    return build(library, data)


def _httpx_request(httpx: Any, data: Dict[str, Any]) -> Any:
    return httpx.Request(data["method"], data["url"])


def _httpx_response(httpx: Any, data: Dict[str, Any]) -> Any:
    request = None if data.get("request") is None else _httpx_request(httpx, data["request"])
    text = data.get("text")
    headers = [(name, value) for name, value in data["headers"] if name.lower() != "content-encoding"]
    return httpx.Response(data["status"], headers=headers, content=(text or "").encode("utf-8"), request=request)


def _requests_request(requests: Any, data: Dict[str, Any]) -> Any:
    request = requests.PreparedRequest()
    request.method, request.url = data["method"], data["url"]
    return request


def _requests_response(requests: Any, data: Dict[str, Any]) -> Any:
    response = requests.Response()
    response.status_code, response.reason, response.url = data["status"], data["reason"], data["url"]
    response.headers = requests.structures.CaseInsensitiveDict(data["headers"])
    text = data.get("text")
    response._content = (text or "").encode("utf-8")
    response.encoding = "utf-8"
    if data.get("request") is not None:
        response.request = _requests_request(requests, data["request"])
    return response


def _aiohttp_request_info(aiohttp: Any, data: Dict[str, Any]) -> Any:
    from multidict import CIMultiDict, CIMultiDictProxy  # aiohttp's own dependency, loaded with it
    from yarl import URL

    return aiohttp.RequestInfo(URL(data["url"]), data["method"], CIMultiDictProxy(CIMultiDict()), URL(data["real_url"]))


def _multidict_rebuild(multidict: Any, data: Dict[str, Any]) -> Any:
    items: List[Tuple[str, str]] = [(name, value) for name, value in data["items"]]
    mapping = (multidict.CIMultiDict if data["ci"] else multidict.MultiDict)(items)
    if data["proxy"]:
        return (multidict.CIMultiDictProxy if data["ci"] else multidict.MultiDictProxy)(mapping)
    return mapping


_REBUILDS: Dict[str, Callable[[Any, Dict[str, Any]], Any]] = {
    "httpx.Request": _httpx_request, "httpx.Response": _httpx_response,
    "requests.Request": _requests_request, "requests.Response": _requests_response,
    "aiohttp.RequestInfo": _aiohttp_request_info, "multidict": _multidict_rebuild,
}
