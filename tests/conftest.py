"""Shared pytest fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripted_openai_server import ScriptedChatServer

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def scripted_chat_server():
    """A started ScriptedChatServer with an empty script.

    Tests add replies with ``server.replies.extend([...])`` or
    ``server.set_reply_fn(fn)``.
    """
    server = ScriptedChatServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def shared_reviews_path() -> Path:
    """The shared review data set checked out beside the repo, or skip."""
    path = REPO_ROOT.parent / "shared" / "data" / "product_reviews.jsonl"
    if not path.is_file():
        pytest.skip(
            "../shared/data/product_reviews.jsonl is absent: "
            "the shared data set is not checked out beside the repo"
        )
    return path
