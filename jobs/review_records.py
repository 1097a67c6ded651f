"""Input and output records of the review-analysis job, and JSONL decoding."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["BadRecordError", "ProductReview", "ReadResult", "ReviewAnalysis", "read_reviews"]

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
