"""What differs between the PyFlink versions this project runs on (1.20 and
2.0 to 2.3), decided once from the installed PyFlink; the rest of the runtime
imports the names below and checks no version itself.

Tested: 1.20.5, 2.0.2 and 2.3.0 (``tools/test_matrix.sh``). PyFlink's Python
API that the runtime uses (``KeyedProcessFunction``, timers,
``ValueStateDescriptor``, ``StateTtlConfig.new_builder(Time)``, ``Types``,
``Configuration.set_string``, ``python.execution-mode: thread``) is the same
in all of them. The option keys the project writes exist in all of them too:
Flink 1.20 introduced the 2.x names of the checkpoint and recovery options
(``execution.checkpointing.*``, ``execution.state-recovery.*``, FLIP-406)
next to the old ones, which 2.0 removed (Flink 2.0 release notes,
"Configuration"). What does differ:

- The collect sink's result iterator (``execute_and_collect``, built here
  because PyFlink gives that sink no uid; ``runtime.flink.submission``).
  Flink 1.20's ``CollectResultIterator`` finds the sink's operator
  coordinator through a ``CompletableFuture<OperatorID>`` that the sink
  operator completes; Flink 2.0 changed the constructor to take the sink's
  uid instead (``CollectResultIterator(String operatorUid, ...)``, see
  ``DataStream.collectAsync`` in each release). ``collect_result_iterator``
  builds the one the installed Flink has.
- Dependencies, not code: apache-flink 1.20 pins apache-beam below 2.49,
  which needs protobuf below 4.24, while the ``mem0`` extra (mem0ai 2.2)
  needs protobuf 5.29 or later; on 1.20 that extra cannot be installed (its
  tests skip).
- Savepoints: Flink does not guarantee that state written by 1.x restores on
  2.x ("State Compatibility is not guaranteed between 1.x and 2.x", Flink 2.0
  release notes, "Misc"), so a job moves from 1.20 to 2.x by finishing or
  draining its input, not through a savepoint.
"""

from __future__ import annotations

import re
from typing import Any, Tuple

from pyflink.version import __version__ as PYFLINK_VERSION

__all__ = ["FLINK_1", "PYFLINK_VERSION", "collect_result_iterator", "flink_version"]


def flink_version(text: str = PYFLINK_VERSION) -> Tuple[int, int]:
    """``(major, minor)`` of a PyFlink version string such as ``2.3.0`` or
    ``1.20.5``."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"not a PyFlink version: {text!r}")
    return int(match.group(1)), int(match.group(2))


FLINK_1 = flink_version() < (2, 0)
"""Whether the installed PyFlink is of the 1.x line (1.20)."""


def collect_result_iterator(
    jvm: Any, factory: Any, uid: str, serializer: Any, accumulator: str, checkpoint_config: Any, fetch_timeout_ms: int,
) -> Any:
    """Flink's ``CollectResultIterator`` for the collect sink made by
    ``factory`` (a ``CollectSinkOperatorFactory``) with the uid ``uid``.

    2.x: the iterator asks the coordinator of the operator with that uid.
    1.20: it waits for the sink operator's ``OperatorID`` future, completed
    when the operator is set up (from the uid given to the sink).
    """
    collect = jvm.org.apache.flink.streaming.api.operators.collect
    if FLINK_1:
        operator_id = factory.getOperator().getOperatorIdFuture()
        return collect.CollectResultIterator(operator_id, serializer, accumulator, checkpoint_config, fetch_timeout_ms)
    return collect.CollectResultIterator(uid, serializer, accumulator, checkpoint_config, fetch_timeout_ms)
