"""Import a provider's SDK, which is an optional extra of the package
(``flink_agents._sdk.import_sdk``, kept here for the integrations and at
this path for users).

The helper itself sits below every layer (standard library only), so the
runtime's own optional backends (``runtime.memory.mem0``) use it without
importing an integration.
"""

from __future__ import annotations

from flink_agents._sdk import import_sdk

__all__ = ["import_sdk"]
