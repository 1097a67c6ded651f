"""Input records of the product-QA job: questions about products, as JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ProductQuestion", "read_questions"]


class ProductQuestion(BaseModel):
    """One question: ``{"question_id", "product_id", "question"}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question_id: str = Field(min_length=1)
    product_id: str = Field(min_length=1)
    question: str = Field(min_length=1)


def read_questions(path: Path) -> List[Dict[str, Any]]:
    """Decode a JSONL file of questions (``{"product_id", "question"}``,
    optional ``"question_id"``, default ``"<file name>:<line>"``); blank
    lines are ignored.

    Raises:
        ValueError: A line is not a valid question (``path:line: bad question
            record: reason``) or two lines have the same ``question_id``.
        OSError: The file cannot be read.
    """
    questions: List[Dict[str, Any]] = []
    seen: Dict[str, int] = {}
    with open(path, encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("the line is not a JSON object")
                data.setdefault("question_id", f"{path.name}:{line_no}")
                question = ProductQuestion.model_validate(data)
            except (ValueError, ValidationError) as exc:
                reason = exc.errors()[0] if isinstance(exc, ValidationError) else None
                detail = f"field {'.'.join(map(str, reason['loc']))!r}: {reason['msg']}" if reason else str(exc)
                raise ValueError(f"{path}:{line_no}: bad question record: {detail}") from None
            if question.question_id in seen:
                raise ValueError(
                    f"{path}:{line_no}: question_id {question.question_id!r} repeats line {seen[question.question_id]}"
                )
            seen[question.question_id] = line_no
            questions.append(question.model_dump())
    return questions
