"""The carrier-claims system of the shipping-claims job: a small stand-in for
a carrier's claims desk that answers over HTTP.

    python -m flink_agents.jobs.carrier_claims --inbox PATH [--decide-after-s 0.2]
                                  [--stop-file PATH] [--hold-product ID ...]

It tails the inbox, a JSON Lines file the job appends one claim a line to::

    {"claim_id", "review_id", "product_id", "text", "resolve_url",
     "reject_url", "deadline_ms"}

waits ``--decide-after-s`` after reading a claim, decides it (``decide``) and
POSTs the decision as JSON to the claim's ``resolve_url`` (approved) or
``reject_url`` (rejected), with ``urllib.request``. Connection errors and 503
are retried a few times with a growing delay; 404 means the callback is no
longer pending (the claim's deadline passed, so the answer is late) or
unknown, and is logged, never retried. When ``$FLINK_AGENTS_CALLBACK_AUTH_TOKEN``
is set, each POST carries it as ``Authorization: Bearer`` (the job's
ingress requires it). One log line per claim, with the
status code; callback URLs are never logged (they are the capability to
complete the callback).

The rule, deterministic: the carrier pays for damage done in its hands, and
takes the outer packaging as the evidence. A claim is approved when a
sentence of the text names the packaging ("box", "package", "parcel", ...)
within 4 words of a damage word ("crushed", "torn", "soaked", ...), or says
the damage happened "in transit" / "in shipping"; the refund is 20 USD plus
10 per damage word of the text, at most 100. Otherwise it is rejected: an
item broken inside an intact (or unmentioned) package was packed
insufficiently, which is the shipper's business.

``--hold-product ID`` holds that product's claims "for investigation": they
are answered only when the carrier stops, after their deadline, so the job
sees them time out and the ingress answers the late decisions with 404.

Stop: create the ``--stop-file`` (or send SIGTERM/SIGINT). The carrier then
reads the rest of the inbox, answers everything still waiting (held claims
last) and exits: 0, or 1 if a decision could not be delivered.

A malformed inbox line (not JSON, a missing or mistyped field) is logged with
its line number and skipped; a claim id seen before is logged as a duplicate
and not answered twice. Nothing is dropped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import logging
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from flink_agents.cli.job_help import job_parser

__all__ = ["Claim", "Decision", "InboxTail", "MalformedClaim", "decide", "main", "parse_claim", "post_json"]

log = logging.getLogger("flink_agents.jobs.carrier_claims")

APPROVED, REJECTED = "approved", "rejected"
# The ingress's bearer token, if it requires one (``flink_agents.ingress.auth``).
AUTH_TOKEN_ENV = "FLINK_AGENTS_CALLBACK_AUTH_TOKEN"
PACKAGING_WORDS = frozenset("box boxes package packages packaging parcel carton shipment mailer envelope".split())
DAMAGE_WORDS = frozenset(
    "crushed torn soaked wet dented damaged smashed ripped punctured squashed broken crumpled destroyed".split()
)
WINDOW = 4  # words between a packaging word and a damage word
TRANSIT_PHRASES = ("in transit", "in shipping", "during shipping", "during transit", "in the mail")
REFUND_BASE_USD, REFUND_PER_WORD_USD, REFUND_MAX_USD = 20.0, 10.0, 100.0
_WORD = re.compile(r"[a-z]+")
_SENTENCE_END = re.compile(r"[.!?;\n]+")
_FIELDS: Tuple[Tuple[str, type], ...] = (
    ("claim_id", str), ("review_id", str), ("product_id", str), ("text", str),
    ("resolve_url", str), ("reject_url", str), ("deadline_ms", int),
)


class MalformedClaim(ValueError):
    """An inbox line is not a claim; the message says why."""


@dataclass(frozen=True)
class Claim:
    """One claim as the job filed it (see the module docstring)."""

    claim_id: str
    review_id: str
    product_id: str
    text: str
    resolve_url: str
    reject_url: str
    deadline_ms: int

    @property
    def number(self) -> str:
        """The carrier's claim number (from the claim id, safe to log)."""
        return "CLM-" + self.claim_id[:8].upper()


@dataclass(frozen=True)
class Decision:
    """What the carrier answers: the route and the JSON body."""

    approved: bool
    body: Dict[str, Any]


