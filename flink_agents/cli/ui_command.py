"""``flink-agents ui``: the web inspector over a journal store
(``flink_agents.inspection.web``), served until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_ui", "run_ui"]


def add_ui(commands: Any) -> None:
    ui = commands.add_parser("ui", help="serve the web inspector (runs, timelines, callbacks, approvals, controls)")
    ui.add_argument("--journal", required=True, metavar="J",
                    help="the journal: a SQLite file path or a postgresql:// DSN")
    ui.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; any other needs --token-file or "
                         "$FLINK_AGENTS_UI_TOKEN)")
    ui.add_argument("--port", type=int, default=8090, help="TCP port; 0 picks a free one (default 8090)")
    ui.add_argument("--token-file", metavar="F",
                    help="the access token, read from this file (default $FLINK_AGENTS_UI_TOKEN, else a new "
                         "random one, printed once in the URL)")


def run_ui(args: argparse.Namespace) -> int:
    from flink_agents.inspection.reader import open_reader
    from flink_agents.inspection.web import serve_until_signal
    from flink_agents.inspection.web_auth import UiAuth, check_ui_bind

    try:
        auth = UiAuth.load(args.token_file)
        check_ui_bind(args.host, auth)
        with open_reader(args.journal) as reader:  # a wrong path fails now, not on the first page
            description = reader.description
    except ValueError as exc:
        raise SystemExit(f"flink-agents: {exc}") from None
    shown_host = f"[{args.host}]" if ":" in args.host else args.host

    def announce(port: int) -> None:
        # The one place the token is shown: the operator opens this URL.
        print(f"flink-agents ui: http://{shown_host}:{port}/?token={auth.token}", flush=True)
        print(f"inspecting {description} (token: {auth.source}); Ctrl-C stops", file=sys.stderr, flush=True)

    try:
        serve_until_signal(args.journal, args.host, args.port, auth, announce)
    except OSError as exc:
        raise SystemExit(f"flink-agents: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0
