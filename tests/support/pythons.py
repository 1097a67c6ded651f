"""What the tests take from Python 3.11's standard library, on 3.10 too (the
package supports 3.10 to 3.12, pyproject.toml).

- ``StrEnum``: ``enum.StrEnum`` from 3.11; on 3.10 the ``str``-mixed ``Enum``
  user code there writes instead (the codec carries both the same way).
- ``ExceptionGroup``: the builtin from 3.11, the ``exceptiongroup`` backport on
  3.10 (``flink_agents._pycompat``).
- ``needs_task_group``: a mark skipping a case that uses ``asyncio.TaskGroup``
  (3.11 and later) on 3.10.
"""

from __future__ import annotations

import enum
import sys

import pytest

from flink_agents._pycompat import ExceptionGroup

__all__ = ["ExceptionGroup", "StrEnum", "needs_task_group"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:
    class StrEnum(str, enum.Enum):
        """A str-valued enum, as Python 3.10 code writes one."""

needs_task_group = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is Python 3.11's")