def parse_claim(line: str) -> Claim:
    """One inbox line as a ``Claim``.

    Raises:
        MalformedClaim: Not JSON, not an object, or a field missing, mistyped
            or (URLs) not http(s).
    """
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MalformedClaim(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise MalformedClaim(f"not a JSON object but {type(data).__name__}")
    for name, kind in _FIELDS:
        if name not in data:
            raise MalformedClaim(f"field {name!r} is missing")
        value = data[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise MalformedClaim(f"field {name!r} must be {kind.__name__}, not {type(value).__name__}")
    for name in ("resolve_url", "reject_url"):
        if not data[name].startswith(("http://", "https://")):
            raise MalformedClaim(f"field {name!r} is not an http(s) URL")
    if not data["claim_id"]:
        raise MalformedClaim("field 'claim_id' is empty")
    return Claim(**{name: data[name] for name, _ in _FIELDS})


def _packaging_damage(words: List[str]) -> bool:
    for i, word in enumerate(words):
        if word not in PACKAGING_WORDS or (word in ("box", "boxes") and i > 0 and words[i - 1] == "toe"):
            continue
        if any(w in DAMAGE_WORDS for w in words[max(0, i - WINDOW):i + WINDOW + 1]):
            return True
    return False


def decide(claim: Claim) -> Decision:
    """The carrier's decision on ``claim`` (rule: module docstring)."""
    text = claim.text.lower()
    sentences = [_WORD.findall(s) for s in _SENTENCE_END.split(text)]
    in_transit = [phrase for phrase in TRANSIT_PHRASES if phrase in text]
    body: Dict[str, Any] = {"claim_id": claim.claim_id, "claim_number": claim.number}
    if in_transit or any(_packaging_damage(words) for words in sentences):
        damage_words = sum(1 for words in sentences for w in words if w in DAMAGE_WORDS)
        refund = min(REFUND_MAX_USD, REFUND_BASE_USD + REFUND_PER_WORD_USD * damage_words)
        evidence = f"reported {in_transit[0]}" if in_transit else "damaged packaging"
        return Decision(True, {**body, "decision": APPROVED, "refund_usd": refund, "evidence": evidence})
    return Decision(False, {
        **body, "decision": REJECTED,
        "reason": "no damage to the packaging reported: insufficient packing is the shipper's responsibility",
    })


def post_json(
    url: str, body: Dict[str, Any], attempts: int = 5, first_delay_s: float = 0.2, timeout_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep, token: Optional[str] = None,
) -> Tuple[Optional[int], str]:
    """POST ``body`` as JSON; retries connection errors and 503. With
    ``token``, it goes as ``Authorization: Bearer <token>`` (an ingress that
    requires one answers 401 without it).

    Returns:
        (status code, response text), or (None, the last error) if every
        attempt failed to connect.
    """
    data = json.dumps(body).encode("utf-8")
    delay, error = first_delay_s, ""
    for attempt in range(1, attempts + 1):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, data=data, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            if exc.code != 503 or attempt == attempts:
                return exc.code, text
            error = f"503 {text}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            error = str(getattr(exc, "reason", exc))
        if attempt < attempts:
            sleep(delay)
            delay *= 2
    return None, error


class InboxTail:
    """New complete lines of a growing file, numbered from 1.

    A last line without its newline is held back until it is complete, or
    until ``read(final=True)`` (the writer has finished).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.line_no = 0

    def read(self, final: bool = False) -> List[Tuple[int, str]]:
        try:
            with open(self.path, "rb") as inbox:
                inbox.seek(self._offset)
                chunk = inbox.read()
        except FileNotFoundError:
            chunk = b""
        self._offset += len(chunk)
        pieces = (self._partial + chunk).split(b"\n")
        self._partial = pieces.pop()
        if final and self._partial:
            pieces.append(self._partial)
            self._partial = b""
        lines = []
        for piece in pieces:
            self.line_no += 1
            lines.append((self.line_no, piece.decode("utf-8", "replace")))
        return lines


@dataclass
class Desk:
    """The carrier's state while it runs: claims waiting, and the tallies."""

    decide_after_s: float
    hold: frozenset
    post: Callable[[str, Dict[str, Any]], Tuple[Optional[int], str]] = post_json
    clock: Callable[[], float] = time.monotonic
    waiting: List[Tuple[float, Claim]] = field(default_factory=list)
    held: List[Claim] = field(default_factory=list)
    seen: Dict[str, int] = field(default_factory=dict)
    tally: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("claims", APPROVED, REJECTED, "held", "late", "failed", "duplicates", "malformed"), 0
    ))

    def take(self, line_no: int, line: str) -> None:
        """Queue the claim of one inbox line (or log why it is none)."""
        if not line.strip():
            return
        try:
            claim = parse_claim(line)
        except MalformedClaim as exc:
            self.tally["malformed"] += 1
            log.warning("inbox line %d: malformed claim, skipped: %s", line_no, exc)
            return
        if claim.claim_id in self.seen:
            self.tally["duplicates"] += 1
            log.warning("inbox line %d: duplicate of claim %s (line %d), not answered again",
                        line_no, claim.number, self.seen[claim.claim_id])
            return
        self.seen[claim.claim_id] = line_no
        self.tally["claims"] += 1
        if claim.product_id in self.hold:
            self.tally["held"] += 1
            self.held.append(claim)
            log.info("claim %s (review %s): held for investigation", claim.number, claim.review_id)
        else:
            self.waiting.append((self.clock() + self.decide_after_s, claim))

    def answer_due(self, everything: bool = False) -> None:
        """Answer the claims whose time has come (all of them if ``everything``,
        held ones included)."""
        now = self.clock()
        due = [claim for ready, claim in self.waiting if everything or ready <= now]
        self.waiting = [(ready, claim) for ready, claim in self.waiting if not (everything or ready <= now)]
        if everything:
            due, self.held = due + self.held, []
        for claim in due:
            self._answer(claim)

    def _answer(self, claim: Claim) -> None:
        decision = decide(claim)
        route = APPROVED if decision.approved else REJECTED
        try:
            status, text = self.post(claim.resolve_url if decision.approved else claim.reject_url, decision.body)
        except Exception as exc:  # e.g. a URL urllib cannot use: log it, go on with the next claim
            status, text = None, f"{type(exc).__name__}: {exc}"
        self.tally[route] += 1
        what = f"claim {claim.number} (review {claim.review_id}): {route}"
        if decision.approved:
            what += f", refund {decision.body['refund_usd']:.2f} USD"
        if status == 202:
            log.info("%s -> 202 accepted", what)
        elif status == 404:
            self.tally["late"] += 1
            log.warning("%s -> 404 %s", what, _late_reason(text))
        else:
            self.tally["failed"] += 1
            log.error("%s -> %s: %s", what, status if status is not None else "not delivered", text[:200])


