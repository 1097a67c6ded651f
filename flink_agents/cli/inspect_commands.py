"""``flink-agents runs list|show`` and ``callbacks list``: read-only views of
a journal store (``flink_agents.inspection``), as a table or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

__all__ = ["add_callbacks_list", "add_runs", "run_callbacks_list", "run_runs"]


def parse_since(text: str, now_s: Optional[float] = None) -> float:
    """Unix seconds of ``--since``: ISO-8601, or a duration ago (``30m``, ``1h``)."""
    from flink_agents.inspection.since import parse_since as since_seconds

    try:
        return since_seconds(text, now_s)
    except ValueError as exc:
        raise SystemExit(f"flink-agents: --{exc}") from None


def _journal_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--journal", required=True, metavar="J",
                        help="the journal: a SQLite file path or a postgresql:// DSN (read only)")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")


def add_runs(commands: Any) -> None:
    runs = commands.add_parser("runs", help="inspect record runs in a journal").add_subparsers(
        dest="runs_command", required=True)
    listing = runs.add_parser("list", help="one line per record run")
    _journal_arg(listing)
    listing.add_argument("--job", help="only this job id (journal id)")
    listing.add_argument("--key", help="only this key (B01, or JSON: 42, {\"id\": 1})")
    listing.add_argument("--state", choices=("running", "parked", "failed", "finished"))
    listing.add_argument("--since", help="runs started since: ISO-8601 or a duration ago (30m, 1h, 2d)")
    listing.add_argument("--limit", type=int, default=100, help="the latest N runs (default 100)")
    listing.add_argument("--prices", metavar="FILE", help="JSON or YAML {model: {input, output}} USD per 1M tokens")
    show = runs.add_parser("show", help="one run's steps, decoded (secrets and callback capabilities redacted)")
    _journal_arg(show)
    show.add_argument("--key", required=True)
    show.add_argument("--seq", required=True, type=int)
    show.add_argument("--job", help="the job id, when the key's run is in several jobs")
    show.add_argument("--prices", metavar="FILE")
    from flink_agents.cli.control_commands import add_control_commands

    add_control_commands(runs)


def add_callbacks_list(callbacks: Any) -> None:
    listing = callbacks.add_parser("list", help="callbacks in a journal (ids and tokens never shown)")
    _journal_arg(listing)
    listing.add_argument("--state", choices=("pending", "resolved", "rejected", "timed_out", "cancelled", "closed"))
    listing.add_argument("--job")
    listing.add_argument("--key")
    listing.add_argument("--limit", type=int, default=100)


def _prices(path: Optional[str]) -> Any:
    if not path:
        return None
    from flink_agents.runtime.execution.usage import PriceTable

    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        data = yaml.safe_load(text)
    return PriceTable(data)


def _table(rows: List[Dict[str, Any]], columns: List[str]) -> str:
    cells = [[c.upper() for c in columns]] + [["-" if r.get(c) is None else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells)


def _open(journal: str) -> Any:
    from flink_agents.inspection import open_reader

    try:
        return open_reader(journal)
    except ValueError as exc:
        raise SystemExit(f"flink-agents: {exc}") from None


def run_runs(args: argparse.Namespace) -> int:
    from flink_agents.cli.control_commands import CONTROL_COMMANDS, run_control_command
    from flink_agents.inspection import list_runs, show_run

    if args.runs_command in CONTROL_COMMANDS:
        return run_control_command(args)

    with _open(args.journal) as reader:
        if args.runs_command == "list":
            since = parse_since(args.since) if args.since else None
            runs = list_runs(reader, args.job, args.key, args.state, since, args.limit, _prices(args.prices))
            if args.json:
                for run in runs:
                    print(json.dumps(run, sort_keys=True))
            else:
                print(_table(runs, ["job", "key", "seq", "state", "outcome", "start", "duration_ms", "model_calls",
                                    "tool_calls", "tokens", "cost_usd"]))
            return 0
        try:
            run = show_run(reader, args.key, args.seq, args.job, _prices(args.prices))
        except ValueError as exc:
            raise SystemExit(f"flink-agents: {exc}") from None
        if run is None:
            print(f"flink-agents: no run #{args.seq} of key {args.key!r} in {reader.description}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(run, indent=2, sort_keys=True))
            return 0
        head = {k: v for k, v in run.items() if k not in ("steps", "callbacks")}
        print(" ".join(f"{k}={v}" for k, v in head.items() if v is not None))
        for step in run["steps"]:
            print(f"\n{step['step']}" + (f"  [{step['journal_id']}]" if "/" in step["journal_id"] else ""))
            for record in step["records"]:
                fields = {k: v for k, v in record.items() if k not in ("kind", "committed")}
                print(f"  {record['kind']}: {json.dumps(fields, sort_keys=True)}")
        if run["callbacks"]:
            print()
            print(_table(run["callbacks"], ["callback", "step", "purpose", "state", "created", "deadline", "completed"]))
    return 0


def run_callbacks_list(args: argparse.Namespace) -> int:
    from flink_agents.inspection import list_callbacks

    with _open(args.journal) as reader:
        rows = list_callbacks(reader, args.state, args.job, args.key, args.limit)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    else:
        print(_table(rows, ["callback", "job", "key", "seq", "step", "purpose", "state", "created", "deadline",
                            "completed"]))
    return 0
