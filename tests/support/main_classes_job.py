"""A job whose event, model and agent classes are defined in this script.

Run as a program (``python main_classes_job.py OUT_DIR``), so its classes
live in ``__main__``: PyFlink ships them to its Python workers by value with
the agent's functions, and the workers' own ``__main__`` does not have them.
The agent's second action kills its worker once (``os._exit``), after the
first action's completion, which holds a ``Step`` event, was journaled; with
one restart allowed, the job must then replay that completion on a new
worker and finish. Appends the outputs, one JSON line each, to
``OUT_DIR/outputs.jsonl``.

Used by ``tests/e2e/test_main_classes_e2e.py``; not imported by the tests.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.runner_context import RunnerContext


class Detail(BaseModel):
    sku: str
    tags: Any = None


class Step(Event):
    detail: Detail
    note: Any = None


def crash_worker_once(marker: str, client_pid: int) -> str:
    """Kill this Python worker unless ``marker`` exists (then create it)."""
    if os.path.exists(marker):
        return "survived"
    if os.getpid() == client_pid:
        raise RuntimeError("the worker runs in the client process (loopback mode): refusing to os._exit")
    with open(marker, "w", encoding="utf-8") as out:
        out.write(str(os.getpid()))
    os._exit(1)


class GreetingConnection(BaseChatModelConnection):
    """A resource class of the script: built on the worker from its descriptor."""

    def chat(self, messages: Any, tools: Any = None, **kwargs: Any) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"hello {messages[-1].content}")


class MainScriptAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_resource("greeter", ResourceType.CHAT_MODEL_CONNECTION,
                          ResourceDescriptor(clazz=GreetingConnection))

    @action(InputEvent)
    @staticmethod
    def start(event: InputEvent, ctx: RunnerContext) -> None:
        record = event.input
        ctx.send_event(Step(detail=Detail(sku=record["sku"], tags=(1, 2)), note=record))

    @action(Step)
    @staticmethod
    def finish(event: Step, ctx: RunnerContext) -> None:
        crash = ctx.durable_execute(crash_worker_once, event.note["marker"], event.note["client_pid"])
        greeter = ctx.get_resource("greeter", ResourceType.CHAT_MODEL_CONNECTION)
        ctx.send_event(OutputEvent(output={
            "greeting": greeter.chat([ChatMessage(content=event.detail.sku)]).content,
            "sku": event.detail.sku,
            "event": type(event).__name__,
            "detail": type(event.detail).__name__,
            "tags": type(event.detail.tags).__name__,
            "crash": crash,
        }))


def main(out_dir: Path) -> None:
    # Python workers in processes of their own: a local job otherwise runs
    # them inside this process (loopback mode), and os._exit would end it.
    os.environ["_python_worker_execution_mode"] = "process"
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    for key, value in {
        "python.executable": sys.executable,
        "python.execution-mode": "process",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "1",
        "restart-strategy.fixed-delay.delay": "1 s",
    }.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, job_id="main-classes", **{"journal.sqlite.path": str(out_dir / "journal.db")}
    )
    records = [{"sku": "sku-1", "marker": str(out_dir / "crashed"), "client_pid": os.getpid()}]
    outputs = (
        agents_env.from_datastream(env.from_collection(records), lambda r: r["sku"])
        .apply(MainScriptAgent())
        .to_datastream()
    )
    sink = str(out_dir / "outputs.jsonl")
    # A restart without checkpoints fails a collecting client ("Job
    # restarted"): the outputs go to a file, appended by the worker.
    outputs.map(lambda output: _append(sink, output)).name("write-outputs")
    env.execute("main-classes")


def _append(path: str, output: Any) -> Any:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(output, sort_keys=True) + "\n")
    return output


if __name__ == "__main__":
    main(Path(sys.argv[1]))
