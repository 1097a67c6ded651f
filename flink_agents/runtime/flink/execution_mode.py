"""Which Python execution mode a job runs in, and where its Python workers
live.

PyFlink has two ``python.execution-mode``s: ``thread`` (CPython embedded in
the TaskManager's JVM through pemja) and ``process`` (Python worker
processes beside the JVM, over gRPC). On the local mini-cluster PyFlink
turns ``process`` into *loopback*: the workers run as threads of the client's
own Python process, and the ``beam_boot`` processes the TaskManager starts
only hand over to them (``StreamExecutionEnvironment._open``; PyFlink reads
``_python_worker_execution_mode``, ``process`` turning loopback off). The
modes here:

- ``thread``: ``python.execution-mode: thread``;
- ``process``: ``python.execution-mode: process`` with real worker
  processes, on the mini-cluster too: a crashing worker ends its process,
  not the client's;
- ``loopback``: ``python.execution-mode: process`` with PyFlink's default
  placement: threads of the client on the mini-cluster, processes on a
  cluster.

Thread mode on a session cluster runs one job per TaskManager lifetime
unless the cluster is set up for it: pemja loads ``libpython`` into the
classloader of its classes, the JVM lets one classloader load a native
library, and with flink-python shipped in each job's jar every job loads
pemja anew, so the second fails (``NoSuchFieldException:
loadedLibraryNames``). A cluster is set up when flink-python is on its class
path (``lib/``) and ``classloader.parent-first-patterns.additional`` has
``pemja.`` (docs/deploy.md). ``resolve_execution_mode`` reads both from the
cluster's REST API before the job is submitted: the JobManager's
configuration (``/jobmanager/config``) and class path
(``/jobmanager/environment``), standing for the TaskManagers' (a standalone
cluster or an image starts both from one distribution; the REST API shows
no TaskManager's class path).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

__all__ = [
    "EXECUTION_MODES",
    "ThreadModeReadiness",
    "ThreadModeUnsupported",
    "python_workers",
    "resolve_execution_mode",
    "thread_mode_readiness",
]

log = logging.getLogger(__name__)

EXECUTION_MODES = ("thread", "process", "loopback")
PARENT_FIRST = "classloader.parent-first-patterns.additional"
WORKER_MODE_VARIABLE = "_python_worker_execution_mode"  # read by PyFlink's StreamExecutionEnvironment._open
# execution.target values of a session cluster, which runs the jobs of many
# submissions on the same TaskManagers (application mode runs one).
SESSION_TARGETS = frozenset({"remote", "yarn-session", "kubernetes-session"})
LOCAL_TARGETS = frozenset({"", "local", "minicluster"})
THREAD_MODE_FIX = (
    "put flink-python (the distribution's opt/flink-python-*.jar) in the cluster's lib/ and add 'pemja.' "
    f"to {PARENT_FIRST} in its config.yaml, then restart it (docs/deploy.md, \"Thread mode on a session "
    "cluster\"); or run the job with --execution-mode process"
)


class ThreadModeUnsupported(ValueError):
    """Thread mode was asked for on a session cluster not set up for it; the
    message names what is missing and the fix."""


@dataclass(frozen=True)
class ThreadModeReadiness:
    """Whether a session cluster runs more than one thread-mode job.

    Attributes:
        ready: flink-python on the class path and ``pemja.`` parent-first.
        missing: What is not set up (empty when ready); None when the cluster
            could not be asked (``reason`` says why).
        reason: One line for a log or an error.
    """

    ready: bool
    missing: Optional[tuple]
    reason: str


Fetch = Callable[[str], Any]


def _fetch_json(url: str, timeout_s: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        return json.load(answer)


def thread_mode_readiness(rest_url: str, fetch: Fetch = _fetch_json) -> ThreadModeReadiness:
    """Ask the cluster at ``rest_url`` (``http://host:port``) whether it is
    set up for thread mode: ``/jobmanager/config`` (``[{"key", "value"}]``)
    has ``pemja.`` among ``classloader.parent-first-patterns.additional``
    (``;``-separated) and ``/jobmanager/environment``'s ``classpath`` has a
    ``flink-python`` jar. Never raises: an unreachable cluster or an answer
    of another shape gives ``missing=None``."""
    try:
        config = {entry["key"]: entry.get("value") for entry in fetch(f"{rest_url}/jobmanager/config")}
        classpath = fetch(f"{rest_url}/jobmanager/environment")["classpath"]
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as exc:
        return ThreadModeReadiness(False, None, f"could not read the cluster's set-up at {rest_url}: {exc}")
    missing = []
    patterns = [p.strip() for p in str(config.get(PARENT_FIRST) or "").split(";")]
    if not any(p and "pemja.".startswith(p) for p in patterns):
        missing.append(f"'pemja.' in {PARENT_FIRST}")
    if not any(os.path.basename(str(entry)).startswith("flink-python") for entry in classpath):
        missing.append("flink-python on the class path (lib/)")
    if missing:
        return ThreadModeReadiness(False, tuple(missing), f"the cluster at {rest_url} lacks {' and '.join(missing)}")
    return ThreadModeReadiness(True, (), f"the cluster at {rest_url} is set up for thread mode")


def _rest_url(config: Mapping[str, str]) -> str:
    """The REST endpoint ``flink run`` submits to: ``rest.address`` (or
    ``jobmanager.rpc.address``) and ``rest.port`` (default 8081)."""
    host = config.get("rest.address") or config.get("jobmanager.rpc.address") or "localhost"
    scheme = "https" if str(config.get("security.ssl.rest.enabled", "")).lower() == "true" else "http"
    return f"{scheme}://{host}:{config.get('rest.port') or 8081}"


def resolve_execution_mode(
    requested: Optional[str], config: Mapping[str, str],
    readiness: Callable[[str], ThreadModeReadiness] = thread_mode_readiness,
) -> str:
    """The mode a job runs in, given the mode asked for and the job's Flink
    configuration (flat keys; ``execution.target``, ``rest.*``).

    - On the mini-cluster (``execution.target`` unset, ``local``): the mode
      asked for; None: ``thread``.
    - On a session cluster (``remote``, ``*-session``): None gives
      ``thread`` if the cluster is set up for it (``thread_mode_readiness``),
      else ``process``; ``thread`` is refused unless it is set up (a cluster
      that cannot be asked is given the benefit of the doubt, with a
      warning); ``loopback`` is ``process`` (no client-side workers there).
    - Elsewhere (application mode: one job per cluster): the mode asked
      for; None: ``thread``; ``loopback``: ``process``.

    Raises:
        ValueError: ``requested`` is not None or one of ``EXECUTION_MODES``.
        ThreadModeUnsupported: ``thread`` on a session cluster lacking
            flink-python in ``lib/`` or ``pemja.`` parent-first; the message
            names what is missing and the fix.
    """
    if requested is not None and requested not in EXECUTION_MODES:
        raise ValueError(f"execution mode must be one of {', '.join(EXECUTION_MODES)} or None, not {requested!r}")
    target = str(config.get("execution.target") or "").strip().lower()
    if target in LOCAL_TARGETS:
        return requested or "thread"
    if target not in SESSION_TARGETS:
        return "process" if requested == "loopback" else requested or "thread"
    if requested in ("process", "loopback"):
        return "process"
    state = readiness(_rest_url(config))
    if state.ready:
        return "thread"
    if requested is None:
        log.warning("running in process mode: %s, which thread mode needs for more than one job", state.reason)
        return "process"
    if state.missing is None:
        log.warning("thread mode as asked, unchecked: %s", state.reason)
        return "thread"
    raise ThreadModeUnsupported(
        f"--execution-mode thread on the session cluster at {_rest_url(config)} (execution.target: {target}), "
        f"which lacks {' and '.join(state.missing)}: its first thread-mode job would run and the next fail "
        f"with NoSuchFieldException: loadedLibraryNames. To fix, {THREAD_MODE_FIX}"
    )


@contextlib.contextmanager
def python_workers(mode: str) -> Iterator[None]:
    """Around the creation of a ``StreamExecutionEnvironment``: ``process``
    makes PyFlink start no loopback server (its workers become processes
    on the mini-cluster too); other modes leave PyFlink's default. PyFlink
    reads the choice from this process's environment when the environment
    is created (``_open``), so it is set for that moment only."""
    if mode != "process":
        yield
        return
    before = os.environ.get(WORKER_MODE_VARIABLE)
    os.environ[WORKER_MODE_VARIABLE] = "process"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(WORKER_MODE_VARIABLE, None)
        else:
            os.environ[WORKER_MODE_VARIABLE] = before
