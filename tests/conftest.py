"""Shared pytest fixtures, and a watchdog for hangs the timeout cannot end."""
from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import pytest

from tests.support.scripted_openai_server import ScriptedChatServer

REPO_ROOT = Path(__file__).resolve().parent.parent

# pytest-timeout (pytest.ini, 600 s) raises in the main thread, which needs the
# GIL; a deadlock in the interpreter itself (python/cpython#106883) never gives
# it back, and CI would wait for its own limit. faulthandler's watchdog is a C
# thread: past this, it prints every thread's stack and ends the process.
WATCHDOG_S = 720


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def scripted_chat_server():
    """A started ScriptedChatServer with an empty script.

    Tests add replies with ``server.replies.extend([...])`` or
    ``server.set_reply_fn(fn)``.
    """
    with ScriptedChatServer() as server:
        yield server


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
