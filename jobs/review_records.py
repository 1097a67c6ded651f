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

__all__ = ["BadRecordError", "ProductReview", "ReadResult", "ReviewAnalysis", "jsonl_output", "read_reviews"]

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


class BadRecordError(ValueError):
    """An input line is not a valid review; the message names file and line."""


@dataclass
class ReadResult:
    """Decoded reviews, and the lines skipped with ``skip_bad_records``."""

    reviews: List[dict] = field(default_factory=list)
    bad_lines: List[str] = field(default_factory=list)


def _problem(line: str) -> str | None:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    try:
        ProductReview.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        return f"field {where!r}: {first['msg']}"
    return None


def read_reviews(path: Path, skip_bad_records: bool = False) -> ReadResult:
    """Decode a JSONL file of reviews; blank lines are ignored.

    Args:
        path: The file.
        skip_bad_records: Log and count bad lines instead of failing.

    Raises:
        BadRecordError: A line is not a valid review (``path:line: problem``),
            unless ``skip_bad_records``.
    """
    result = ReadResult()
    with open(path, encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            problem = _problem(line)
            if problem is None:
                result.reviews.append(json.loads(line))
                continue
            message = f"{path}:{line_no}: bad review record: {problem}"
            if not skip_bad_records:
                raise BadRecordError(message)
            log.warning("skipped %s", message)
            result.bad_lines.append(message)
    return result


@contextmanager
def jsonl_output(path: Path, total: int, desc: str) -> Iterator[Callable[[Dict[str, Any]], None]]:
    """A writer of JSON lines to ``path``, with a progress bar of ``total``
    records on stderr. The lines go to ``<path>.partial`` first, renamed to
    ``path`` only when the block completes: a failed run never destroys an
    earlier result. Raises whatever the block raises (the partial file is
    removed)."""
    from tqdm import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "w", encoding="utf-8") as sink, tqdm(
            total=total, unit="review", desc=desc, file=sys.stderr
        ) as progress:
            def write(output: Dict[str, Any]) -> None:
                sink.write(json.dumps(output) + "\n")
                progress.update(1)

            yield write
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
