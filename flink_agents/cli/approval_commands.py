"""``flink-agents approvals list|approve|reject``: tool calls waiting for a
reviewer (``flink_agents.inspection.approvals``).

Exit codes: 0 listed, or the decision was taken; 1 the approval was
already decided (or timed out, or its run ended) or no such approval is in
the journal, each said on stderr; 2 a bad argument, no journal, or a
callback that is not an approval.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_approvals", "run_approvals"]

_STATES = ("pending", "resolved", "rejected", "timed_out", "cancelled", "closed")


def _journal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--journal", required=True, metavar="J",
                        help="the journal: a SQLite file path or a postgresql:// DSN")


def add_approvals(commands: Any) -> None:
    approvals = commands.add_parser("approvals", help="tool calls waiting for a reviewer").add_subparsers(
        dest="approvals_command", required=True)
    listing = approvals.add_parser("list", help="approvals in a journal (read only)")
    _journal(listing)
    listing.add_argument("--state", choices=_STATES, default="pending",
                         help="only approvals in this state (default pending; resolved = approved)")
    listing.add_argument("--job", help="only this job id (journal id)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    approve = approvals.add_parser("approve", help="let the tool call run")
    _journal(approve)
    approve.add_argument("callback_id", metavar="ID", help="the approval's callback id (approvals list; an id starting with '-' goes after '--')")
    approve.add_argument("--reason", default="", help="kept with the approval")
    reject = approvals.add_parser("reject", help="refuse the tool call; the model gets the reason")
    _journal(reject)
    reject.add_argument("callback_id", metavar="ID", help="the approval's callback id (approvals list; an id starting with '-' goes after '--')")
    reject.add_argument("--reason", required=True, help="why: the model sees it as the call's result")
    for parser in (approve, reject):
        parser.add_argument("--by", dest="decided_by", default="cli", help="who decides (default cli)")


def _list(args: argparse.Namespace) -> int:
    from flink_agents.cli.inspect_commands import _table
    from flink_agents.inspection.approvals import list_approvals

    rows = list_approvals(args.journal, args.state, args.job)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return 0
    shown = [{**row, "arguments": json.dumps(row["arguments"], sort_keys=True)} for row in rows]
    print(_table(shown, ["callback_id", "key", "seq", "tool", "arguments", "state", "created", "deadline"]))
    return 0


def _decide(args: argparse.Namespace) -> int:
    from flink_agents.inspection.approvals import decide
    from flink_agents.stores.callbacks import ACCEPTED, UNKNOWN

    approve = args.approvals_command == "approve"
    outcome = decide(args.journal, args.callback_id, approve, args.reason, args.decided_by)
    if outcome == ACCEPTED:
        print(f"{'approved' if approve else 'rejected'} {args.callback_id}")
        return 0
    if outcome == UNKNOWN:
        print(f"flink-agents: no approval {args.callback_id} in the journal (never created, or pruned)",
              file=sys.stderr)
        return 1
    from flink_agents.inspection.approvals import list_approvals

    state = next((row["state"] for row in list_approvals(args.journal, None)
                  if row["callback_id"] == args.callback_id), "finished")
    print(f"flink-agents: approval {args.callback_id} was already decided: {state}", file=sys.stderr)
    return 1


def run_approvals(args: argparse.Namespace) -> int:
    """Run ``approvals <list|approve|reject>``; an error (no journal, a
    callback that is not an approval) is one line on stderr and exit 2, as
    argparse's for a bad argument, apart from 1 (already decided, unknown)."""
    try:
        return _list(args) if args.approvals_command == "list" else _decide(args)
    except ValueError as exc:
        print(f"flink-agents: {exc}", file=sys.stderr)
        return 2
