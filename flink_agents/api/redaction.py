"""Which values are secrets, and how they are hidden wherever they would print.

The rule (one place; docs/guarantees.md, "Security", states it for users):

- A value is secret by its *name* (a descriptor argument, a field, a
  configuration key, a mapping key at any depth) when the name, in
  snake_case (``apiKey``, ``x-api-key`` and ``journal.postgres.password``
  read ``api_key``, ``x_api_key``, ``journal_postgres_password``), is one of
  ``token``, ``password``, ``passwd``, ``secret``, ``authorization``,
  ``auth``, ``credential(s)``, ``cookie``, ``apikey``, or ends in ``_``
  followed by one of them or by ``key`` (``api_key``, ``private_key``,
  ``access_token``, ``client_secret``). A bare ``key`` is not secret. A
  mapping under such a name is not hidden whole: its own keys decide (a
  JSON schema's ``"password": {"type": "string"}`` stays readable).
- Every value of a mapping named ``headers`` or ``*_headers`` is secret
  (an ``Authorization`` or ``X-Goog-Api-Key`` header alike); header names
  stay visible.
- Inside any string: the password of a URL's userinfo
  (``postgresql://user:secret@host/db``), the value of a secret-named
  ``name=value`` pair (libpq's ``password=secret``, a query's
  ``?api_key=...``) and the credentials after ``Bearer``/``Basic``.

``redact`` applies the rule to a value (a copy; the original is untouched)
and writes ``REDACTED`` (``"***"``) in place of each secret; ``None`` and
``""`` stay as they are, so one can still see that no key was set.

A secret can also be given by reference, ``secret_from_env("NAME")``
(``{"$secret": "env:NAME"}``): the reference is what plans, JSON and logs
hold, and the runtime reads the variable where the resource is built
(``resolve_secrets``), so the secret never enters the plan.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

__all__ = [
    "REDACTED",
    "SECRET_REFERENCE",
    "KEEP_SECRETS",
    "find_redacted",
    "is_secret_name",
    "is_secret_reference",
    "redact",
    "redact_text",
    "redacted_for_serialization",
    "resolve_secrets",
    "secret_from_env",
]

REDACTED = "***"
SECRET_REFERENCE = "$secret"

_WORDS = ("token", "password", "passwd", "secret", "authorization", "auth", "credential", "credentials",
          "cookie", "apikey")
_SUFFIXES = tuple(f"_{word}" for word in _WORDS + ("key",))
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
# scheme://user:password@  (the user stays; an empty user too)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*):(?P<secret>[^@/?#\s]+)@")
# name=value (also --name=value); the value quoted, or up to a blank, &, ; or a comma
_PAIR = re.compile(
    r"(?P<head>(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]*)\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&;,]+)"
)
# Bearer <token>, Basic <base64 of 8 or more characters>, any case
_SCHEME_CREDENTIALS = re.compile(r"(?P<head>\b(?i:bearer)\s+|\b(?i:basic)\s+(?=[A-Za-z0-9+/]{8,}))[A-Za-z0-9._~+/=-]+")


def _snake(name: str) -> str:
    return _NOT_WORD.sub("_", _CAMEL.sub("_", str(name)).lower()).strip("_")


def is_secret_name(name: str) -> bool:
    """Whether a value under ``name`` is a secret (the rule above)."""
    snake = _snake(name)
    return snake in _WORDS or snake.endswith(_SUFFIXES)


def _holds_headers(name: str) -> bool:
    snake = _snake(name)
    return snake == "headers" or snake.endswith("_headers")


def is_secret_reference(value: Any) -> bool:
    """Whether ``value`` is a ``secret_from_env`` reference."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(SECRET_REFERENCE), str)


def secret_from_env(variable: str) -> dict:
    """A reference to the secret in environment variable ``variable`` where
    the resource is built (a Flink TaskManager, or this process on the local
    runner): ``api_key=secret_from_env("OPENAI_API_KEY")`` in a
    ``ResourceDescriptor``."""
    if not isinstance(variable, str) or not variable:
        raise ValueError(f"secret_from_env needs an environment variable name, got {variable!r}")
    return {SECRET_REFERENCE: f"env:{variable}"}


def _hidden(value: Any) -> Any:
    return value if value in (None, "") or is_secret_reference(value) else REDACTED


def redact(value: Any, name: str | None = None) -> Any:
    """A copy of ``value`` with its secrets replaced by ``REDACTED``.

    Args:
        value: Any value; mappings, lists and tuples are walked, strings
            scanned, anything else kept.
        name: The name ``value`` goes by (an argument, a key), if any.
    """
    if is_secret_reference(value):
        return dict(value)
    secret = name is not None and is_secret_name(name)
    if secret and isinstance(value, (list, tuple)):
        return type(value)(redact(item, name) for item in value)
    if secret and not isinstance(value, Mapping):  # a mapping's own keys decide (a schema of "password")
        return _hidden(value)
    if isinstance(value, Mapping):
        if name is not None and _holds_headers(name):
            return {key: _hidden(item) for key, item in value.items()}
        return {key: redact(item, str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item) for item in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


# The serialization context that keeps secrets in a model's dump (equality
# of plans compares the real values); every other dump is redacted.
KEEP_SECRETS = {"secrets": "keep"}


def redacted_for_serialization(value: Any, context: Any) -> Any:
    """``value`` for a pydantic field serializer: ``redact(value)``, unless
    the dump's ``context`` is ``KEEP_SECRETS``."""
    return value if context == KEEP_SECRETS else redact(value)


def _pair(match: re.Match) -> str:
    return match["head"] + REDACTED if is_secret_name(match["name"]) else match[0]


def redact_text(text: str) -> str:
    """``text`` (a message, a DSN, a URL) with URL passwords, secret-named
    ``name=value`` pairs and ``Bearer``/``Basic`` credentials replaced by
    ``REDACTED``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}:{REDACTED}@", text)
    text = _PAIR.sub(_pair, text)
    return _SCHEME_CREDENTIALS.sub(lambda m: m["head"] + REDACTED, text)


def resolve_secrets(value: Any, where: str = "value") -> Any:
    """``value`` with each ``secret_from_env`` reference replaced by the
    variable's value (mappings, lists and tuples walked; a copy).

    Raises:
        ValueError: A reference names no variable set here, or a scheme other
            than ``env:``; the message names ``where`` (with the path of the
            reference) and the variable, never a value.
    """
    if is_secret_reference(value):
        scheme, _, variable = value[SECRET_REFERENCE].partition(":")
        if scheme != "env" or not variable:
            raise ValueError(f"{where}: secret reference {value[SECRET_REFERENCE]!r} is not 'env:NAME'")
        if variable not in os.environ:
            raise ValueError(f"{where}: the environment variable {variable} (a secret reference) is not set here")
        return os.environ[variable]
    if isinstance(value, Mapping):
        return {key: resolve_secrets(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(resolve_secrets(item, f"{where}[{n}]") for n, item in enumerate(value))
    return value


def find_redacted(value: Any, where: str = "value") -> str | None:
    """The path of the first placeholder that ``redact`` wrote in ``value``
    (``REDACTED`` itself, or a URL whose password is ``REDACTED``), or None."""
    if isinstance(value, str):
        return where if value == REDACTED or f":{REDACTED}@" in value else None
    if isinstance(value, Mapping) and not is_secret_reference(value):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = find_redacted(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found is not None:
            return found
    return None
