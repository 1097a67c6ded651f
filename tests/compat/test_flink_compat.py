"""runtime.flink.compat: the one place that knows which PyFlink is installed."""

from __future__ import annotations

import re
from pathlib import Path

from pyflink.version import __version__

from flink_agents.runtime.flink import compat

ROOT = Path(__file__).resolve().parents[2]


def test_flink_version_parses_release_strings() -> None:
    assert compat.flink_version("1.20.5") == (1, 20)
    assert compat.flink_version("2.0.2") == (2, 0)
    assert compat.flink_version("2.3.0") == (2, 3)
    assert compat.flink_version("2.4") == (2, 4)
    assert compat.flink_version("2.1rc1") == (2, 1)


def test_the_decision_is_the_installed_pyflinks() -> None:
    assert compat.PYFLINK_VERSION == __version__
    assert compat.FLINK_1 == __version__.startswith("1.")


def test_no_other_module_checks_the_flink_version() -> None:
    """Callers import names from compat; none reads PyFlink's version."""
    pattern = re.compile(r"pyflink\.version|FLINK_1\b|flink_version\(|PYFLINK_VERSION")
    offenders = [
        str(path.relative_to(ROOT))
        # rglob does not follow the flink_agents/jobs symlink: the jobs are read at jobs/.
        for path in sorted([*(ROOT / "flink_agents").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")])
        if path.name != "compat.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_collect_iterator_fits_the_installed_flink() -> None:
    """The iterator's constructor of this Flink takes what compat gives it
    (1.20: the sink operator's OperatorID future; 2.x: the sink's uid)."""
    from pyflink.common import Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway

    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection([1, 2], type_info=Types.INT())
    jvm = get_gateway().jvm
    collect = jvm.org.apache.flink.streaming.api.operators.collect
    j_env = stream._j_data_stream.getExecutionEnvironment()
    serializer = stream._j_data_stream.getType().createSerializer(j_env.getConfig().getSerializerConfig())
    factory = collect.CollectSinkOperatorFactory(serializer, "acc")
    iterator = compat.collect_result_iterator(
        jvm, factory, "flink-agents:test:collect", serializer, "acc", j_env.getCheckpointConfig(), 1000,
    )
    assert iterator.getClass().getSimpleName() == "CollectResultIterator"


def test_the_031_flink_version_manager_reports_the_installed_flink() -> None:
    from pyflink.version import __version__

    from flink_agents.api.version_compatibility import FlinkVersionManager, flink_version_manager

    assert flink_version_manager.version == __version__
    major, minor = __version__.split(".")[:2]
    assert flink_version_manager.major_version == f"{major}.{minor}"
    assert flink_version_manager.ge("1.20") and flink_version_manager.ge(f"{major}.{minor}")
    assert flink_version_manager.lt("99.0") and not flink_version_manager.lt(__version__)
    manager = FlinkVersionManager()
    manager._version, manager._initialized = "2.2.0-SNAPSHOT", True
    assert manager.ge("2.2") and manager.lt("2.2.1") and manager.major_version == "2.2"
    manager._version = "1.20.dev0"
    assert manager.ge("1.20.0") and manager.lt("2.0")
