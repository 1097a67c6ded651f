"""A job whose action retries a journaled call that always fails, for the
retry-budget test (issue 28.1): the local runner on a SQLite journal, so a
second process resumes what the first journaled.

    python -m tests.support.retry_budget_job JOURNAL CALLS [DIE_AT]

Each execution of the call appends a line to ``CALLS``; the execution
numbered ``DIE_AT`` (counted over the file, so over both processes) kills
the process with ``os._exit`` while the call runs: a worker dying during
that attempt. The action is async, under ``retry`` with 3 attempts; the
record fails once they are spent (exit status 1, the error on stderr).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment

KILLED_STATUS = 137


def charge_card(order: str) -> str:
    """The journaled call: counts itself in the file named by ``$CALLS``,
    dies where ``$DIE_AT`` says, else fails as a card processor would."""
    calls = Path(os.environ["CALLS"])
    with calls.open("a") as out:
        out.write(f"{order}\n")
    executions = len(calls.read_text().splitlines())
    if os.environ.get("DIE_AT") == str(executions):
        os._exit(KILLED_STATUS)
    raise ConnectionError(f"card processor unreachable (execution {executions})")


async def charge(event: InputEvent, ctx: Any) -> None:
    receipt = await ctx.durable_execute_async(charge_card, event.input)
    ctx.send_event(OutputEvent(output=receipt))


def main(journal: str, calls: str, die_at: str | None = None) -> None:
    os.environ["CALLS"] = calls
    if die_at is not None:
        os.environ["DIE_AT"] = die_at
    agent = Agent().add_action(
        "charge", [InputEvent], charge, error_strategy="retry",
        **{"error_retry.max_attempts": 3, "error_retry.initial_backoff_s": 0.001},
    )
    env = AgentsExecutionEnvironment.get_execution_environment(**{
        "journal.store": "sqlite", "journal.sqlite.path": journal, "job-identifier": "retry-budget",
    })
    env.from_list([{"key": "order-1", "value": "order-1"}]).apply(agent).to_list()
    env.execute()


if __name__ == "__main__":
    main(*sys.argv[1:])
