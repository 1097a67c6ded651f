"""The Table API of the Flink runner: ``from_table`` and ``to_table``.

``from_table(table, key_selector)`` turns an insert-only ``Table`` into a
``DataStream`` of ``pyflink.common.Row`` (``StreamTableEnvironment.
to_data_stream``, as Flink Agents 0.3.1 does), keyed by the user's selector;
the agent's ``InputEvent.input`` is that ``Row`` (fields by name:
``row["id"]`` or ``row.id``).

``to_table(schema, output_type)`` types the agent's outputs with
``output_type`` (usually ``Types.ROW_NAMED([...], [...])``) and hands them to
``StreamTableEnvironment.from_data_stream(stream, schema)``, as 0.3.1 does.
Unlike 0.3.1, which gives the outputs to Flink's serializer as they are (a
misfit then fails deep in a Java stack), each output is first converted to
``output_type`` here (``OutputConverter``): a ``Row``, a mapping, a pydantic
model, a dataclass or a tuple become the ``Row`` the type describes, and an
output that does not fit fails the job with ``OutputTypeError`` naming the
key, the field path and the value.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

from pyflink.datastream import DataStream, OutputTag

from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.flink.operator import AgentOperatorFunction
from flink_agents.runtime.flink.output_conversion import OutputConverter, OutputTypeError

__all__ = ["ConvertingOperatorFunction", "OutputConverter", "OutputTypeError", "table_to_datastream"]


class ConvertingOperatorFunction(AgentOperatorFunction):
    """The agent operator, with each output converted by an ``OutputConverter``
    in the callback of its key, before Flink serializes it with the
    operator's output type. Side outputs (errors, progress) pass as they are.

    Args:
        plan, config, job_id: As ``AgentOperatorFunction``.
        convert: The ``OutputConverter`` of the operator's output type.
    """

    def __init__(self, plan: AgentPlan, config: Dict[str, Any], job_id: str, convert: OutputConverter) -> None:
        # The converter takes the outputs as the actions built them (a
        # datetime stays one for a TIMESTAMP field; docs/compatibility.md).
        super().__init__(plan, config, job_id, typed_outputs=True)
        self._convert_output = convert

    def _emitted(self, key: Any) -> Iterable[Any]:
        for item in super()._emitted(key):
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], OutputTag):
                yield item
            else:
                yield self._convert_output(key, item)


def table_to_datastream(t_env: Any, table: Any) -> DataStream:
    """``table``'s rows as a ``DataStream`` of ``Row`` (named fields), by
    ``StreamTableEnvironment.to_data_stream`` as Flink Agents 0.3.1 does.

    Args:
        t_env: The ``StreamTableEnvironment`` the table belongs to.
        table: A ``pyflink.table.Table`` with insert-only changes (a source,
            a projection, a filter, a join of sources, a window aggregate).

    Raises:
        TypeError: ``table`` is not a ``Table``.
        pyflink.util.exceptions.TableException: The table produces updates
            or deletes (a non-windowed aggregate, say): Flink's message says
            the sink "doesn't support consuming update changes".
    """
    from pyflink.table import Table

    if not isinstance(table, Table):
        raise TypeError(f"from_table: input must be a pyflink.table.Table, not {type(table).__name__}")
    return t_env.to_data_stream(table)
