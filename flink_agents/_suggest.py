""""Did you mean" hints for misspelt names (config keys, YAML keys, resource
references), from :func:`difflib.get_close_matches`."""

from __future__ import annotations

import difflib
from typing import Iterable, List

__all__ = ["close_matches", "did_you_mean"]


def close_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> List[str]:
    """The up to ``n`` names of ``choices`` closest to ``word`` (difflib's
    similarity ratio >= ``cutoff``, the closest first); [] when none is close."""
    return difflib.get_close_matches(word, sorted(set(choices)), n=n, cutoff=cutoff)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` (or ``'x' or 'y'``: the two closest) for the
    names of ``choices`` close to ``word``, else ``""``: a suffix for a message."""
    matches = close_matches(word, choices, n=2)
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(m) for m in matches) + "?"
