"""Issue 11, part 5: classes defined in the job's main script survive a
restart (mini-cluster, separate Python worker processes, a real worker kill).

The job (``tests/support/main_classes_job.py``) runs as its own program, so
its ``Step`` event, ``Detail`` model and agent are ``__main__`` classes. Its
worker dies after the step that sent ``Step`` was journaled; the restarted
worker replays that step's completion and must read ``Step`` back (before
the fix: ``module '__main__' has no attribute 'Step'``, and the job failed
for good).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.flink_jobs import child_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = REPO_ROOT / "tests" / "support" / "main_classes_job.py"


def test_main_script_classes_read_back_on_a_restarted_worker(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(JOB), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=child_environment(),
    )

    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "crashed").exists(), "the worker was never killed: the test proved nothing"
    outputs = [json.loads(line) for line in (tmp_path / "outputs.jsonl").read_text().splitlines()]
    assert outputs and {json.dumps(o, sort_keys=True) for o in outputs} == {json.dumps({
        "sku": "sku-1", "event": "Step", "detail": "Detail", "tags": "tuple", "crash": "survived",
        "greeting": "hello sku-1",
    }, sort_keys=True)}
