"""``--since`` and ``?since=``: ISO-8601, or a duration ago (``30m``, ``1h``)."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Optional

__all__ = ["parse_since"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now_s: Optional[float] = None) -> float:
    """Unix seconds of ``text``: ISO-8601 (``Z`` or an offset; naive is
    local time), or a duration before ``now_s`` (default now).

    Raises:
        ValueError: Neither form (the message quotes ``text``).
    """
    match = _DURATION.fullmatch(text.strip())
    if match:
        return (time.time() if now_s is None else now_s) - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"since takes ISO-8601 or a duration like 30m or 1h, got {text!r}") from None
