"""The ``flink-agents`` command.

    flink-agents plan show MODULE:AGENT     print an agent's compiled plan (JSON)
    flink-agents plan write [--check]       regenerate (or check) plans/*.json
    flink-agents run review-analysis [...]  run the review-analysis job
    flink-agents run shipping-claims [...]  run the shipping-claims job (callbacks)
    flink-agents callbacks serve [...]      serve the callback ingress (HTTP)
    flink-agents callbacks list --journal J  callbacks, capabilities redacted
    flink-agents runs list|show --journal J  record runs in a journal (read only)
    flink-agents approvals list|approve|reject --journal J  tool calls waiting for a reviewer
    flink-agents ui --journal J [--port P]   the web inspector (runs, timelines, approvals, controls)
    flink-agents run-yaml FILE --input F    run a YAML-declared agent over JSON lines
"""

from __future__ import annotations

import argparse
import os
import importlib
import sys
from pathlib import Path
from typing import Any, Dict, List

from flink_agents.cli.job_help import cli_prog
from flink_agents.plan.agent_plan import AgentPlan

__all__ = ["main", "SNAPSHOTS"]

# Snapshot file under plans/ -> the agent it is compiled from (default arguments).
SNAPSHOTS: Dict[str, str] = {
    "product_qa.json": "flink_agents.jobs.product_qa:ProductQAAgent",
    "review_analysis.json": "flink_agents.jobs.review_analysis:ReviewAnalysisAgent",
    "review_analysis_pydantic_ai.json": "flink_agents.jobs.review_analysis_pydantic_ai:ReviewAnalysisPydanticAIAgent",
    "review_triage.json": "flink_agents.jobs.review_triage:ReviewTriageAgent",
    "shipping_claims.json": "flink_agents.jobs.shipping_claims:ShippingClaimsAgent",
}
JOBS: Dict[str, str] = {
    "product-qa": "flink_agents.jobs.product_qa:main",
    "review-analysis": "flink_agents.jobs.review_analysis:main",
    "review-analysis-pydantic-ai": "flink_agents.jobs.review_analysis_pydantic_ai:main",
    "review-triage": "flink_agents.jobs.review_triage:main",
    "shipping-claims": "flink_agents.jobs.shipping_claims:main",
}


