"""A standalone Flink cluster for end-to-end tests, started and stopped with
``tools/cluster.sh`` in a directory of its own, and ``flink`` CLI calls
against it (``flink run``, ``flink stop --savepointPath``), each bounded in
time.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from tests.support.flink_jobs import child_environment

__all__ = ["CLUSTER_SCRIPT", "REPO_ROOT", "StandaloneCluster"]

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO_ROOT / "tools" / "cluster.sh"


def _state(directory: Path) -> Dict[str, str]:
    """``cluster.env`` (KEY=VALUE lines) as a dict."""
    state: Dict[str, str] = {}
    for line in (directory / "cluster.env").read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            state[key] = value.strip('"')
    return state


@dataclass
class StandaloneCluster:
    """A cluster started by ``tools/cluster.sh start --dir directory``.

    Attributes:
        directory: The cluster's directory (conf/, log/, cluster.env).
        rest_url: ``http://localhost:PORT``.
        start_s: Wall time of ``tools/cluster.sh start``.
        env: The environment of the processes started (TaskManagers read
            provider keys from it).
    """

    directory: Path
    rest_url: str
    start_s: float
    env: Dict[str, str]

    @classmethod
    def start(
        cls, directory: Path, taskmanagers: int = 1, slots: int = 2, env: Optional[Mapping[str, str]] = None,
        timeout_s: float = 150.0, stock: bool = False,
    ) -> "StandaloneCluster":
        """Start it (``tools/cluster.sh start``); the script waits until all
        slots registered and stops what it started if they do not.
        ``stock``: the distribution as shipped (``--stock``: no flink-python
        in ``lib/``, no ``pemja.`` parent-first, no ``python.executable``).

        Raises:
            RuntimeError: The script failed; its output is in the message.
        """
        environment = {**child_environment(), **(env or {})}
        started = time.monotonic()
        done = subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "start", "--dir", str(directory),
             "--taskmanagers", str(taskmanagers), "--slots", str(slots), *(["--stock"] if stock else [])],
            env=environment, capture_output=True, text=True, timeout=timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tools/cluster.sh start failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return cls(directory, _state(directory)["REST_URL"], time.monotonic() - started, environment)

    def stop(self, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "stop", "--dir", str(self.directory)],
            env=self.env, capture_output=True, text=True, timeout=timeout_s,
        )

    def status(self, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "status", "--dir", str(self.directory)],
            env=self.env, capture_output=True, text=True, timeout=timeout_s,
        )

    @property
    def state(self) -> Dict[str, str]:
        return _state(self.directory)

    def flink_command(self, *args: str) -> List[str]:
        """The distribution's ``flink`` CLI on this cluster (its conf)."""
        return ["bash", str(CLUSTER_SCRIPT), "flink", "--dir", str(self.directory), "--", *args]

    def flink(self, *args: str, timeout_s: float = 120.0, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
        """Run ``flink ARGS`` to its end; output captured."""
        return subprocess.run(
            self.flink_command(*args), env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
        )

    def rest(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET ``path`` of the REST API, as JSON."""
        with urllib.request.urlopen(f"{self.rest_url}{path}", timeout=timeout_s) as answer:
            return json.load(answer)

    def jobs(self) -> List[Dict[str, Any]]:
        """``[{"jid", "name", "state", ...}]`` of every job the cluster knows."""
        return self.rest("/jobs/overview")["jobs"]

    def wait_for_job(self, predicate: Any, timeout_s: float = 60.0) -> Dict[str, Any]:
        """The first job satisfying ``predicate(job)``, polled every 0.2 s.

        Raises:
            TimeoutError: None within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for job in self.jobs():
                if predicate(job):
                    return job
            time.sleep(0.2)
        raise TimeoutError(f"no such job within {timeout_s} s: {self.jobs()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of each TaskManager and JobManager log (for a
        failure message)."""
        out = []
        for path in sorted((self.directory / "log").glob("*.log")):
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            out.append(f"==> {path.name} <==\n" + "\n".join(text))
        return "\n".join(out)



# --- failover helpers --------------------------------------------------------


def listening_ports(pid: int) -> set:
    """The TCP ports process ``pid`` listens on (its sockets' inodes matched
    against ``/proc/net/tcp{,6}``; the caller's own processes only)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _cluster_taskmanager_pids(cluster: "StandaloneCluster") -> List[int]:
    return [int(pid) for pid in cluster.state.get("TM_PIDS", "").split() if pid]


def taskmanager_pids_of_job(cluster: "StandaloneCluster", jid: str) -> List[int]:
    """The pids of the TaskManagers running a subtask of job ``jid`` (each
    subtask's TaskManager, by the ports its REST entry names, matched against
    the ports each recorded TaskManager pid listens on)."""
    wanted = set()
    for vertex in cluster.rest(f"/jobs/{jid}")["vertices"]:
        for subtask in cluster.rest(f"/jobs/{jid}/vertices/{vertex['id']}")["subtasks"]:
            tm_id = subtask.get("taskmanager-id")
            for tm in cluster.rest("/taskmanagers")["taskmanagers"]:
                if tm["id"] == tm_id:
                    wanted.add(int(tm["dataPort"]))
    return [pid for pid in _cluster_taskmanager_pids(cluster) if listening_ports(pid) & wanted]


def job_subtasks(cluster: "StandaloneCluster", jid: str) -> List[Dict[str, Any]]:
    """Every subtask of job ``jid`` (``{"subtask", "status", "attempt",
    "taskmanager-id", ...}`` of its current attempt)."""
    subtasks: List[Dict[str, Any]] = []
    for vertex in cluster.rest(f"/jobs/{jid}")["vertices"]:
        subtasks += cluster.rest(f"/jobs/{jid}/vertices/{vertex['id']}")["subtasks"]
    return subtasks


def completed_checkpoints(cluster: "StandaloneCluster", jid: str) -> int:
    return int(cluster.rest(f"/jobs/{jid}/checkpoints")["counts"]["completed"])
