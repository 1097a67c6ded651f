"""Values checked where the user hands them over, on the Flink runner (the
mini-cluster): the tests of tests/engine/test_value_checks.py, collected here
again with the driver contract's Flink ``run``."""

from __future__ import annotations

import pytest

from tests.e2e.test_driver_contract_e2e import run  # noqa: F401  (run: the Flink runner)
from tests.engine import test_value_checks as local_suite

pytestmark = pytest.mark.timeout(240)

# The suite's tests, run here with the Flink ``run``. Their agents and
# functions stay in the suite's module, which ships itself to Flink's Python
# workers by value.
globals().update({name: test for name, test in vars(local_suite).items() if name.startswith("test_")})