def _load(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"expected MODULE:NAME, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"flink-agents: cannot load {spec!r}: {exc}") from None
    return obj


def compile_spec(spec: str) -> AgentPlan:
    """The plan of the agent ``MODULE:NAME`` (a class, built with no arguments,
    or an instance)."""
    agent = _load(spec)
    return AgentPlan.from_agent(agent() if isinstance(agent, type) else agent)


def _plans_dir() -> Path:
    """``plans/`` of the checkout this package runs from (beside
    ``flink_agents/`` and ``jobs/``, not in the current directory)."""
    import flink_agents

    return Path(flink_agents.__file__).resolve().parents[1] / "plans"


def _plan_write(check: bool) -> int:
    stale: List[str] = []
    for file_name, spec in SNAPSHOTS.items():
        path = _plans_dir() / file_name
        text = compile_spec(spec).to_json()
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(f"{path} ({'stale' if path.exists() else 'missing'})")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("plan snapshots out of date (run 'flink-agents plan write'): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


def _callbacks_serve(args: argparse.Namespace) -> int:
    """``callbacks serve``: open the journal store the flags name (as a job's
    ``journal.*`` keys would) and serve the ingress until a signal."""
    from flink_agents.ingress.auth import (
        ALLOW_UNAUTHENTICATED_KEY,
        AUTH_TOKEN_FILE_KEY,
        SIGNING_KEY_FILE_KEY,
        IngressAuth,
        check_bind,
    )
    from flink_agents.ingress.options import IngressLimits
    from flink_agents.ingress.server import describe_store, serve_forever
    from flink_agents.stores.factory import open_journal_store

    # The limit and authentication flags are the callbacks.ingress.* keys;
    # errors name the key. Secrets come from files or the environment only.
    try:
        limits = IngressLimits.from_config(
            {key: getattr(args, name) for key, name in IngressLimits.keys().items()}
        )
        auth = IngressAuth.from_config({
            AUTH_TOKEN_FILE_KEY: args.auth_token_file,
            SIGNING_KEY_FILE_KEY: args.signing_key_file,
            ALLOW_UNAUTHENTICATED_KEY: args.allow_unauthenticated,
        })
        check_bind(args.host, auth)
    except ValueError as exc:
        raise SystemExit(f"flink-agents: {exc}") from None

    config = {
        "journal.store": args.journal_store,
        "journal.sqlite.path": args.sqlite_path,
        "journal.postgres.dsn": args.postgres_dsn,
    }
    # A typo must not start an ingress that answers every id "unknown": the
    # outside system would take that 404 as final and drop its answer.
    kind = (args.journal_store or "sqlite").lower()
    if kind == "memory":
        raise SystemExit("flink-agents: an in-memory journal holds no other process's callbacks; "
                         "serve the job's SQLite file or PostgreSQL database")
    if kind == "sqlite":
        from flink_agents.stores.factory import DEFAULT_SQLITE_PATH

        path = os.path.abspath(args.sqlite_path or DEFAULT_SQLITE_PATH)
        if not os.path.isfile(path) and not args.create:
            raise SystemExit(f"flink-agents: no journal at {path}: point --sqlite-path at the job's "
                             "journal file (its journal.sqlite.path), or pass --create to create it")
    try:
        store = open_journal_store({name: value for name, value in config.items() if value})
    except ValueError as exc:
        raise SystemExit(f"flink-agents: {exc}") from None
    description = describe_store(store)
    if args.create:
        store.count_entries()  # creates the file and its schema now
    if not callable(getattr(store, "complete", None)):
        raise SystemExit(f"flink-agents: the {description} journal store does not hold callbacks")

    def announce(base_url: str) -> None:
        print(f"serving callbacks on {base_url} (journal: {description})", flush=True)
        print(f"authentication: {auth.describe()}", file=sys.stderr, flush=True)

    try:
        serve_forever(store, args.host, args.port, on_ready=announce, limits=limits, auth=auth)
    except OSError as exc:  # e.g. the port is taken
        raise SystemExit(f"flink-agents: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0


def _add_run_yaml(commands: Any) -> None:
    run_yaml = commands.add_parser(
        "run-yaml", help="run an agent declared in YAML over a JSON-lines input (docs/yaml_agents.md)"
    )
    run_yaml.add_argument("files", nargs="+", metavar="FILE",
                          help="YAML agent files, loaded in order (agents and shared resources)")
    run_yaml.add_argument("--input", required=True, metavar="FILE.jsonl", help="one JSON value per line")
    run_yaml.add_argument("--output", metavar="FILE.jsonl",
                          help="where to write one JSON line per output (default: standard output)")
    run_yaml.add_argument("--agent", help="the agent to run, when the files declare more than one")
    run_yaml.add_argument("--key", metavar="FIELD",
                          help="key each record by this field (per-key order and memory); without it, "
                               "each record is its own key (local runner only)")
    run_yaml.add_argument("--runner", choices=("local", "flink"), default="local",
                          help="the embedded local runner (default) or a local Flink mini-cluster")
    run_yaml.add_argument("--parallelism", type=int, default=1, metavar="N", help="Flink parallelism (--runner flink)")


def version_text() -> str:
    """``flink-agents --version``: this runtime's version and the Flink it
    runs on (the import package is ``flink_agents``, as Flink Agents')."""
    from importlib.metadata import PackageNotFoundError, version

    from flink_agents import __version__

    try:
        flink = f"apache-flink {version('apache-flink')}"
    except PackageNotFoundError:
        flink = "apache-flink not installed"
    return f"flink-agents {__version__} (this durable runtime; {flink}; Python {sys.version.split()[0]})"


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flink-agents")
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="compiled agent plans").add_subparsers(dest="plan_command", required=True)
    show = plan.add_parser("show", help="print an agent's plan as JSON (secrets shown as ***)")
    show.add_argument("agent", help="MODULE:AGENT, e.g. flink_agents.jobs.review_analysis:ReviewAnalysisAgent")
    write = plan.add_parser("write", help="regenerate the jobs' plans/*.json snapshots")
    write.add_argument("--check", action="store_true", help="only report stale snapshots (exit 1)")
    run = commands.add_parser("run", help="run a bundled job")
    run.add_argument("job", choices=sorted(JOBS))
    job_args = run.add_argument("job_args", nargs=argparse.REMAINDER, metavar="...",
                                help="arguments of the job (see its --help)")
    job_args.required = False  # argparse marks a REMAINDER positional required: "required: job, job_args"
    callbacks = commands.add_parser("callbacks", help="durable callbacks").add_subparsers(
        dest="callbacks_command", required=True
    )
    serve = callbacks.add_parser("serve", help="serve the callback ingress until SIGINT/SIGTERM")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; any other needs authentication)")
    serve.add_argument("--port", type=int, default=8089, help="TCP port; 0 picks a free one (default 8089)")
    serve.add_argument(
        "--journal-store", choices=("sqlite", "postgres", "memory"), default="sqlite",
        help="the journal store holding the callbacks (default sqlite)",
    )
    serve.add_argument("--sqlite-path", help="the SQLite journal file (default flink_agents_journal.db here)")
    serve.add_argument("--postgres-dsn", help="the PostgreSQL DSN (default $FLINK_AGENTS_POSTGRES_DSN)")
    serve.add_argument("--create", action="store_true",
                       help="create the SQLite journal if it does not exist yet (the ingress starts before the job)")
    # Limits (flink_agents/ingress/options.py); each is the key callbacks.ingress.<dest>.
    serve.add_argument("--max-body-bytes", dest="max_body_bytes", metavar="BYTES",
                       help="largest POST body; over it, 413 (default 1048576)")
    serve.add_argument("--header-timeout-s", dest="header_timeout_s", metavar="SECONDS",
                       help="time for a request's line and headers; over it, the connection is closed (default 10)")
    serve.add_argument("--body-timeout-s", dest="body_timeout_s", metavar="SECONDS",
                       help="time to receive a whole POST body; over it, 408 (default 30)")
    serve.add_argument("--idle-timeout-s", dest="idle_timeout_s", metavar="SECONDS",
                       help="time a kept-alive connection may wait for its next request (default 30)")
    serve.add_argument("--max-connections", dest="max_connections", metavar="N",
                       help="connections open at once; one more is answered 503 and closed (default 512)")
    # Authentication (flink_agents/ingress/auth.py): secrets from files or the
    # environment, never from the command line (it shows in ps).
    serve.add_argument("--auth-token-file", metavar="PATH",
                       help="require 'Authorization: Bearer <token>' on every POST, the token read from this "
                            "file (callbacks.ingress.auth_token_file; default $FLINK_AGENTS_CALLBACK_AUTH_TOKEN)")
    serve.add_argument("--signing-key-file", metavar="PATH",
                       help="require URLs signed by the job with the key in this file "
                            "(callbacks.ingress.signing_key_file; default $FLINK_AGENTS_CALLBACK_SIGNING_KEY)")
    serve.add_argument("--allow-unauthenticated", action="store_true",
                       help="listen on an address other than loopback without authentication "
                            "(callbacks.ingress.allow_unauthenticated)")
    from flink_agents.cli.inspect_commands import add_callbacks_list, add_runs, run_callbacks_list, run_runs

    from flink_agents.cli.approval_commands import add_approvals, run_approvals

    add_callbacks_list(callbacks)
    add_runs(commands)
    add_approvals(commands)
    _add_run_yaml(commands)
    from flink_agents.cli.ui_command import add_ui, run_ui

    add_ui(commands)
    args = parser.parse_args(argv)

    if args.command == "ui":
        return run_ui(args)

    if args.command == "runs":
        return run_runs(args)
    if args.command == "approvals":
        return run_approvals(args)
    if args.command == "callbacks" and args.callbacks_command == "list":
        return run_callbacks_list(args)

    if args.command == "run-yaml":
        from flink_agents.cli.run_yaml import run_yaml

        return run_yaml(args)
    if args.command == "callbacks":
        return _callbacks_serve(args)
    if args.command == "plan" and args.plan_command == "show":
        sys.stdout.write(compile_spec(args.agent).to_json())
        return 0
    if args.command == "plan":
        return _plan_write(args.check)
    # prog: the job's --help and usage errors name the command the user typed.
    return int(_load(JOBS[args.job])(args.job_args, prog=cli_prog(args.job)) or 0)


if __name__ == "__main__":
    sys.exit(main())
