"""The installed Apache Flink version, for code that must differ between
Flink lines (Flink Agents 0.3.1's ``api.version_compatibility``).

The runtime itself decides such differences in one place
(``runtime.flink.compat``); this module is the public helper user code of
0.3.1 imports: ``flink_version_manager.ge("2.0")`` and friends.
"""

from __future__ import annotations

import logging
import re
from typing import Tuple

__all__ = ["FlinkVersionManager", "flink_version_manager"]

log = logging.getLogger(__name__)


def _normalize_version(version_str: str) -> str:
    """``version_str`` as ``"major.minor.patch"`` (0.3.1's helper of that
    name): the numeric parts before a ``-`` suffix or a non-numeric part,
    padded with ``0`` (``"2.2"`` -> ``"2.2.0"``, ``"2.2.0-SNAPSHOT"`` ->
    ``"2.2.0"``, ``"1.20.dev0"`` -> ``"1.20.0"``)."""
    return ".".join(str(part) for part in _release(version_str))


def _release(text: str) -> Tuple[int, int, int]:
    """``(major, minor, patch)`` of ``text``: leading numeric parts only
    (``2.2.0-SNAPSHOT`` -> (2, 2, 0), ``1.20.dev0`` -> (1, 20, 0)), missing
    parts 0."""
    parts = []
    for part in text.split("-")[0].split("."):
        if not re.fullmatch(r"\d+", part):
            break
        parts.append(int(part))
    parts = (parts + [0, 0, 0])[:3]
    return parts[0], parts[1], parts[2]


class FlinkVersionManager:
    """The version of the installed ``apache-flink`` distribution, read
    once on first use (package metadata; None where it is not installed)."""

    def __init__(self) -> None:
        self._version: str | None = None
        self._initialized = False  # 0.3.1's name: whether the metadata was read

    @property
    def version(self) -> str | None:
        """The full version, e.g. ``"2.3.0"``; None without apache-flink, or
        when its metadata cannot be read (logged as a warning with the
        reason; 0.3.1 also treats that as not installed)."""
        if not self._initialized:
            import importlib.metadata

            try:
                self._version = importlib.metadata.version("apache-flink")
            except importlib.metadata.PackageNotFoundError:
                self._version = None
            except Exception as exc:  # a broken distribution's metadata
                log.warning("cannot read the apache-flink version (%s: %s); treating Flink as not installed",
                            type(exc).__name__, exc)
                self._version = None
            self._initialized = True
        return self._version

    @property
    def major_version(self) -> str | None:
        """``"major.minor"``, e.g. ``"1.20"``; None without apache-flink."""
        if self.version is None:
            return None
        major, minor, _ = _release(self.version)
        return f"{major}.{minor}"

    def ge(self, target_version: str) -> bool:
        """Whether the installed Flink is ``target_version`` or later
        (``"2.0"`` means 2.0.0); False without apache-flink."""
        return self.version is not None and _release(self.version) >= _release(target_version)

    def lt(self, target_version: str) -> bool:
        """Whether the installed Flink is older than ``target_version``;
        False without apache-flink."""
        return self.version is not None and not self.ge(target_version)


flink_version_manager = FlinkVersionManager()
"""The process-wide manager (0.3.1's name)."""
