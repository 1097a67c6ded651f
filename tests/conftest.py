"""Shared pytest fixtures, the ``e2e`` marker by folder, and a watchdog for
hangs the timeout cannot end."""
from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import pytest

from tests.support.scripted_openai_server import ScriptedChatServer

REPO_ROOT = Path(__file__).resolve().parent.parent
E2E_DIR = Path(__file__).resolve().parent / "e2e"

# pytest-timeout (pytest.ini, 600 s) raises in the main thread, which needs the
# GIL; a deadlock in the interpreter itself (python/cpython#106883) never gives
# it back, and CI would wait for its own limit. faulthandler's watchdog is a C
# thread: past this, it prints every thread's stack and ends the process.
WATCHDOG_S = 720


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """``e2e`` is where a test is: every test under ``tests/e2e`` gets the
    marker, and a test elsewhere that carries it is an error (move it to
    ``tests/e2e``), so ``-m "not e2e"`` and the folders select the same tests."""
    misplaced = []
    for item in items:
        if E2E_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            # Under pytest-xdist's --dist loadgroup (tools/test.sh): all e2e
            # tests on one worker, one after another (two mini-clusters at
            # once on 2 cores slow each other past their timeouts), while
            # the other worker runs the fast tests.
            item.add_marker(pytest.mark.xdist_group("e2e"))
        elif item.get_closest_marker("e2e") is not None:
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "the e2e marker outside tests/e2e (e2e is given by the folder; move these tests to tests/e2e): "
            + ", ".join(misplaced)
        )


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
