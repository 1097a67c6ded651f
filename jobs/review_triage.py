"""The review-triage job: a parent agent hands negative reviews to two
sub-agents.

``ReviewTriageAgent`` scores each review with the chat model; for a negative
one (score <= 2) it calls, concurrently, the ``reply_writer`` sub-agent
(drafts a reply to the customer) and the ``category`` sub-agent (files the
complaint under a team). Both children ask the same model for the review's
reasons, in their own isolated runs. One JSON line per review::

    {"id", "ts", "score", "negative", "category", "reply", "children_ok"}

Runs on the offline ``local`` model by default: ``python -m flink_agents.jobs.review_triage
--input ../shared/data/product_reviews.jsonl --runner local``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

from flink_agents._private_files import replace_when_done
from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.cli.job_help import job_parser
from flink_agents.jobs.review_records import ProductReview, read_reviews

__all__ = ["CategoryAgent", "ReplyWriterAgent", "ReviewTriageAgent", "main"]

NEGATIVE_AT_MOST = 2
# Reason phrases of the model -> the team a complaint goes to.
CATEGORIES = {
    "shipping damage": "shipping",
    "sizing": "fit",
    "fit": "fit",
    "comfort": "comfort",
    "quality": "quality",
    "value": "pricing",
    "price": "pricing",
    "look": "design",
    "service": "customer service",
}


def _add_model(agent: Agent) -> Agent:
    agent.add_resource("model_connection", ResourceType.CHAT_MODEL_CONNECTION,
                       ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_CONNECTION))
    agent.add_resource("model", ResourceType.CHAT_MODEL,
                       ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_SETUP, connection="model_connection",
                                          model="local"))
    return agent


def _ask(event: InputEvent, ctx: RunnerContext) -> None:
    review = ProductReview.model_validate(event.input)
    ctx.sensory_memory.set("review", review.model_dump(mode="json"))
    content = json.dumps({"id": review.id, "review": review.review})
    ctx.send_event(ChatRequestEvent(model="model", messages=[ChatMessage(role=MessageRole.USER, content=content)]))


def _reasons(event: ChatResponseEvent) -> Dict[str, Any]:
    return json.loads(event.response.content)


def _write_reply(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    reasons = _reasons(event)["reasons"]
    complaints = [r for r in reasons if not r.startswith("praises")] or reasons
    text = "; ".join(complaints)
    ctx.send_event(OutputEvent(output=(
        f"We are sorry about your experience ({text}). A member of our team will contact you "
        "about a replacement or a refund."
    )))


def _file_category(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    reasons = " ".join(_reasons(event)["reasons"])
    category = next((team for cue, team in CATEGORIES.items() if cue in reasons), "general")
    ctx.send_event(OutputEvent(output=category))


class ReplyWriterAgent(Agent):
    """Child: drafts a reply to a negative review from the model's reasons."""

    def __init__(self) -> None:
        super().__init__()
        self.add_action("ask", [InputEvent], _ask)
        self.add_action("write_reply", [ChatResponseEvent], _write_reply)
        _add_model(self)


class CategoryAgent(Agent):
    """Child: files a negative review under a team, from the model's reasons."""

    def __init__(self) -> None:
        super().__init__()
        self.add_action("ask", [InputEvent], _ask)
        self.add_action("file_category", [ChatResponseEvent], _file_category)
        _add_model(self)


async def _triage(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    review = ctx.sensory_memory.get("review")
    score = _reasons(event)["score"]
    output = {"id": review["id"], "ts": review["ts"], "score": score, "negative": score <= NEGATIVE_AT_MOST,
              "category": None, "reply": None, "children_ok": None}
    if output["negative"]:
        reply, category = await asyncio.gather(
            ctx.get_resource("reply_writer", ResourceType.AGENT).submit(ctx, review),
            ctx.get_resource("category", ResourceType.AGENT).submit(ctx, review),
        )
        output["children_ok"] = reply.success and category.success
        output["reply"] = reply.result[0] if reply.success else None
        output["category"] = category.result[0] if category.success else None
    ctx.send_event(OutputEvent(output=output))


class ReviewTriageAgent(Agent):
    """Parent: scores each review; negative ones go to two sub-agents."""

    def __init__(self) -> None:
        super().__init__()
        self.add_action("ask", [InputEvent], _ask)
        self.add_action("triage", [ChatResponseEvent], _triage)
        _add_model(self)
        self.add_resource("reply_writer", ResourceType.AGENT, ReplyWriterAgent())
        self.add_resource("category", ResourceType.AGENT, CategoryAgent())


def main(argv: List[str] | None = None, prog: str | None = None) -> int:
    """Run the job; returns the exit code. ``prog`` names the command in
    ``--help`` (the ``flink-agents run`` form; default the ``python -m`` form)."""
    from flink_agents.jobs.review_analysis import (
        SAMPLE_INPUT, add_execution_mode_argument, execution_mode_of, failure_summary, product_id_of, run_locally,
        run_on_flink,
    )
    from flink_agents.jobs.review_records import BadRecordError, check_output_path

    parser = job_parser(
        "flink_agents.jobs.review_triage", __doc__, prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="A review scoring 2 or less is negative: the reply_writer sub-agent drafts a reply and the category "
               "sub-agent files it under a team, concurrently. One JSON line per review: {id, ts, score, negative, "
               "category, reply, children_ok}. The chat model is the offline 'local' one.",
    )
    parser.add_argument("--input", type=Path, default=SAMPLE_INPUT, help="JSONL of {id, review, ts}")
    parser.add_argument("--output", type=Path, default=Path("out/review_triage.jsonl"),
                        help="where to write one JSON line per review (replaced only when the job succeeds)")
    parser.add_argument("--runner", choices=["flink", "local"], default="flink",
                        help="a Flink mini-cluster, or the embedded local runner")
    add_execution_mode_argument(parser)
    parser.add_argument("--verbose", action="store_true", help="print the full trace of a failure")
    args = parser.parse_args(argv)
    try:
        check_output_path(args.output)
        reviews = read_reviews(args.input).reviews
    except (BadRecordError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.runner == "local":
            outputs = run_locally(reviews, ReviewTriageAgent())
        else:
            outputs = run_on_flink(reviews, ReviewTriageAgent(), execution_mode=execution_mode_of(args),
                                   journal_path=args.output.with_name(args.output.name + ".journal.db"),
                                   job_name="review-triage")
    except Exception as exc:
        if args.verbose:
            raise
        print(f"error: the job failed: {failure_summary(exc)} (--verbose prints the full trace)", file=sys.stderr)
        return 1
    with replace_when_done(args.output) as sink:  # private: the outputs hold the model's answers
        sink.write("".join(json.dumps(o) + "\n" for o in outputs))
    negative = sum(1 for o in outputs if o["negative"])
    print(f"{len(outputs)} reviews, {negative} negative -> {args.output} (keyed by {product_id_of.__name__})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    from flink_agents.jobs.review_triage import main as _main

    sys.exit(_main())
