"""The Table API on the mini-cluster (issue 15, "Table API"): a table source
through an agent into a table, and a Table API agent written the way Flink
Agents 0.3.1's quickstart writes one, running unchanged.

- ``from_table(table, key_selector)``: the agent sees each row as a
  ``pyflink.common.Row`` (fields by name), keyed by a ``KeySelector`` or a
  function of the row; a ``Row`` travels in custom events and in keyed state;
- ``to_table(schema, output_type)``: outputs (a ``Row``, a dict, a pydantic
  model) become the rows of ``output_type``, read back with
  ``Table.execute().collect()``;
- without a ``t_env``, the runner creates one from ``env``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest
from pydantic import BaseModel
from pyflink.common import Row
from pyflink.datastream import KeySelector

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, chat_model_setup, prompt, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from tests.support.flink_jobs import mini_cluster_env


# --- a table through an agent into a table -----------------------------------


class Annotated(Event):
    """Carries the input ``Row`` from one action to the next."""

    row: Any


class RowAgent(Agent):
    """0.3.1's integration-test agent, extended: mutates the input ``Row`` by
    field name, passes it on in a custom event, counts rows per key with a
    ``Row`` kept in short-term memory, and outputs a ``Row`` or a dict."""

    @action(InputEvent)
    @staticmethod
    def first_action(event: InputEvent, ctx: RunnerContext) -> None:
        row = event.input
        assert isinstance(row, Row), f"from_table gave the agent a {type(row).__name__}"
        row["review"] += " first action"
        ctx.send_event(Annotated(row=row))

    @action(Annotated)
    @staticmethod
    def second_action(event: Annotated, ctx: RunnerContext) -> None:
        row = event.row
        last = ctx.short_term_memory.get("last")  # a Row, read back from keyed state
        seen = 1 if last is None else last.seen + 1
        ctx.short_term_memory.set("last", Row(id=row.id, seen=seen))
        review = f"{row.review} second action"
        if seen % 2:
            ctx.send_event(OutputEvent(output=Row(seen=seen, review=review, id=row["id"])))
        else:
            ctx.send_event(OutputEvent(output={"id": row.id, "review": review, "seen": seen}))


REVIEWS = [
    (1, "Great product!", 3.0),
    (2, "Arrived damaged.", 1.0),
    (1, "Fast shipping.", 5.0),
    (3, "Not as good as expected.", 2.0),
    (1, "Exactly what I needed.", 4.0),
    (2, "Worst purchase ever.", 1.0),
]


@pytest.mark.timeout(300)
def test_a_table_runs_through_an_agent_into_a_table(tmp_path: Path) -> None:
    from pyflink.common import Types
    from pyflink.table import DataTypes, Schema, StreamTableEnvironment

    env = mini_cluster_env(2)
    t_env = StreamTableEnvironment.create(stream_execution_environment=env)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env=env, t_env=t_env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    table = t_env.from_elements(REVIEWS, ["id", "review", "review_score"])
    output_type = Types.ROW_NAMED(["id", "review", "seen"], [Types.LONG(), Types.STRING(), Types.LONG()])
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.BIGINT())
        .column("review", DataTypes.STRING())
        .column("seen", DataTypes.BIGINT())
        .build()
    )

    output = (
        # A function of the Row as the key selector (the next test uses a KeySelector).
        agents_env.from_table(input=table, key_selector=lambda row: row.id)
        .apply(RowAgent())
        .to_table(schema=schema, output_type=output_type)
    )
    with output.execute().collect() as results:
        rows = [tuple(row) for row in results]

    assert output.get_schema().get_field_names() == ["id", "review", "seen"]
    assert sorted(rows) == [
        (1, "Exactly what I needed. first action second action", 3),
        (1, "Fast shipping. first action second action", 2),
        (1, "Great product! first action second action", 1),
        (2, "Arrived damaged. first action second action", 1),
        (2, "Worst purchase ever. first action second action", 2),
        (3, "Not as good as expected. first action second action", 1),
    ]
    # Per key, in input order.
    assert [r[2] for r in rows if r[0] == 1] == [1, 2, 3]


# --- a 0.3.1-style Table API agent, unchanged ---------------------------------
# Written as 0.3.1's quickstart writes TableReviewAnalysisAgent and the
# workflow example that feeds it (a JSON file table with a watermark, a
# KeySelector that takes a dict or a Row, input read as input_dict["id"]);
# the model is the built-in "local" one instead of Ollama.


class ProductReviewAnalysisRes(BaseModel):
    id: str
    score: int
    reasons: list[str]


REVIEW_ANALYSIS_PROMPT = Prompt.from_messages(
    messages=[
        ChatMessage(
            role=MessageRole.SYSTEM,
            content='Analyze the review. Answer only {"score": 1-5, "reasons": [...]}. '
            "Call notify_shipping_manager first if the product arrived damaged.",
        ),
        ChatMessage(
            role=MessageRole.USER,
            content="""
            "input":
            {input}
            """,
        ),
    ],
)


class TableKeySelector(KeySelector):
    """KeySelector for extracting key from dictionary input (Table data)."""

    def get_key(self, value: Any) -> str:
        if isinstance(value, dict):
            return str(value["id"])
        return str(value["id"]) if hasattr(value, "__getitem__") else str(value.id)


class TableReviewAnalysisAgent(Agent):
    """Analyzes product reviews from Flink Table input."""

    @prompt
    @staticmethod
    def review_analysis_prompt() -> Prompt:
        return REVIEW_ANALYSIS_PROMPT

    @tool
    @staticmethod
    def notify_shipping_manager(id: str, review: str) -> None:
        """Notify the shipping manager when product received a negative review due to
        shipping damage.

        Parameters
        ----------
        id : str
            The id of the product that received a negative review due to shipping damage
        review: str
            The negative review content
        """
        print(f"shipping manager notified about {id}")

    @chat_model_setup
    @staticmethod
    def review_analysis_model() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.LOCAL_SETUP,
            connection="local_server",
            model="local",
            prompt="review_analysis_prompt",
            tools=["notify_shipping_manager"],
        )

    @action(InputEvent.EVENT_TYPE)
    @staticmethod
    def process_input(event: Event, ctx: RunnerContext) -> None:
        input_dict = InputEvent.from_event(event).input
        product_id = str(input_dict["id"])
        review_text = str(input_dict["review"])

        ctx.short_term_memory.set("id", product_id)

        content = f"""
            "id": {product_id},
            "review": {review_text}
        """
        msg = ChatMessage(role=MessageRole.USER)
        ctx.send_event(
            ChatRequestEvent(
                model="review_analysis_model",
                messages=[msg],
                prompt_args={"input": content},
            )
        )

    @action(ChatResponseEvent.EVENT_TYPE)
    @staticmethod
    def process_chat_response(event: Event, ctx: RunnerContext) -> None:
        chat_response = ChatResponseEvent.from_event(event)
        json_content = json.loads(chat_response.response.content)
        ctx.send_event(
            OutputEvent(
                output=ProductReviewAnalysisRes(
                    id=ctx.short_term_memory.get("id"),
                    score=json_content["score"],
                    reasons=json_content["reasons"],
                )
            )
        )


PRODUCT_REVIEWS = [
    {"id": "B01", "review": "Love them, so comfortable and great quality.", "ts": 1759315800},
    {"id": "B02", "review": "The box was crushed and the shoes arrived damaged.", "ts": 1759315810},
    {"id": "B01", "review": "Terrible fit, cheap material, returned them.", "ts": 1759315820},
    {"id": "B03", "review": "Okay for the price.", "ts": 1759315830},
    {"id": "B02", "review": "Nice color, runs small.", "ts": 1759315840},
]


def _local_runner_outputs() -> List[ProductReviewAnalysisRes]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.add_resource(
        "local_server", ResourceType.CHAT_MODEL_CONNECTION,
        ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_CONNECTION),
    )
    listed = (
        env.from_list([{"key": r["id"], "value": dict(r)} for r in PRODUCT_REVIEWS])
        .apply(TableReviewAnalysisAgent())
        .to_list()
    )
    env.execute()
    return [output for record in listed for output in record.values()]


@pytest.mark.timeout(300)
def test_a_031_table_review_agent_runs_unchanged_and_answers_as_on_the_local_runner(tmp_path: Path) -> None:
    from pyflink.table import DataTypes, Schema, TableDescriptor
    from pyflink.table.expressions import col

    source = tmp_path / "product_review.txt"
    source.write_text("".join(json.dumps(r) + "\n" for r in PRODUCT_REVIEWS), encoding="utf-8")
    env = mini_cluster_env(1, **{"pipeline.auto-watermark-interval": "1ms"})
    # No t_env: the runner creates the table environment from env.
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env=env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    agents_env.add_resource(
        "local_server", ResourceType.CHAT_MODEL_CONNECTION,
        ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_CONNECTION),
    )
    t_env = agents_env.t_env
    t_env.create_temporary_table(
        "product_reviews",
        TableDescriptor.for_connector("filesystem")
        .schema(
            Schema.new_builder()
            .column("id", DataTypes.STRING())
            .column("review", DataTypes.STRING())
            .column("ts", DataTypes.BIGINT())
            .column_by_expression("rowtime", "TO_TIMESTAMP_LTZ(`ts` * 1000, 3)")
            .watermark("rowtime", "rowtime - INTERVAL '0' SECOND")
            .build()
        )
        .option("format", "json")
        .option("path", f"file://{source}")
        .build(),
    )
    input_table = t_env.from_path("product_reviews").select(col("id"), col("review"), col("ts"))

    review_analysis_res_stream = (
        agents_env.from_table(input=input_table, key_selector=TableKeySelector())
        .apply(TableReviewAnalysisAgent())
        .to_datastream(typed_outputs=True)  # the pydantic results themselves (default: as dicts, as 0.3.1)
    )
    with review_analysis_res_stream.execute_and_collect("table review analysis") as collected:
        on_flink = list(collected)

    assert all(isinstance(o, ProductReviewAnalysisRes) for o in on_flink)
    by_key = lambda o: o.id  # noqa: E731  (stable: each key's outputs stay in input order)
    assert sorted(on_flink, key=by_key) == [
        ProductReviewAnalysisRes(
            id="B01", score=5, reasons=["praises comfort", "expresses overall satisfaction", "praises quality"]
        ),
        ProductReviewAnalysisRes(id="B01", score=1, reasons=["complains about sizing", "complains about quality"]),
        ProductReviewAnalysisRes(id="B02", score=1, reasons=["reports shipping damage"]),
        ProductReviewAnalysisRes(id="B02", score=3, reasons=["praises the look", "complains about sizing"]),
        ProductReviewAnalysisRes(id="B03", score=3, reasons=["praises value for money"]),
    ]
    assert sorted(on_flink, key=by_key) == sorted(_local_runner_outputs(), key=by_key)
