"""Import a provider's SDK, which is an optional extra of the package.

``pip install 'flink-agents[anthropic]'`` (also ``[ollama]``, ``[tongyi]``,
``[all]``) installs the SDK a connection needs; without it, the connection
fails on first use with an ``ImportError`` that names the extra to install,
instead of a bare ``No module named ...``.
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
            f"{what} needs the {module!r} package, which is not installed: "
            f"pip install 'flink-agents[{extra}]' (or '[all]' for every provider)"
        ) from exc
