"""``flink-agents runs pause|resume|cancel|retry`` and ``runs controls``:
run-control requests written into a job's journal store, applied by the
running job's subtasks on their next poll (``inspection.control``,
``runtime.features.run_control``)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

__all__ = ["CONTROL_COMMANDS", "add_control_commands", "run_control_command"]

CONTROL_COMMANDS = ("pause", "resume", "cancel", "retry", "controls")


def add_control_commands(runs: Any) -> None:
    helps = {
        "pause": "pause a key: its next records wait in keyed state until resumed",
        "resume": "resume a paused key (a parked record runs again first)",
        "cancel": "cancel a key's run: it ends on the error stream as RunCancelled; later records go on",
        "retry": "run a parked record of a key again, replaying its committed calls",
    }
    for action, text in helps.items():
        command = runs.add_parser(action, help=text)
        command.add_argument("--journal", required=True, metavar="J",
                             help="the job's journal: a SQLite file path or a postgresql:// DSN")
        command.add_argument("--key", required=True, help="the key (B01, or JSON: 42, {\"id\": 1})")
        if action in ("cancel", "retry"):
            command.add_argument("--seq", type=int, required=action == "retry",
                                 help="the record" + (" (default: the key's run in progress)" if action == "cancel" else ""))
        command.add_argument("--job", help="the job id (journal id), when the key has runs in several")
        command.add_argument("--json", action="store_true", help="the stored request as JSON")
    listing = runs.add_parser("controls", help="run-control requests and what became of them")
    listing.add_argument("--journal", required=True, metavar="J")
    listing.add_argument("--job")
    listing.add_argument("--key")
    listing.add_argument("--json", action="store_true")


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name (a container without one): say where it came from
        return "cli"


def run_control_command(args: argparse.Namespace) -> int:
    from flink_agents.inspection.control import list_controls, request_control

    try:
        if args.runs_command == "controls":
            requests = list_controls(args.journal, args.job, args.key)
            for request in requests:
                if args.json:
                    print(json.dumps(request, sort_keys=True))
                else:
                    seq = "" if request["seq"] is None else f" #{request['seq']}"
                    print(f"{request['control_id']:>5}  {request['action']:<7} {request['job']} "
                          f"{json.dumps(request['key'])}{seq}  {request['state']}  {request['outcome']}  "
                          f"({request['requested_by']})")
            return 0
        request = request_control(args.journal, args.runs_command, args.key, getattr(args, "seq", None), args.job,
                                  _who())
    except (ValueError, FileNotFoundError) as exc:
        print(f"flink-agents: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(request, sort_keys=True))
    else:
        seq = "" if request["seq"] is None else f", record #{request['seq']}"
        print(f"request #{request['control_id']}: {request['action']} key {json.dumps(request['key'])} of job "
              f"{request['job']}{seq}; the job applies it on its next poll (see: flink-agents runs controls)")
    return 0
