"""The driver contract on the Flink runner (the mini-cluster): the tests of
tests/engine/test_driver_contract.py, collected here again with a ``run``
that runs each scenario as a Flink job (``_run_flink`` there), so every
scenario asserts the same result on both runners."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine import test_driver_contract as local_suite
from tests.engine.test_driver_contract import Runner, _run_flink

pytestmark = pytest.mark.timeout(180)

# The suite's tests, run here with this module's ``run``. Their agents and
# functions stay in the suite's module, which ships itself to Flink's Python
# workers by value.
globals().update({name: test for name, test in vars(local_suite).items() if name.startswith("test_")})


@pytest.fixture(params=["flink"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Runner:
    """``run(agent, records, **config) -> Result`` on the Flink runner."""
    return lambda agent, records, **config: _run_flink(tmp_path, agent, records, **config)
