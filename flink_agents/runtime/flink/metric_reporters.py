"""Flink metric reporters (Prometheus, OpenTelemetry, JMX, ...) on the
mini-cluster a job script starts, as on a cluster.

On a cluster, reporters are the cluster's: its JobManager and TaskManagers
read ``metrics.reporter.<name>.*`` from their ``config.yaml`` when they start
and load the reporter from ``plugins/<name>/`` (tools/cluster.sh takes them
in ``FLINK_CLUSTER_CONF``). A job's own configuration cannot add one there,
so nothing is done for a cluster target.

A script that runs a job on its own starts a mini-cluster in PyFlink's
gateway JVM, and two things kept a configured reporter off it ("No metrics
reporter configured", the port never answering):

1. Options. The mini-cluster reads the job's configuration (what
   ``get_execution_environment(config)`` was given, or what was set on it
   before ``execute``) but never ``$FLINK_CONF_DIR/config.yaml``. The
   ``metrics.*`` options of that file are copied into the job's
   configuration where the job did not set them (the job wins, as for the
   ``agent:`` section).
2. The jar. Flink's distribution loads reporters as plugins, but the
   mini-cluster is built without a plugin manager: it finds reporter
   factories only with ``ServiceLoader`` on the starting thread's context
   class loader ("The reporter factory ... could not be found for reporter
   prom. Available factories: []"), although the wheel ships them under
   ``pyflink/plugins/metrics-*/``. The jar whose service file lists the
   configured factory class is added to that class loader with PyFlink's
   ``add_jars_to_context_class_loader`` (what ``pipeline.jars`` does for
   connectors in local mode). Not through ``pipeline.jars`` or
   ``pipeline.classpaths``: those would also ship the jar with the job into
   the user class loader, where reporter classes have no business.
   ``FLINK_PLUGINS_DIR`` alone does not help the mini-cluster.
"""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from flink_agents.runtime.flink.journal_placement import is_cluster

__all__ = [
    "REPORTER_SERVICE",
    "configure_metric_reporters",
    "find_reporter_jar",
    "reporter_factories",
    "reporter_search_dirs",
]

log = logging.getLogger(__name__)

REPORTER_SERVICE = "META-INF/services/org.apache.flink.metrics.reporter.MetricReporterFactory"
_REPORTER_PREFIX = "metrics.reporter."
_FACTORY_SUFFIX = ".factory.class"


def reporter_factories(options: Mapping[str, str]) -> Dict[str, str]:
    """The reporters ``options`` (flat Flink configuration) declare:
    ``{name: factory class}`` from ``metrics.reporter.<name>.factory.class``,
    limited to the names in ``metrics.reporters`` when that list is set
    (Flink's own filter, comma separated)."""
    declared = {
        key[len(_REPORTER_PREFIX):-len(_FACTORY_SUFFIX)]: str(value).strip()
        for key, value in options.items()
        if key.startswith(_REPORTER_PREFIX) and key.endswith(_FACTORY_SUFFIX) and str(value).strip()
    }
    enabled = str(options.get("metrics.reporters") or "").strip()
    if enabled:
        names = {name.strip() for name in enabled.split(",")}
        declared = {name: factory for name, factory in declared.items() if name in names}
    return declared


def reporter_search_dirs() -> List[Path]:
    """Where reporter jars are looked for: ``$FLINK_PLUGINS_DIR`` (default
    the wheel's ``pyflink/plugins``) and the wheel's ``opt`` and ``lib``."""
    import pyflink

    home = Path(pyflink.__file__).resolve().parent
    plugins = os.environ.get("FLINK_PLUGINS_DIR") or str(home / "plugins")
    return [Path(plugins), home / "opt", home / "lib"]


def find_reporter_jar(factory_class: str, search_dirs: Iterable[Path]) -> Optional[Path]:
    """The first jar under ``search_dirs`` (each directory and its direct
    sub-directories, as Flink's ``plugins/<name>/``) whose
    ``MetricReporterFactory`` service file lists ``factory_class``; None if
    none does. Unreadable jars are skipped."""
    for directory in search_dirs:
        if not directory.is_dir():
            continue
        for jar in sorted([*directory.glob("*.jar"), *directory.glob("*/*.jar")]):
            try:
                with zipfile.ZipFile(jar) as archive:
                    listed = archive.read(REPORTER_SERVICE).decode("utf-8")
            except (KeyError, OSError, zipfile.BadZipFile):
                continue
            if factory_class in (line.split("#", 1)[0].strip() for line in listed.splitlines()):
                return jar
    return None


def configure_metric_reporters(j_env: Any) -> List[str]:
    """Make the reporters configured for this job run on the mini-cluster
    that will execute it (module docstring); nothing for a cluster target.

    Idempotent; call it on the thread that will call ``execute`` (the jar
    goes to that thread's context class loader in the gateway JVM), before
    the job is submitted.

    Args:
        j_env: The Java ``StreamExecutionEnvironment``
            (``env._j_stream_execution_environment``).

    Returns:
        The names of the reporters configured (``prom``, say), sorted; a
        reporter whose jar was not found is named too, and a warning names
        its factory class and the directories searched.
    """
    from pyflink.util.java_utils import add_jars_to_context_class_loader

    config = j_env.getConfiguration()
    if is_cluster(str(config.toMap().get("execution.target") or "")):
        return []
    conf_dir = os.environ.get("FLINK_CONF_DIR")
    if conf_dir and os.path.isdir(conf_dir):
        for key, value in _flink_conf_options(conf_dir).items():
            if key.startswith("metrics.") and not config.containsKey(key):
                config.setString(key, value)
    factories = reporter_factories(dict(config.toMap()))
    for name, factory in sorted(factories.items()):
        if _loadable(factory):
            continue
        jar = find_reporter_jar(factory, reporter_search_dirs())
        if jar is None:
            log.warning(
                "metric reporter %s: no jar under %s provides %s; the mini-cluster will not start it",
                name, ", ".join(map(str, reporter_search_dirs())), factory,
            )
            continue
        add_jars_to_context_class_loader([jar.as_uri()])
        log.info("metric reporter %s: %s added for the mini-cluster", name, jar)
    return sorted(factories)


def _flink_conf_options(conf_dir: str) -> Dict[str, str]:
    """``conf_dir``'s Flink configuration, flat, as Flink itself reads it
    (``config.yaml``, nested or flat keys; or a legacy ``flink-conf.yaml``)."""
    from pyflink.java_gateway import get_gateway

    loaded = get_gateway().jvm.org.apache.flink.configuration.GlobalConfiguration.loadConfiguration(conf_dir)
    return {str(k): str(v) for k, v in dict(loaded.toMap()).items()}


def _loadable(class_name: str) -> bool:
    """Whether the gateway thread's context class loader finds ``class_name``."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    try:
        jvm.java.lang.Class.forName(class_name, False, jvm.Thread.currentThread().getContextClassLoader())
        return True
    except Exception:  # py4j's Py4JJavaError for ClassNotFoundException
        return False
