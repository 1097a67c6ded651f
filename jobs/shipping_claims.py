"""The shipping-claims job: reviews reporting shipping damage open a durable
callback to a carrier-claims system, and wait for its decision.

For each review (``{"id": product id, "review", "ts"}``, keyed by product id)
the agent's one async action asks the offline lexicon whether the review
reports shipping damage (``has_shipping_damage``). If it does, the action

1. creates a callback (``ctx.create_callback``, ``--claim-timeout-s``),
2. files a claim with the carrier through ``ctx.durable_execute_async``: one
   JSON line ``{claim_id, review_id, product_id, text, resolve_url,
   reject_url, deadline_ms}`` appended to the carrier's inbox file (journaled,
   so a replay does not file it again),
3. waits for the carrier's POST to one of the two URLs (``await cb``).

One JSON line per review::

    {"id": review id, "product_id", "shipping_damage": false, "claim": null}
    {"id", "product_id", "shipping_damage": true, "claim_id",
     "claim": "approved"|"rejected"|"timed_out", "carrier": <its JSON body,
     the body as text if it is not JSON, or why there is none>}

The review id is ``<product id>-<ts>``. The claim id is a digest of the
callback id: stable across replays, and safe to log (the URLs, which carry
the id and each route's token, are the capabilities to complete the
callback, and appear only in the carrier's private inbox).

``main`` runs the whole flow in one process: the callback ingress
(``CallbackIngress`` on the job's SQLite journal, a free port by default,
requiring a bearer token made for the run, which only the carrier gets),
the carrier (``python -m flink_agents.jobs.carrier_claims``, a subprocess tailing the
inbox), and the job on a Flink mini-cluster (or the local runner). See
docs/callbacks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import flink_agents
from flink_agents._private_files import make_private_dirs, open_private
from flink_agents.api.agents.agent import Agent
from flink_agents.api.callbacks import (
    MAX_CALLBACK_TIMEOUT_S,
    MIN_CALLBACK_TIMEOUT_S,
    CallbackRejected,
    CallbackTimeout,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.runner_context import RunnerContext
from flink_agents.cli.job_help import job_parser
from flink_agents.integrations.chat_models.local.lexicon import has_shipping_damage
from flink_agents.jobs.review_analysis import (
    SAMPLE_INPUT, add_execution_mode_argument, execution_mode_of, flink_environment, product_id_of,
)
from flink_agents.jobs.review_records import ProductReview, read_reviews

__all__ = [
    "ClaimsRun", "ClaimsSetup", "ShippingClaimsAgent", "carrier_answer", "claim_if_damaged",
    "claims_services", "file_claim", "main", "run_job", "run_locally", "run_on_flink", "summarize",
]

# The carrier process starts in the directory holding this flink_agents (the
# checkout, or site-packages), so `python -m` imports the same code as the job.
PACKAGE_ROOT = Path(flink_agents.__file__).resolve().parents[1]
INBOX_OPTION = "shipping_claims.inbox"
TIMEOUT_OPTION = "shipping_claims.claim_timeout_s"
DEFAULT_CLAIM_TIMEOUT_S = 30.0


def review_id_of(review: ProductReview) -> str:
    """A review's id: its product id and timestamp."""
    return f"{review.id}-{review.ts}"


def claim_id_of(callback_id: str) -> str:
    """The claim's id: 16 hex digits of a digest of the callback id."""
    return hashlib.sha256(callback_id.encode("ascii")).hexdigest()[:16]


def file_claim(inbox: str, claim: Dict[str, Any]) -> str:
    """Append ``claim`` as one JSON line to the carrier's inbox, durably
    (one ``write`` on an ``O_APPEND`` descriptor, so concurrent writers do
    not interleave, then ``fsync``). The inbox is private (0600, never
    through a link): claims carry the callback URLs. Returns the claim id."""
    line = (json.dumps(claim, ensure_ascii=False) + "\n").encode("utf-8")
    fd = open_private(inbox, append=True)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {inbox}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)
    return claim["claim_id"]


