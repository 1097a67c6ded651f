"""The recording ``notify_shipping_manager`` tool the chat model tests offer
their models: each call is appended to ``NOTIFIED``."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List

import pytest

from flink_agents.api.tools.tool import FunctionTool

NOTIFIED: List[Dict[str, Any]] = []
NOTIFY_RESULT = "the shipping manager was notified"


def record_notification(id: str, review: str) -> str:
    NOTIFIED.append({"id": id, "review": review})
    return NOTIFY_RESULT


def notify_shipping_manager(id: str, review: str) -> str:
    """Tell the shipping manager about a damaged delivery.

    Args:
        id: The product id.
        review: The customer's review.
    """
    return record_notification(id, review)


NOTIFY = FunctionTool.from_callable(notify_shipping_manager)


@pytest.fixture(autouse=True)
def clear_notified() -> Iterator[None]:
    """Each test starts and ends with no notification recorded."""
    NOTIFIED.clear()
    yield
    NOTIFIED.clear()
