"""The wheel holds the flink_agents package only: the bundled jobs are
``flink_agents.jobs`` with their sample data, and nothing is installed as a
generic top-level module (a ``jobs`` in site-packages would shadow, or be
shadowed by, any other project's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_distribution_holds_flink_agents_only_with_the_jobs_sample_data(tmp_path: Path) -> None:
    # egg_info lists what a wheel or sdist would install (top_level.txt) and
    # ship (SOURCES.txt), without needing the wheel package or the network.
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (info,) = tmp_path.glob("*.egg-info")
    assert (info / "top_level.txt").read_text().split() == ["flink_agents"]
    sources = (info / "SOURCES.txt").read_text().split()
    assert "flink_agents/jobs/review_analysis.py" in sources
    assert "flink_agents/jobs/data/sample_reviews.jsonl" in sources
    assert not [s for s in sources if s.startswith("jobs/")]