def _late_reason(text: str) -> str:
    try:
        answer = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(answer, dict) and answer.get("state"):
        return f"late: the callback is already {answer['state']}"
    return str(answer.get("error", text[:200])) if isinstance(answer, dict) else text[:200]


def run(inbox: Path, desk: Desk, stop_file: Optional[Path] = None, poll_s: float = 0.05,
        stop_requested: Callable[[], bool] = lambda: False) -> Dict[str, int]:
    """Tail ``inbox`` and answer claims until the stop file appears (or
    ``stop_requested()``); then drain and return the tallies."""
    tail = InboxTail(inbox)
    while True:
        stopping = stop_requested() or (stop_file is not None and stop_file.exists())
        for line_no, line in tail.read(final=stopping):
            desk.take(line_no, line)
        desk.answer_due(everything=stopping)
        if stopping:
            return desk.tally
        time.sleep(poll_s)


def _arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = job_parser("flink_agents.jobs.carrier_claims", __doc__)
    parser.add_argument("--inbox", type=Path, required=True, help="the JSONL file the job appends claims to")
    parser.add_argument("--decide-after-s", type=float, default=0.2, help="delay before answering a claim")
    parser.add_argument("--stop-file", type=Path, default=None, help="drain and exit once this file exists")
    parser.add_argument("--hold-product", action="append", default=[], metavar="ID",
                        help="hold this product's claims until the carrier stops (repeatable)")
    parser.add_argument("--poll-s", type=float, default=0.05, help="how often the inbox is read")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the carrier until stopped; returns the exit code."""
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="carrier-claims %(levelname)s: %(message)s", stream=sys.stderr)
    stop = {"signal": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    token = os.environ.get(AUTH_TOKEN_ENV) or None  # never logged
    desk = Desk(args.decide_after_s, frozenset(args.hold_product),
                post=lambda url, body: post_json(url, body, token=token))
    log.info("watching %s", args.inbox)
    tally = run(args.inbox, desk, args.stop_file, args.poll_s, stop_requested=lambda: stop["signal"])
    log.info(
        "stopped: %d claim(s): %d approved, %d rejected (%d held until now), %d late, %d not delivered, "
        "%d duplicate(s), %d malformed line(s)",
        tally["claims"], tally[APPROVED], tally[REJECTED], tally["held"], tally["late"], tally["failed"],
        tally["duplicates"], tally["malformed"],
    )
    return 1 if tally["failed"] else 0


if __name__ == "__main__":
    from flink_agents.jobs.carrier_claims import main as _main

    sys.exit(_main())
