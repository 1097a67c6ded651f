"""Import a provider's SDK, which is an optional extra of the package (below every
layer: the standard library only; ``flink_agents.integrations.sdk`` re-exports it).

The extras ``anthropic``, ``ollama``, ``tongyi`` and ``all`` of this package
install the SDK a connection needs (``pip install
'flink-agents-runtime[anthropic]'``; from a checkout ``pip install -e
'.[anthropic]'``; the name ``flink-agents`` on PyPI is Apache Flink Agents,
not this project). Without it, the connection fails on first use with an
``ImportError`` that names the SDK and the extra, instead of a bare ``No
module named ...``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["import_sdk"]


def import_sdk(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (e.g. ``"anthropic"``), or explain which extra installs it.

    Args:
        module: The SDK's import name.
        extra: The package extra that installs it (``"anthropic"``).
        what: The class that needs it, for the message.

    Raises:
        ImportError: The SDK is not installed; the message names the extra.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the {module!r} package, which is not installed: pip install {module!r}, "
            f"or install this project with its {extra!r} extra (pip install -e '.[{extra}]' in its "
            f"checkout, pip install 'flink-agents-runtime[{extra}]' otherwise; '[all]' for every provider)"
        ) from exc