def carrier_answer(body: Any) -> Any:
    """The carrier's body as the output keeps it: parsed JSON, else the text
    (bytes that are not UTF-8 with the odd bytes as ``\\xNN``), never dropped."""
    text = body.decode("utf-8", "backslashreplace") if isinstance(body, bytes) else str(body)

    def not_json(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    try:
        return json.loads(text, parse_constant=not_json)
    except ValueError:
        return text


async def claim_if_damaged(event: InputEvent, ctx: RunnerContext) -> None:
    """The agent's action: output at once, or file a claim and wait for it."""
    review = ProductReview.model_validate(event.input)
    output: Dict[str, Any] = {"id": review_id_of(review), "product_id": review.id}
    if not has_shipping_damage(review.review):
        ctx.send_event(OutputEvent(output={**output, "shipping_damage": False, "claim": None}))
        return
    inbox = ctx.config.get(INBOX_OPTION)
    if not inbox:
        raise ValueError(f"the job configuration has no {INBOX_OPTION!r} (the carrier's inbox file)")
    timeout_s = float(ctx.config.get(TIMEOUT_OPTION, DEFAULT_CLAIM_TIMEOUT_S))
    cb = await ctx.create_callback(f"carrier claim for review {output['id']}", timeout_s)
    claim_id = claim_id_of(cb.callback_id)
    await ctx.durable_execute_async(file_claim, str(inbox), {
        "claim_id": claim_id, "review_id": output["id"], "product_id": review.id, "text": review.review,
        "resolve_url": cb.resolve_url, "reject_url": cb.reject_url, "deadline_ms": cb.deadline_ms,
    })
    # Awaiting the callback first commits the journal: a failover during the
    # wait replays the filing instead of filing the claim again.
    output.update(shipping_damage=True, claim_id=claim_id)
    try:
        output.update(claim="approved", carrier=carrier_answer(await cb))
    except CallbackRejected as rejected:
        output.update(claim="rejected", carrier=carrier_answer(rejected.reason))
    except CallbackTimeout as timeout:
        output.update(claim="timed_out", carrier=f"no decision within {timeout.timeout_s:g} s")
    ctx.send_event(OutputEvent(output=output))


class ShippingClaimsAgent(Agent):
    """Files a carrier claim for each review reporting shipping damage and
    waits for the decision (job config: ``shipping_claims.inbox``,
    ``shipping_claims.claim_timeout_s``, ``callbacks.base_url``)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_action("claim_if_damaged", [InputEvent], claim_if_damaged)


# -- the flow: ingress, carrier, job -------------------------------------------


@dataclass
class ClaimsSetup:
    """Where one run keeps its files, and how its services run.

    Attributes:
        journal_path: The SQLite journal (callbacks live in it too).
        inbox_path: The carrier's inbox; emptied at the start of a run.
        carrier_log_path: The carrier's log.
        claim_timeout_s: Each claim's deadline, seconds after filing.
        callback_host, callback_port: Where the ingress listens (port 0: a free one).
        carrier_args: More arguments of ``flink_agents.jobs.carrier_claims``.
    """

    journal_path: Path
    inbox_path: Path
    carrier_log_path: Path
    claim_timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S
    callback_host: str = "127.0.0.1"
    callback_port: int = 0
    carrier_args: List[str] = field(default_factory=list)

    @classmethod
    def beside(cls, output: Path, **options: Any) -> "ClaimsSetup":
        """Files named after ``output``, in its directory."""
        def beside_output(suffix: str) -> Path:
            return output.with_name(output.name + suffix)

        return cls(beside_output(".journal.db"), beside_output(".carrier-inbox.jsonl"),
                   beside_output(".carrier.log"), **options)


@dataclass
class ClaimsRun:
    """What the services saw: the ingress's POST counters (by outcome:
    accepted, unknown, late, too_large, store_errors) and the carrier's exit
    code (None while it runs)."""

    base_url: str
    config: Dict[str, Any]
    posts: Dict[str, int] = field(default_factory=dict)
    carrier_exit_code: Optional[int] = None


@contextlib.contextmanager
def claims_services(setup: ClaimsSetup, carrier_stop_timeout_s: float = 30.0) -> Iterator[ClaimsRun]:
    """Start the ingress and the carrier; yield the job's configuration in a
    ``ClaimsRun``; on exit (also on failure) stop the carrier (it answers what
    it still holds), then the ingress."""
    from flink_agents.ingress import METRICS_KEY, CallbackIngress, IngressAuth
    from flink_agents.jobs.carrier_claims import AUTH_TOKEN_ENV
    from flink_agents.stores.factory import open_journal_store

    for path in (setup.journal_path, setup.inbox_path, setup.carrier_log_path):
        make_private_dirs(path.parent)
    # Emptied for this run, readable by its owner only: claims carry the URLs.
    os.close(open_private(setup.inbox_path))
    store = open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": str(setup.journal_path)})
    # The ingress takes POSTs from the carrier only: a bearer token made for
    # this run, handed to the carrier in its environment (never on its
    # command line or in a log). A leaked claim URL alone completes nothing.
    token = secrets.token_urlsafe(24)
    ingress = CallbackIngress(
        store, setup.callback_host, setup.callback_port, auth=IngressAuth(bearer_token=token)
    ).start()
    run = ClaimsRun(ingress.base_url, {
        "journal.store": "sqlite",
        "journal.sqlite.path": str(setup.journal_path.resolve()),
        "callbacks.base_url": ingress.base_url,
        INBOX_OPTION: str(setup.inbox_path.resolve()),
        TIMEOUT_OPTION: setup.claim_timeout_s,
    })
    try:
        with tempfile.TemporaryDirectory(prefix="carrier-") as directory:
            stop_file = Path(directory) / "stop"
            with os.fdopen(open_private(setup.carrier_log_path), "wb") as carrier_log:  # it names claims and URLs
                carrier = subprocess.Popen(
                    [sys.executable, "-m", "flink_agents.jobs.carrier_claims", "--inbox", str(setup.inbox_path.resolve()),
                     "--stop-file", str(stop_file), *setup.carrier_args],
                    cwd=PACKAGE_ROOT, stdout=carrier_log, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", AUTH_TOKEN_ENV: token},
                )
                try:
                    yield run
                finally:
                    stop_file.touch()
                    try:
                        run.carrier_exit_code = carrier.wait(carrier_stop_timeout_s)
                    except subprocess.TimeoutExpired:
                        carrier.kill()
                        run.carrier_exit_code = carrier.wait()
    finally:
        run.posts = ingress.app[METRICS_KEY].snapshot()
        ingress.stop()


def run_locally(reviews: List[Dict[str, Any]], config: Dict[str, Any], on_output: Any = None) -> List[Dict[str, Any]]:
    """The agent over ``reviews`` on the local runner, with ``config``."""
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    records = env.from_list([{"key": product_id_of(r), "value": r} for r in reviews]).apply(ShippingClaimsAgent())
    collected = records.to_list()
    env.execute()
    outputs = [output for record in collected for output in record.values()]
    if on_output is not None:
        for output in outputs:
            on_output(output)
    return outputs


def run_on_flink(
    reviews: List[Dict[str, Any]], config: Dict[str, Any], parallelism: int = 2, checkpoint_interval_ms: int = 2_000,
    on_output: Any = None, execution_mode: str | None = "thread",
) -> List[Dict[str, Any]]:
    """The agent over ``reviews`` as a job on a Flink mini-cluster, with
    ``config``; outputs come back as they are produced."""
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = flink_environment(parallelism, checkpoint_interval_ms, execution_mode)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **config)
    with tempfile.TemporaryDirectory(prefix="shipping-claims-") as directory:
        # A file source: its position is checkpointed, so a failover does not
        # read (and claim) reviews again.
        path = Path(directory) / "reviews.jsonl"
        path.write_text("".join(json.dumps(review) + "\n" for review in reviews), encoding="utf-8")
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(path)).build()
        lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "reviews").uid("shipping-claims:source")
        decoded = lines.map(json.loads).uid("shipping-claims:decode")
        outputs = agents_env.from_datastream(decoded, product_id_of, key_type=Types.STRING()).apply(
            ShippingClaimsAgent()
        ).to_datastream()
        results: List[Dict[str, Any]] = []
        with outputs.execute_and_collect("shipping-claims") as collected:
            for output in collected:
                results.append(output)
                if on_output is not None:
                    on_output(output)
        return results


def run_job(
    reviews: List[Dict[str, Any]], setup: ClaimsSetup, runner: str = "flink", on_output: Any = None, **flink: Any
) -> tuple[List[Dict[str, Any]], ClaimsRun]:
    """The whole flow: services up, the job, services down.

    Args:
        runner: ``"flink"`` (mini-cluster; ``flink`` takes ``parallelism``,
            ``checkpoint_interval_ms``, ``execution_mode``) or ``"local"``.

    Returns:
        The outputs, and what the services saw.
    """
    with claims_services(setup) as run:
        if runner == "flink":
            outputs = run_on_flink(reviews, run.config, on_output=on_output, **flink)
        else:
            outputs = run_locally(reviews, run.config, on_output)
    return outputs, run


# -- command line --------------------------------------------------------------


def _claim_timeout(text: str) -> float:
    value = float(text)
    if not MIN_CALLBACK_TIMEOUT_S <= value <= MAX_CALLBACK_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"must be within {MIN_CALLBACK_TIMEOUT_S:g} and {MAX_CALLBACK_TIMEOUT_S:g} s, not {text}"
        )
    return value


def _arguments(argv: List[str] | None, prog: str | None = None) -> argparse.Namespace:
    from flink_agents.jobs.review_analysis import positive_int

    parser = job_parser(
        "flink_agents.jobs.shipping_claims", __doc__, prog, epilog="docs/callbacks.md describes the job.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--input", type=Path, default=SAMPLE_INPUT, help="JSONL of {id, review, ts}")
    parser.add_argument("--output", type=Path, default=Path("out/shipping_claims.jsonl"),
                        help="one JSON line per review (replaced only when the job succeeds)")
    parser.add_argument("--journal", type=Path, default=None,
                        help="SQLite journal, callbacks included (none given: OUTPUT.journal.db)")
    parser.add_argument("--inbox", type=Path, default=None,
                        help="the carrier's inbox, emptied first (none given: OUTPUT.carrier-inbox.jsonl; "
                             "its log: OUTPUT.carrier.log)")
    parser.add_argument("--claim-timeout-s", type=_claim_timeout, default=DEFAULT_CLAIM_TIMEOUT_S,
                        help="how long a claim waits for the carrier's decision (1 to 86400)")
    parser.add_argument("--callback-host", default="127.0.0.1", help="address the callback ingress listens on")
    parser.add_argument("--callback-port", type=int, default=0, help="port of the callback ingress (0: a free one)")
    parser.add_argument("--carrier-decide-after-s", type=float, default=0.2,
                        help="how long the carrier takes to decide a claim")
    parser.add_argument("--carrier-hold-product", action="append", default=[], metavar="ID",
                        help="the carrier holds this product's claims until it stops: they time out, and its "
                             "late answers get 404 (repeatable)")
    parser.add_argument("--runner", choices=["flink", "local"], default="flink",
                        help="Flink mini-cluster or the embedded local runner")
    parser.add_argument("--parallelism", type=positive_int, default=2, help="Flink parallelism")
    add_execution_mode_argument(parser)
    parser.add_argument("--checkpoint-interval-ms", type=positive_int, default=2_000,
                        help="Flink checkpoint interval")
    parser.add_argument("--skip-bad-records", action="store_true",
                        help="log and count malformed lines instead of failing")
    parser.add_argument("--verbose", action="store_true", help="print the full trace of a failure")
    return parser.parse_args(argv)


def summarize(outputs: List[Dict[str, Any]]) -> Dict[str, int]:
    """Claims by outcome: ``claims``, ``approved``, ``rejected``, ``timed_out``."""
    claims = [o["claim"] for o in outputs if o.get("shipping_damage")]
    return {"claims": len(claims), **{state: claims.count(state) for state in ("approved", "rejected", "timed_out")}}


def main(argv: List[str] | None = None, prog: str | None = None) -> int:
    """Run the job; returns the process exit code. ``prog`` names the
    command in ``--help`` (the ``flink-agents run`` form; default the
    ``python -m`` form)."""
    from flink_agents.jobs.review_analysis import failure_summary
    from flink_agents.jobs.review_records import BadRecordError, check_output_path, jsonl_output

    args = _arguments(argv, prog)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_output_path(args.output)
        read = read_reviews(args.input, skip_bad_records=args.skip_bad_records)
    except (BadRecordError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if read.bad_lines:
        print(f"skipped {len(read.bad_lines)} bad record(s) (--skip-bad-records)", file=sys.stderr)
    setup = ClaimsSetup.beside(
        args.output, claim_timeout_s=args.claim_timeout_s, callback_host=args.callback_host,
        callback_port=args.callback_port,
        carrier_args=["--decide-after-s", str(args.carrier_decide_after_s)]
        + [arg for product in args.carrier_hold_product for arg in ("--hold-product", product)],
    )
    setup.journal_path = args.journal or setup.journal_path
    setup.inbox_path = args.inbox or setup.inbox_path
    flink = {} if args.runner == "local" else dict(
        parallelism=args.parallelism, checkpoint_interval_ms=args.checkpoint_interval_ms,
        execution_mode=execution_mode_of(args),
    )
    started = time.monotonic()
    try:
        with jsonl_output(args.output, len(read.reviews), f"shipping-claims ({args.runner})") as write:
            outputs, run = run_job(read.reviews, setup, args.runner, on_output=write, **flink)
    except Exception as exc:
        if args.verbose:
            raise
        print(f"error: the job failed: {failure_summary(exc)} (--verbose prints the full trace; carrier log: "
              f"{setup.carrier_log_path})", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    counts = summarize(outputs)
    print(
        f"{len(outputs)} reviews, {counts['claims']} shipping-damage claim{'' if counts['claims'] == 1 else 's'}: {counts['approved']} approved, "
        f"{counts['rejected']} rejected, {counts['timed_out']} timed out; {run.posts.get('late', 0)} late "
        f"POST(s) -> {args.output} in {elapsed:.1f} s ({args.runner} runner; carrier log "
        f"{setup.carrier_log_path})",
        file=sys.stderr,
    )
    if run.carrier_exit_code:
        print(f"warning: the carrier exited with code {run.carrier_exit_code} (see its log)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # Re-enter through the importable module, so the agent's action is named
    # flink_agents.jobs.shipping_claims.* (as in plans/) rather than __main__.*.
    from flink_agents.jobs.shipping_claims import main as _main

    sys.exit(_main())
