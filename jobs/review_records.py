"""Input and output records of the review jobs: JSONL decoding, and the
atomically replaced JSONL output."""

from __future__ import annotations

import json
import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flink_agents._private_files import replace_when_done

__all__ = [
    "analysis_output",
    "BadRecordError", "ProductReview", "ReadResult", "ReviewAnalysis", "check_output_path", "jsonl_output",
    "read_reviews",
]

log = logging.getLogger(__name__)


class ProductReview(BaseModel):
    """One input line: ``{"id": product id, "review": text, "ts": unix seconds}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(min_length=1)
    review: str
    ts: int


class ReviewAnalysis(BaseModel):
    """What the model must answer for one review."""

    score: int = Field(ge=1, le=5)
    reasons: List[str]


def analysis_output(summary: Any, review_id: str, ts: Any, analysis: ReviewAnalysis) -> Dict[str, Any]:
    """Fold ``analysis`` into the product's running summary (``summary``:
    the key's short-term memory, ``reviews_seen`` and ``score_sum``) and
    return the job's output record ``{"id", "ts", "score", "reasons",
    "reviews_seen", "mean_score"}`` (mean rounded to 3 places)."""
    seen = (summary.get("reviews_seen") or 0) + 1
    score_sum = (summary.get("score_sum") or 0) + analysis.score
    summary.set("reviews_seen", seen)
    summary.set("score_sum", score_sum)
    return {
        "id": review_id,
        "ts": ts,
        "score": analysis.score,
        "reasons": analysis.reasons,
        "reviews_seen": seen,
        "mean_score": round(score_sum / seen, 3),
    }


class BadRecordError(ValueError):
    """An input line is not a valid review; the message names file and line."""


@dataclass
class ReadResult:
    """Decoded reviews, and the lines skipped with ``skip_bad_records``.

    Attributes:
        reviews: The valid reviews, in file order, as ``ProductReview`` dicts.
        bad_lines: One ``"FILE:LINE: bad review record: reason"`` per
            skipped line, in file order.
        blank_lines: Lines holding only whitespace (no record: ignored, counted).
    """

    reviews: List[dict] = field(default_factory=list)
    bad_lines: List[str] = field(default_factory=list)
    blank_lines: int = 0

    def skipped(self) -> str:
        """What was not read as a review, for the job's report:
        ``"2 bad record(s) skipped, 1 blank line(s) ignored"`` (blank lines
        only when there were some)."""
        text = f"{len(self.bad_lines)} bad record(s) skipped"
        return text + (f", {self.blank_lines} blank line(s) ignored" if self.blank_lines else "")


def _unencodable(data: Any) -> str | None:
    """The first text in the parsed line, key or value at any depth, holding
    a lone surrogate (``"\\ud800"`` in JSON decodes to one): such text has no
    UTF-8 form, and Flink's string serialization fails on it far from the
    line it came from. Checked before the fields are validated, so the
    reason names the surrogate wherever it is."""
    def first(value: Any, where: str) -> str | None:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return (
                    f"{where}: lone surrogate {value[exc.start]!r} at character {exc.start + 1} "
                    "(an unpaired \\uD800-\\uDFFF escape) cannot be encoded as UTF-8"
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                found = first(key, f"a field name ({key!r})") or first(item, f"field {key!r}")
                if found is not None:
                    return found
        elif isinstance(value, list):
            for item in value:
                found = first(item, where)
                if found is not None:
                    return found
        return None

    return first(data, "the record")


def _decode(raw: bytes, first_line: bool) -> tuple[dict | None, str | None]:
    """One line's review, or why it is not one: ``(review, None)`` or
    ``(None, reason)``. Never raises for any content of ``raw``."""
    try:
        # A byte-order mark may open the file; it is not part of the JSON.
        line = raw.decode("utf-8-sig" if first_line else "utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
    try:
        # Without its line break: an error at the line's end is reported at
        # its column, not at column 1 of a next line.
        data = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        # The C decoder counts nesting against the interpreter's recursion
        # limit; a line nested that deep is no review in any case.
        return None, f"not valid JSON (nested too deep: beyond Python's recursion limit of {sys.getrecursionlimit()})"
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        return None, f"not valid JSON ({exc})"
    problem = _unencodable(data)
    if problem is not None:
        return None, problem
    try:
        ProductReview.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"field {where!r}: {first['msg']}" if where else f"the line is not a review object: {first['msg']}"
    return data, None


def read_reviews(path: Path, skip_bad_records: bool = False) -> ReadResult:
    """Decode a JSONL file of reviews (``ProductReview``, one per line, UTF-8);
    blank lines are ignored and counted (``ReadResult.blank_lines``).

    The file is read as bytes and each line decoded on its own, so a line
    that is not UTF-8, not JSON (nesting too deep included), not a review,
    or holds text with no UTF-8 form (a lone surrogate escape) is one bad
    record naming its line; the lines around it are unaffected.

    Args:
        path: The file.
        skip_bad_records: Log (warning), count and skip bad lines instead of
            failing.

    Raises:
        BadRecordError: A line is not a valid review (``path:line: bad review
            record: reason``), unless ``skip_bad_records``.
        OSError: The file cannot be read.
    """
    result = ReadResult()
    with open(path, "rb") as lines:
        for line_no, raw in enumerate(lines, start=1):
            if not raw.strip():
                result.blank_lines += 1
                continue
            review, problem = _decode(raw, first_line=line_no == 1)
            if review is not None:
                result.reviews.append(review)
                continue
            message = f"{path}:{line_no}: bad review record: {problem}"
            if not skip_bad_records:
                raise BadRecordError(message)
            log.warning("skipped %s", message)
            result.bad_lines.append(message)
    return result


def check_output_path(path: Path) -> None:
    """Refuse an output path the job could not replace at its end, before
    the job runs.

    Raises:
        IsADirectoryError: ``path`` is a directory.
        NotADirectoryError: A parent of ``path`` exists and is not a directory.
    """
    if path.is_dir():
        raise IsADirectoryError(f"output {path} is a directory; give a file path, e.g. {path / 'out.jsonl'}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(f"output {path}: {parent} is not a directory")
            break


@contextmanager
def jsonl_output(path: Path, total: int, desc: str, unit: str = "review") -> Iterator[Callable[[Dict[str, Any]], None]]:
    """A writer of JSON lines to ``path``, with a progress bar of ``total``
    records (counted in ``unit``s) on stderr. The lines go to ``<path>.partial`` first, renamed to
    ``path`` only when the block completes: a failed run never destroys an
    earlier result. The file is private (mode 0600, never written through a
    link: ``_private_files.replace_when_done``): outputs hold the model's answers.

    Raises:
        IsADirectoryError, NotADirectoryError: ``path`` cannot be a file
            (``check_output_path``); raised before the block runs.
        UnsafePathError: ``<path>.partial`` is a link or another user's file.
        Whatever the block raises (the partial file is removed).
    """
    from tqdm import tqdm

    check_output_path(path)
    with replace_when_done(path) as sink, tqdm(total=total, unit=unit, desc=desc, file=sys.stderr) as progress:
        def write(output: Dict[str, Any]) -> None:
            sink.write(json.dumps(output) + "\n")
            progress.update(1)

        yield write
