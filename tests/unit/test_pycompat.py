"""``flink_agents._pycompat``: 3.11's standard library names behave the same
on the Python running the tests (3.10 to 3.12; tools/test_matrix.sh runs the
others), as the runtime uses them: action timeouts, notes on journal errors,
exception groups from MCP transports."""

from __future__ import annotations

import asyncio
import traceback

import pytest

from flink_agents._pycompat import TIMEOUT_ERRORS, BaseExceptionGroup, ExceptionGroup, add_note, expired, timeout


def test_a_deadline_that_fires_raises_a_timeout_error_and_says_it_expired() -> None:
    async def main() -> bool:
        deadline = timeout(0.01)
        with pytest.raises(TIMEOUT_ERRORS):
            async with deadline:
                await asyncio.sleep(5)
        return expired(deadline)

    assert asyncio.run(main()) is True


def test_a_deadline_not_reached_lets_the_result_through_unexpired() -> None:
    async def main() -> tuple:
        deadline = timeout(5)
        async with deadline:
            value = await asyncio.sleep(0, "done")
        return value, expired(deadline)

    assert asyncio.run(main()) == ("done", False)


def test_a_note_is_kept_and_printed_under_the_traceback() -> None:
    error = ValueError("journal write failed")
    add_note(error, "gave up after 3 attempts")
    add_note(error, "keeping its journal failed too")
    assert error.__notes__ == ["gave up after 3 attempts", "keeping its journal failed too"]
    printed = "".join(traceback.format_exception(type(error), error, None))
    assert "gave up after 3 attempts" in printed
    with pytest.raises(TypeError):
        add_note(error, 3)  # type: ignore[arg-type]


def test_exception_groups_nest_as_builtins_do() -> None:
    group = ExceptionGroup("transport", [ConnectionError("reset"), KeyError("k")])
    assert isinstance(group, BaseExceptionGroup) and isinstance(group, Exception)
    matched, rest = group.split(ConnectionError)
    assert [type(e) for e in matched.exceptions] == [ConnectionError]
    assert [type(e) for e in rest.exceptions] == [KeyError]
