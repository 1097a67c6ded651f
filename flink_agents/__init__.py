"""Durable, event-driven AI agents on Apache Flink, in pure Python.

The import package keeps Flink Agents' name (``flink_agents``) so code
written for Flink Agents 0.3 runs unchanged (docs/compatibility.md).
"""

__version__ = "0.1.0"  # the one place it is written: pyproject.toml reads it
