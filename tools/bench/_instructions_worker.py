"""One side of ``instructions.py``, run under valgrind: the trivial agent
over N records, or the review agent over N reviews with a canned model
reply, on whichever ``flink_agents`` ``PYTHONPATH`` names (the tree being
measured). Self-contained: this file only, whatever the tree holds.

    PYTHONPATH=TREE python _instructions_worker.py records|calls N
"""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any, Dict, List

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext

KEYS = 31
WARM = 40  # records or calls run first: imports, first-use caches, the client
# No journal prune while counting: its interval is wall time, which valgrind
# stretches fiftyfold (and a loaded machine more), so it would run a varying
# number of times.
CONFIG = {"journal.prune_interval_s": 1e9}


class TrivialAgent(Agent):
    @action(InputEvent.EVENT_TYPE)
    @staticmethod
    def count_and_echo(event: Event, ctx: RunnerContext) -> None:
        seen = (ctx.short_term_memory.get("seen") or 0) + 1
        ctx.short_term_memory.set("seen", seen)
        ctx.send_event(OutputEvent(output=seen))


def _run_trivial(count: int) -> None:
    env = AgentsExecutionEnvironment.get_execution_environment(**CONFIG)
    outputs = env.from_list([{"key": f"k{i % KEYS}", "value": {"n": i}} for i in range(count)]) \
        .apply(TrivialAgent()).to_list()
    env.execute()
    assert len(outputs) == count, f"{len(outputs)} outputs for {count} records"


def _reviews(count: int) -> List[Dict[str, Any]]:
    # Synthetic review texts of a real review's length: the model's reply is
    # canned, the text only travels (prompt, journal, digest).
    return [{"id": f"P{n % KEYS:03d}", "ts": n,
             "review": f"review {n}: the strap broke after two weeks, the buckle is fine, the colour faded. " * 4}
            for n in range(count)]


def _canned_replies() -> None:
    """The SDK's ``chat.completions.create`` answers at once with a
    ``ChatCompletion`` (no HTTP): what is measured is the runtime's part of
    a call, from the agent's request to its reply's use."""
    from openai.resources.chat.completions import AsyncCompletions
    from openai.types.chat import ChatCompletion

    async def create(self: Any, **request: Any) -> ChatCompletion:
        review = json.loads(request["messages"][-1]["content"])["review"]
        answer = {"score": 1 + zlib.crc32(review.encode()) % 5, "reasons": ["canned"]}
        return ChatCompletion.model_validate({
            "id": "canned", "object": "chat.completion", "created": 0, "model": "canned",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps(answer)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })

    AsyncCompletions.create = create  # type: ignore[method-assign]


def main() -> None:
    kind, count = sys.argv[1], int(sys.argv[2])
    if kind == "records":
        _run_trivial(WARM)
        _run_trivial(count)
        return
    import flink_agents.integrations.chat_models.openai.openai_chat_model  # noqa: F401
    from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, run_locally

    _canned_replies()
    agent = ReviewAnalysisAgent(model="openai:canned", base_url="http://127.0.0.1:9/v1", max_retries=0)
    run_locally(_reviews(WARM), agent, config=CONFIG)
    outputs = run_locally(_reviews(count), agent, config=CONFIG)
    assert len(outputs) == count, f"{len(outputs)} outputs for {count} reviews"


if __name__ == "__main__":
    main()
