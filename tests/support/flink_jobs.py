"""Plumbing of the end-to-end tests that run PyFlink jobs on the local
mini-cluster: environments, a watched JSON-lines input, checkpoints on disk,
and reading a job's outputs with deadlines.

Nothing here is shipped to Python workers: in process mode they cannot import
``tests.*``. Functions that run in a job (key selectors, agents) belong to the
test module, registered with ``cloudpickle.register_pickle_by_value``.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tests.support.ports import free_port

__all__ = [
    "Collected",
    "child_environment",
    "checkpoint_after",
    "completed_checkpoints",
    "free_port",
    "jsonl_stream",
    "mini_cluster_env",
    "write_jsonl",
]


# Set in this process once PyFlink ran a job here (loopback or thread mode);
# a child inheriting PYFLINK_GATEWAY_DISABLED refuses to start Flink.
_PYFLINK_RUNTIME_VARIABLES = (
    "PYFLINK_GATEWAY_DISABLED", "_PYFLINK_CONN_INFO_PATH", "PYTHON_LOOPBACK_SERVER_ADDRESS", "BOOT_LOG_DIR",
    "_PYTHON_WORKER_MEMORY_LIMIT",
)


def child_environment() -> Dict[str, str]:
    """This process's environment for a child that runs a Flink job of its
    own: without what PyFlink's in-process workers set, unbuffered output."""
    env = {k: v for k, v in os.environ.items() if k not in _PYFLINK_RUNTIME_VARIABLES}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def mini_cluster_env(
    parallelism: int,
    checkpoints: Optional[Path] = None,
    checkpoint_ms: Optional[int] = None,
    restart_attempts: int = 0,
    **options: str,
) -> Any:
    """A ``StreamExecutionEnvironment`` on the local mini-cluster.

    Args:
        parallelism: The job's parallelism.
        checkpoints: Where checkpoints go (retained on cancellation); with
            ``checkpoint_ms`` only.
        checkpoint_ms: The checkpoint interval; None: no checkpoints.
        restart_attempts: Fixed-delay restarts (1 s apart); 0: none, a
            failure fails the job.
        **options: More Flink settings (override the above).
    """
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    settings: Dict[str, str] = {"python.executable": sys.executable}
    if restart_attempts:
        settings.update({
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(restart_attempts),
            "restart-strategy.fixed-delay.delay": "1 s",
        })
    else:
        settings["restart-strategy.type"] = "none"
    if checkpoint_ms is not None:
        if checkpoints is None:
            raise ValueError("checkpoint_ms needs a checkpoints directory")
        settings.update({
            "execution.checkpointing.interval": f"{checkpoint_ms} ms",
            "execution.checkpointing.dir": checkpoints.as_uri(),
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        })
    settings.update(options)
    config = Configuration()
    for key, value in settings.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    if checkpoint_ms is not None:
        assert env.get_checkpoint_config().get_checkpoint_interval() == checkpoint_ms
    return env


def jsonl_stream(
    env: Any, directory: Path, name: str, source_uid: str, decode_uid: str, monitor_ms: int = 200
) -> Any:
    """JSON-decoded lines of the files in ``directory``, watched for new files
    every ``monitor_ms`` (an unbounded, checkpointed source); the uids let a
    restore map the source's and the decoder's state."""
    from pyflink.common import Duration, Types, WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(directory))
        .monitor_continuously(Duration.of_millis(monitor_ms))
        .build()
    )
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), name).uid(source_uid)
    return lines.map(json.loads, output_type=Types.PICKLED_BYTE_ARRAY()).name("decode").uid(decode_uid)


def write_jsonl(path: Path, records: List[Dict[str, Any]]) -> None:
    """Write atomically, so a watching source never reads half a file (it
    skips names starting with '.')."""
    hidden = path.with_name("." + path.name)
    hidden.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    hidden.replace(path)


def completed_checkpoints(root: Path) -> List[Tuple[int, Path, float]]:
    """``(N, chk-N directory, _metadata mtime)`` of the completed checkpoints
    under ``root``, oldest first."""
    found = []
    for metadata in root.glob("*/chk-*/_metadata"):
        try:
            mtime = metadata.stat().st_mtime
        except FileNotFoundError:  # subsumed and deleted meanwhile
            continue
        found.append((int(metadata.parent.name.split("-", 1)[1]), metadata.parent, mtime))
    return sorted(found)


def checkpoint_after(root: Path, moment: float, timeout_s: float = 60.0) -> int:
    """Wait for a checkpoint *triggered* after ``moment`` (Unix seconds): the
    one after the first that completed after it. Returns its number."""
    deadline = time.monotonic() + timeout_s
    first = None
    while time.monotonic() < deadline:
        done = completed_checkpoints(root)
        if first is None:
            first = next((n for n, _, mtime in done if mtime > moment), None)
        if first is not None and done and done[-1][0] > first:
            return done[-1][0]
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint completed under {root} within {timeout_s} s")


class Collected:
    """A job's ``execute_and_collect`` outputs, read on a thread so that the
    test waits with deadlines and cancels the (unbounded) job by closing."""

    def __init__(self, stream: Any, job_name: str) -> None:
        self._iterator = stream.execute_and_collect(job_name)
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._closing = False
        self.arrivals: List[Tuple[float, Any]] = []  # (unix time, output)
        self._thread = threading.Thread(target=self._read, name=f"collect-{job_name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for output in self._iterator:
                self._queue.put((time.time(), output))
            self._queue.put(AssertionError("the job ended"))
        except Exception as exc:  # a failed job, or the iterator closed under us
            if not self._closing:
                self._queue.put(exc)

    def take(self, count: int, timeout_s: float = 120.0) -> List[Any]:
        """The next ``count`` outputs (waiting at most ``timeout_s`` in all)."""
        deadline = time.monotonic() + timeout_s
        taken: List[Any] = []
        while len(taken) < count:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise AssertionError(f"{len(taken)} of {count} outputs within {timeout_s} s") from None
            if isinstance(item, BaseException):
                raise item
            self.arrivals.append(item)
            taken.append(item[1])
        return taken

    def poll(self) -> List[Any]:
        """The outputs that arrived since the last ``take``/``poll``, without
        waiting (they count as taken).

        Raises:
            Exception: The job failed (or ended).
        """
        taken: List[Any] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if isinstance(item, BaseException):
                raise item
            self.arrivals.append(item)
            taken.append(item[1])

    def unread(self) -> List[Any]:
        """Outputs that arrived and were not taken."""
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items

    def close(self) -> None:
        """Close the iterator, which cancels the job."""
        self._closing = True
        self._iterator.close()
        self._thread.join(timeout=30)


def wait_until(condition: Any, timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """``condition()``'s first truthy result, polled every ``interval_s``.

    Raises:
        AssertionError: Naming ``what``, when none came within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")
