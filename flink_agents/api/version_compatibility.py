"""The installed Apache Flink version, for code that must differ between
Flink lines (Flink Agents 0.3.1's ``api.version_compatibility``).

The runtime itself decides such differences in one place
(``runtime.flink.compat``); this module is the public helper user code of
0.3.1 imports: ``flink_version_manager.ge("2.0")`` and friends.
"""

from __future__ import annotations

import re
from typing import Tuple

__all__ = ["FlinkVersionManager", "flink_version_manager"]


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
        self._read = False

    @property
    def version(self) -> str | None:
        """The full version, e.g. ``"2.3.0"``; None without apache-flink."""
        if not self._read:
            from importlib.metadata import PackageNotFoundError, version

            try:
                self._version = version("apache-flink")
            except PackageNotFoundError:
                self._version = None
            self._read = True
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
