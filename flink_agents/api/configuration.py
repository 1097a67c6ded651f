"""Agent configuration: typed options over a flat key/value map.

The names follow Flink Agents 0.3.1's ``api/configuration.py``:
``ConfigOption`` (key, type, default), ``ReadableConfiguration``
(``get_int``/``get_float``/``get_bool``/``get_str``/``get(option)``),
``WritableConfiguration`` (``set_int``/``set_float``/``set_bool``/
``set_str``/``set(option, value)``) and ``Configuration`` (both). Here
``Configuration`` is concrete (0.3.1 keeps its implementation in
``plan/configuration.py``) and is also a mutable mapping, so code that used
the configuration as a dict (``config.update({...})``, ``config["k"]``,
``config.get("k", default)``, ``dict(config)``) keeps working.

Keys are flat strings; nested YAML (``chat: {async: true}``) is flattened to
dotted keys (``chat.async``), as 0.3.1 does when it reads the ``agent:``
section of Flink's ``config.yaml``. A configuration has two layers, code and
file: values set from code win over values loaded from a file, whatever the
order in which they were set.

An option may be spelled two ways (Flink Agents 0.3.1's key and ours, for
example ``job-identifier`` and ``job_id``): ``ConfigOption.aliases`` lists the
other spellings. Reading an option looks at every spelling; two spellings set
to different values in the same layer are a ``ValueError`` naming both keys.
Values are converted on read and on ``set``; a value that does not convert is
a ``ValueError`` naming the key and the value.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, MutableMapping, Tuple, Type

from flink_agents.api._config_values import convert_value, flatten_dict, load_agent_section, type_name
from flink_agents.api.redaction import redact

__all__ = [
    "ConfigAlias",
    "ConfigOption",
    "Configuration",
    "ConfigurationView",
    "ReadableConfiguration",
    "WritableConfiguration",
    "convert_value",
    "flatten_dict",
    "load_agent_section",
    "readable",
]

_MISSING: Any = object()


@dataclass(frozen=True)
class ConfigAlias:
    """Another spelling of an option's key.

    Attributes:
        key: The other key.
        config_type: The type of a value under this key (default: the
            option's type).
        to_option: Turns a converted value of this key into the option's
            value (for example seconds into milliseconds); default identity.
        note: What the alias means, for the docs (for example the unit).
    """

    key: str
    config_type: Type[Any] | None = None
    to_option: Callable[[Any], Any] | None = None
    note: str = ""


class ConfigOption:
    """A configuration key with its type, default and documentation.

    Args:
        key: The key, as written in code and in ``config.yaml``.
        config_type: ``int``, ``float``, ``bool``, ``str``, ``list``,
            ``dict`` or an ``Enum`` class. A ``dict`` option set as a nested
            mapping (flattened to dotted keys by ``Configuration`` and the
            YAML loader) reads as the flat remainder of its keys:
            ``usage.prices.gpt-4o.input: 2.5`` gives ``{"gpt-4o.input": 2.5}``.
        default: The value when no spelling of the key is set (not converted).
        description: What the option does, for the docs.
        aliases: Other spellings of the key: strings (same type and meaning)
            or ``ConfigAlias`` objects.
        check: A predicate a converted, non-None value must pass.
        requirement: What ``check`` requires, for the error (``"must be >= 1"``).

    The positional signature ``ConfigOption(key, config_type, default)`` is
    0.3.1's.
    """

    def __init__(
        self,
        key: str,
        config_type: Type[Any],
        default: Any | None = None,
        *,
        description: str = "",
        aliases: Iterable[str | ConfigAlias] = (),
        check: Callable[[Any], bool] | None = None,
        requirement: str = "",
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"a ConfigOption key must be a non-empty string, got {key!r}")
        self._key = key
        self._type = config_type
        self._default_value = default
        self.description = description
        self.aliases: Tuple[ConfigAlias, ...] = tuple(
            alias if isinstance(alias, ConfigAlias) else ConfigAlias(str(alias)) for alias in aliases
        )
        self._check = check
        self.requirement = requirement

    def get_key(self) -> str:
        """The configuration key."""
        return self._key

    def get_type(self) -> Type[Any]:
        """The type of the value."""
        return self._type

    def get_default_value(self) -> Any:
        """The default value."""
        return self._default_value

    @property
    def key(self) -> str:
        """The configuration key."""
        return self._key

    @property
    def keys(self) -> Tuple[str, ...]:
        """The key and its aliases, the key first."""
        return (self._key, *(alias.key for alias in self.aliases))

    def convert(self, value: Any, key: str | None = None) -> Any:
        """``value`` converted and checked for this option (``None`` stays ``None``).

        Args:
            value: A raw value of ``key``.
            key: The spelling it was set under (default: the option's key); an
                alias's value is converted with the alias's type and mapping.

        Raises:
            ValueError: The value does not convert or fails the option's check;
                the message names the key and the value.
        """
        key = key or self._key
        if value is None:
            return None
        alias = next((a for a in self.aliases if a.key == key), None)
        if alias is not None:
            converted = convert_value(key, value, alias.config_type or self._type)
            if alias.to_option is not None:
                converted = alias.to_option(converted)
            converted = convert_value(key, converted, self._type)
        else:
            converted = convert_value(key, value, self._type)
        if self._check is not None and not self._check(converted):
            raise ValueError(
                f"configuration {key!r}: {self.requirement or 'invalid value'}, got {redact(value, key)!r}"
            )
        return converted

    def __repr__(self) -> str:
        return f"ConfigOption({self._key!r}, {getattr(self._type, '__name__', self._type)}, {self._default_value!r})"


def _shadowed(file_keys: Iterable[str], code_keys: Iterable[str]) -> set[str]:
    """File keys hidden because the code layer sets another spelling of the
    same option (code wins over file, for every spelling)."""
    from flink_agents.api.core_options import spellings_of

    code = set(code_keys)
    return {key for key in file_keys if key not in code and spellings_of(key) & code}


class ReadableConfiguration(Mapping[str, Any], ABC):
    """Read access to a configuration (0.3.1's ``ReadableConfiguration``),
    also a read-only mapping of raw values.

    Subclasses give the mapping methods (``__getitem__``, ``__iter__``,
    ``__len__``); the typed reads are here.
    """

    def get(self, option: ConfigOption | str, default: Any = _MISSING) -> Any:  # type: ignore[override]
        """The value of ``option``, or a raw value by key.

        ``get(option)`` reads every spelling of the option, converts and
        checks the value, and gives the option's default when none is set
        (0.3.1's ``get``). ``get(key, default=None)`` is the plain mapping
        read.

        Raises:
            ValueError: The value does not convert or fails the option's
                check, or two spellings are set to different values (naming
                both keys).
        """
        if isinstance(option, ConfigOption):
            value = self.get_optional(option)
            if value is not None:
                return value
            return option.get_default_value() if default is _MISSING else default
        try:
            return self[option]
        except KeyError:
            return None if default is _MISSING else default

    def get_optional(self, option: ConfigOption) -> Any:
        """The value of ``option`` if any spelling is set, else ``None``.

        Raises:
            ValueError: As ``get``.
        """
        found: List[Tuple[str, Any, Any]] = []
        for key in option.keys:
            raw = Mapping.get(self, key)
            if raw is None and option.get_type() is dict:
                raw = self.get_config_data_by_prefix(key) or None  # a nested mapping, flattened
            if raw is not None:
                found.append((key, raw, option.convert(raw, key)))
        if not found:
            return None
        first_key, first_raw, value = found[0]
        for key, raw, other in found[1:]:
            if other != value:
                raise ValueError(
                    f"configuration keys {first_key!r} and {key!r} are two spellings of one option "
                    f"and are set to different values ({redact(first_raw, first_key)!r} and "
                    f"{redact(raw, key)!r}); set only one"
                )
        return value

    def _typed(self, key: str, config_type: Type[Any], default: Any) -> Any:
        raw = Mapping.get(self, key)
        return default if raw is None else convert_value(key, raw, config_type)

    def get_int(self, key: str, default: int | None = None) -> int:
        """The value of ``key`` as an int, or ``default`` when unset.

        Raises:
            ValueError: The value is not an integer (naming the key).
        """
        return self._typed(key, int, default)

    def get_float(self, key: str, default: float | None = None) -> float:
        """The value of ``key`` as a float, or ``default`` when unset.

        Raises:
            ValueError: The value is not a number (naming the key).
        """
        return self._typed(key, float, default)

    def get_bool(self, key: str, default: bool | None = None) -> bool:
        """The value of ``key`` as a bool, or ``default`` when unset.

        Raises:
            ValueError: The value is not a boolean (naming the key).
        """
        return self._typed(key, bool, default)

    def get_str(self, key: str, default: str | None = None) -> str:
        """The value of ``key`` as a string, or ``default`` when unset.

        Raises:
            ValueError: The value is not a string or number (naming the key).
        """
        return self._typed(key, str, default)

    def get_conf_data(self) -> Dict[str, Any]:
        """All raw values as a new dict (0.3.1's ``AgentConfiguration.get_conf_data``)."""
        return dict(self.items())

    def get_config_data_by_prefix(self, prefix: str) -> Dict[str, Any]:
        """Values whose key starts with ``prefix + "."``, keyed by the rest of
        the key (0.3.1's ``AgentConfiguration.get_config_data_by_prefix``)."""
        head = f"{prefix}."
        return {key[len(head):]: value for key, value in self.items() if key.startswith(head)}

    def __repr__(self) -> str:
        # Secret keys and DSN passwords show as *** (flink_agents.api.redaction).
        return f"{type(self).__name__}({redact(dict(self.items()))!r})"


class WritableConfiguration(ABC):
    """Write access to a configuration (0.3.1's ``WritableConfiguration``)."""

    @abstractmethod
    def set_str(self, key: str, value: str) -> None:
        """Set ``key`` to a string."""

    @abstractmethod
    def set_int(self, key: str, value: int) -> None:
        """Set ``key`` to an int."""

    @abstractmethod
    def set_float(self, key: str, value: float) -> None:
        """Set ``key`` to a float."""

    @abstractmethod
    def set_bool(self, key: str, value: bool) -> None:  # noqa: FBT001
        """Set ``key`` to a bool."""

    @abstractmethod
    def set(self, option: ConfigOption, value: Any) -> None:
        """Set ``option`` to ``value``."""


class Configuration(ReadableConfiguration, WritableConfiguration, MutableMapping[str, Any]):
    """A writable configuration: what ``env.get_config()`` returns.

    Args:
        conf_data: Initial values set from code (nested mappings are
            flattened to dotted keys).

    Values set from code (``set*``, ``config[key] = ...``, ``update``) win over
    values loaded from a file (``load_from_file``), whatever the order; a code
    value also hides the file's other spellings of the same option.
    """

    def __init__(self, conf_data: Mapping[str, Any] | None = None) -> None:
        self._code: Dict[str, Any] = flatten_dict(conf_data) if conf_data else {}
        self._file: Dict[str, Any] = {}

    # -- mapping --------------------------------------------------------------

    def _merged(self) -> Dict[str, Any]:
        if not self._file:
            return self._code
        hidden = _shadowed(self._file, self._code)
        merged = {key: value for key, value in self._file.items() if key not in hidden}
        merged.update(self._code)
        return merged

    def __getitem__(self, key: str) -> Any:
        if key in self._code:
            return self._code[key]
        return self._merged()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(f"configuration keys are non-empty strings, got {key!r}")
        self._code[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self._code and key not in self._file:
            raise KeyError(key)
        self._code.pop(key, None)
        self._file.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())

    def __contains__(self, key: object) -> bool:
        return key in self._merged()

    # -- typed writes (0.3.1's names) ----------------------------------------------

    def _set_typed(self, key: str, value: Any, accepted: Tuple[type, ...], config_type: Type[Any]) -> None:
        """Store ``value`` under ``key`` if it is one of ``accepted`` (a bool
        is never an int or float here), as ``config_type``."""
        if not isinstance(key, str) or not key:
            raise TypeError(f"configuration keys are non-empty strings, got {key!r}")
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            raise ValueError(f"configuration {key!r}: expected {type_name(config_type)}, got {redact(value, key)!r}")
        self._code[key] = config_type(value)

    def set_str(self, key: str, value: str) -> None:
        """Set ``key`` to a string.

        Raises:
            ValueError: ``value`` is not a string (naming the key).
        """
        self._set_typed(key, value, (str,), str)

    def set_int(self, key: str, value: int) -> None:
        """Set ``key`` to an int.

        Raises:
            ValueError: ``value`` is not an int (naming the key).
        """
        self._set_typed(key, value, (int,), int)

    def set_float(self, key: str, value: float) -> None:
        """Set ``key`` to a float (an int is accepted).

        Raises:
            ValueError: ``value`` is not a number (naming the key).
        """
        self._set_typed(key, value, (int, float), float)

    def set_bool(self, key: str, value: bool) -> None:  # noqa: FBT001
        """Set ``key`` to a bool.

        Raises:
            ValueError: ``value`` is not a bool (naming the key).
        """
        self._set_typed(key, value, (bool,), bool)

    def set(self, option: ConfigOption, value: Any) -> None:
        """Set ``option`` under its key, converted and checked; an enum is
        stored as its value (so the configuration stays JSON-like).

        Raises:
            ValueError: ``value`` does not convert or fails the option's
                check (naming the key).
        """
        converted = option.convert(value)
        self._code[option.get_key()] = converted.value if isinstance(converted, enum.Enum) else converted

    # -- files ---------------------------------------------------------------

    def load_from_file(self, config_path: str | Path | None = None) -> None:
        """Load the ``agent:`` section of a Flink YAML file into the file
        layer (code values keep winning), as 0.3.1's ``load_from_file``.

        Raises:
            FileNotFoundError, ValueError: As ``load_agent_section``.
        """
        if config_path:
            self._file.update(load_agent_section(config_path))

    def load_from_flink_conf_dir(self, conf_dir: str | Path | None = None) -> Path | None:
        """Load the ``agent:`` section of ``FLINK_CONF_DIR``'s config file.

        Args:
            conf_dir: The directory; default the ``FLINK_CONF_DIR``
                environment variable. 0.3.1 reads it the same way, taking
                ``flink-conf.yaml`` (legacy) when present, else ``config.yaml``.

        Returns:
            The file read, or ``None`` (no directory given, or no file in it).

        Raises:
            ValueError: The file is not valid (naming it).
        """
        import os

        conf_dir = conf_dir if conf_dir is not None else os.environ.get("FLINK_CONF_DIR")
        if not conf_dir:
            return None
        for name in ("flink-conf.yaml", "config.yaml"):
            path = Path(conf_dir) / name
            if path.is_file():
                self.load_from_file(path)
                return path
        return None

    def read_only(self) -> "ConfigurationView":
        """A read-only snapshot of the merged values (what ``ctx.config`` gives)."""
        return ConfigurationView(self._merged())

    def copy(self) -> "Configuration":
        """An independent copy, layers kept."""
        clone = Configuration()
        clone._code = dict(self._code)
        clone._file = dict(self._file)
        return clone


class ConfigurationView(ReadableConfiguration):
    """A read-only configuration over a flat mapping (``ctx.config``).

    Args:
        data: Flat key/value pairs; copied.
    """

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: Dict[str, Any] = dict(data.items()) if data is not None else {}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __reduce__(self) -> Tuple[Any, ...]:
        return (ConfigurationView, (self._data,))


def readable(config: Mapping[str, Any] | None) -> ReadableConfiguration:
    """``config`` as a ``ReadableConfiguration``: itself if it is one, else a
    read-only view over a copy of the mapping (``None``: empty)."""
    if isinstance(config, ReadableConfiguration):
        return config
    return ConfigurationView(config or {})
