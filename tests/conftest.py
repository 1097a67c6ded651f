"""Shared pytest fixtures, the ``e2e`` marker by folder, and a watchdog for
hangs the timeout cannot end."""
from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import pytest

from tests.support.scripted_openai_server import ScriptedChatServer

REPO_ROOT = Path(__file__).resolve().parent.parent
E2E_DIR = Path(__file__).resolve().parent / "e2e"

# Every JVM the tests start (PyFlink's local gateway, the ``flink`` command,
# a standalone cluster's daemons: all read ``JVM_ARGS``) compiles with C1
# only. The tests' jobs live seconds, too short for C2's optimising compiles
# to pay back: measured on five e2e tests, 79 CPU-seconds instead of 102 and
# 10 % less wall time alone, more when both workers are busy. A JIT tier,
# not a behaviour: the jobs run the same code. Set JVM_ARGS to choose another.
os.environ.setdefault("JVM_ARGS", "-XX:TieredStopAtLevel=1")

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
            item.add_marker(pytest.mark.xdist_group(_e2e_group(item)))
        elif item.get_closest_marker("e2e") is not None:
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "the e2e marker outside tests/e2e (e2e is given by the folder; move these tests to tests/e2e): "
            + ", ".join(misplaced)
        )
    # Under pytest-xdist's --dist loadgroup (tools/test.sh, 2 workers), each
    # e2e group runs on one worker, one test after another, and a fast test
    # is a unit of its own. In this order one worker takes the long group
    # while the other runs the fast tests and then the short group: the two
    # end about together, and at most two mini-clusters run at once.
    rank = {E2E_LONG: 0, None: 1, E2E_SHORT: 2}
    items.sort(key=lambda item: rank[_group_of(item)])


# The e2e tests in two xdist groups (measured with --durations=0, 2026-12-07,
# sixth session, pytest 9.1.1: the long group 472 s, the short one 286 s,
# the fast tests 268 s over both workers; the whole suite 538 s): the short
# group holds these files, the long one the rest.
E2E_LONG, E2E_SHORT = "e2e-long", "e2e-short"
_SHORT_E2E_FILES = {
    "test_callbacks_e2e.py", "test_codec_e2e.py", "test_event_time_e2e.py", "test_exact_replay_e2e.py",
    "test_failover_e2e.py", "test_framework_google_adk_e2e.py", "test_framework_langgraph_e2e.py",
    "test_framework_openai_agents_e2e.py", "test_framework_pydantic_ai_e2e.py", "test_inspector_browser.py",
    "test_long_term_memory_e2e.py",
    "test_main_classes_e2e.py", "test_progress_steering_e2e.py", "test_promises_e2e.py", "test_react_agent_e2e.py",
    "test_retrieval_e2e.py", "test_shipping_claims_e2e.py", "test_table_api_e2e.py",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list) -> None:
    """Under pytest-xdist ``--dist loadgroup`` (tools/test.sh), on the
    controller: every e2e test a worker collected carries its group in its
    node id (xdist's worker appends ``@<group>``; its scheduler reads nothing
    else). Without it the groups are silently dropped and the e2e tests
    spread over both workers, two mini-clusters at once on 2 cores: pytest
    9.2 does that (pytest-dev/pytest-xdist#1386; pyproject.toml keeps pytest
    below it). Stops the run, saying so."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    e2e = f"{E2E_DIR.relative_to(REPO_ROOT).as_posix()}/"
    lost = [nodeid for nodeid in ids
            if nodeid.startswith(e2e) and not nodeid.endswith((f"@{E2E_LONG}", f"@{E2E_SHORT}"))]
    if lost:
        pytest.exit(
            f"pytest-xdist --dist loadgroup did not group {len(lost)} e2e test(s) (first: {lost[0]}): pytest "
            f"{pytest.__version__} with this pytest-xdist drops the groups (pytest-dev/pytest-xdist#1386); "
            "reinstall the test extra (bash tools/setup.sh) for pytest < 9.2",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def _e2e_group(item: pytest.Item) -> str:
    return E2E_SHORT if Path(item.path).name in _SHORT_E2E_FILES else E2E_LONG


def _group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker is not None and marker.args else None


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
