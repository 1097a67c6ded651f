"""The review agent's outputs with a scripted model, and the outputs a
FileSink committed: shared by the standalone-cluster tests."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

__all__ = ["committed_outputs", "expected_review_outputs", "scripted_review_reply", "scripted_score"]


def scripted_score(review: str) -> int:
    """The score the scripted model gives ``review`` (1..5, from its length)."""
    return 1 + len(review) % 5


def scripted_review_reply(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """A valid ReviewAnalysis for the review in the request (the user
    message is ``{"id", "review"}``), the same every time it is asked.

    Raises:
        ValueError: Request ``index`` carries no review.
    """
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and content.startswith("{"):
            review = json.loads(content)["review"]
            return {"role": "assistant", "content": json.dumps({"score": scripted_score(review), "reasons": ["scripted"]})}
    raise ValueError(f"request #{index} has no review")


def expected_review_outputs(reviews: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """What the review agent outputs with the scripted model: each
    product's running count and mean in input order; sorted by (id, ts)."""
    seen: Dict[str, int] = defaultdict(int)
    total: Dict[str, int] = defaultdict(int)
    expected = []
    for review in reviews:
        score = scripted_score(review["review"])
        seen[review["id"]] += 1
        total[review["id"]] += score
        expected.append({"id": review["id"], "ts": review["ts"], "score": score, "reasons": ["scripted"],
                         "reviews_seen": seen[review["id"]],
                         "mean_score": round(total[review["id"]] / seen[review["id"]], 3)})
    return sorted(expected, key=lambda o: (o["id"], o["ts"]))


def committed_outputs(directory: Path) -> List[Dict[str, Any]]:
    """The outputs in a FileSink's committed part files under ``directory``
    (in-progress and pending ones are hidden: their names start with '.')."""
    found: List[Dict[str, Any]] = []
    for path in sorted(directory.rglob("part-*")):
        if not path.name.startswith("."):
            found += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return found
