"""The test MCP server over stdio: ``python stdio_server.py [--name N] [--no-prompts] [--only a,b]``.

The environment variables of ``review_tools`` apply (``MCP_CALL_LOG``,
``MCP_EXIT_ON_CALL``).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from review_tools import build_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="reviews")
    parser.add_argument("--no-prompts", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated tool names to offer (default: all)")
    options = parser.parse_args()
    only = [t for t in options.only.split(",") if t] or None
    build_server(options.name, with_prompts=not options.no_prompts, only=only).run("stdio")


if __name__ == "__main__":
    main()
