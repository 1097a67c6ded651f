"""Which reporters a job declares, and which jar provides each
(``runtime.flink.metric_reporters``); the mini-cluster run is
tests/e2e/test_prometheus_reporter_e2e.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

from flink_agents.runtime.flink.metric_reporters import (
    REPORTER_SERVICE, find_reporter_jar, reporter_factories, reporter_search_dirs,
)

PROMETHEUS = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"


def test_reporters_are_read_from_their_factory_class_and_filtered_by_metrics_reporters() -> None:
    options = {
        "metrics.reporter.prom.factory.class": PROMETHEUS,
        "metrics.reporter.prom.port": "9249-9260",
        "metrics.reporter.jmx.factory.class": "org.apache.flink.metrics.jmx.JMXReporterFactory",
        "metrics.reporter.blank.factory.class": " ",
        "metrics.scope.operator": "<host>.<operator_name>",
    }
    assert reporter_factories(options) == {
        "prom": PROMETHEUS, "jmx": "org.apache.flink.metrics.jmx.JMXReporterFactory",
    }
    assert reporter_factories({**options, "metrics.reporters": "prom, other"}) == {"prom": PROMETHEUS}
    assert reporter_factories({}) == {}


def _jar(path: Path, services: str | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        if services is not None:
            archive.writestr(REPORTER_SERVICE, services)
    return path


def test_the_jar_is_the_one_whose_service_file_lists_the_factory(tmp_path: Path) -> None:
    _jar(tmp_path / "plugins" / "a" / "other.jar", "com.example.OtherFactory\n")
    _jar(tmp_path / "plugins" / "b" / "none.jar", None)
    (tmp_path / "plugins" / "b" / "broken.jar").write_bytes(b"not a zip")
    wanted = _jar(tmp_path / "plugins" / "c" / "mine.jar", "# comment\ncom.example.MineFactory # trailing\n")
    dirs = [tmp_path / "missing", tmp_path / "plugins"]
    assert find_reporter_jar("com.example.MineFactory", dirs) == wanted
    assert find_reporter_jar("com.example.Absent", dirs) is None


def test_the_wheel_ships_the_prometheus_reporter_where_it_is_looked_for() -> None:
    jar = find_reporter_jar(PROMETHEUS, reporter_search_dirs())
    assert jar is not None and jar.name.startswith("flink-metrics-prometheus-")
