"""The wheel pyproject.toml builds: what it installs and what it declares.

- It holds the flink_agents package only: the bundled jobs (in the checkout,
  top-level ``jobs/``, which ``flink_agents/jobs`` links to) are
  ``flink_agents.jobs`` with their sample data, the web inspector's page and
  ``py.typed`` ship, and nothing is installed as a generic top-level module (a
  ``jobs`` in site-packages would shadow, or be shadowed by, any other
  project's).
- Installed, ``flink-agents run`` runs a bundled job from the wheel's own
  files (its default input is the sample data shipped beside the job).
- Its distribution name is our own, not Apache's ``flink-agents`` (both own
  ``flink_agents``), its version is ``flink_agents.__version__``, and it
  declares the Pythons tested (3.10 to 3.12).
- Libraries whose internals the runtime reaches into are bounded above, and
  Python 3.10 gets the standard library backports it needs.

The wheel is built once, from a copy of the sources as checked out (the
``flink_agents/jobs`` symlink kept; no ``build/`` in the clone), with the build
backend pyproject.toml names: no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import flink_agents

REPO_ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "flink-agents-runtime"
APACHE_DISTRIBUTION = "flink-agents"  # Apache Flink Agents' own, on PyPI


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, src / name)
    for tree in ("flink_agents", "jobs"):
        shutil.copytree(REPO_ROOT / tree, src / tree, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))", str(out)],
        cwd=src, capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as opened:
        yield opened


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode("utf-8")


@pytest.fixture(scope="module")
def metadata(wheel: zipfile.ZipFile) -> Message:
    return Parser().parsestr(_dist_info(wheel, "METADATA"))


def _requirements(metadata: Message) -> Dict[str, List[Requirement]]:
    found: Dict[str, List[Requirement]] = {}
    for line in metadata.get_all("Requires-Dist"):
        requirement = Requirement(line)
        found.setdefault(requirement.name.lower(), []).append(requirement)
    return found


def test_the_wheel_holds_flink_agents_only_with_its_data_and_type_marker(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"flink_agents", "flink_agents_runtime-" + flink_agents.__version__ + ".dist-info"}
    for shipped in (
        "flink_agents/py.typed",  # PEP 561
        "flink_agents/jobs/review_analysis.py",
        "flink_agents/jobs/data/sample_reviews.jsonl",
        "flink_agents/jobs/data/NOTICE",
        "flink_agents/inspection/static/index.html",
        "flink_agents/_pycompat.py",
    ):
        assert shipped in names, shipped
    jobs = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "jobs").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert jobs and sorted(n for n in names if n.startswith("flink_agents/jobs/")) == ["flink_agents/" + j for j in jobs]
    assert "flink-agents = flink_agents.cli.main:main" in _dist_info(wheel, "entry_points.txt")


def test_the_distribution_has_its_own_name_the_packages_version_and_the_pythons_tested(metadata: Message) -> None:
    assert metadata["Name"] == DISTRIBUTION != APACHE_DISTRIBUTION
    assert metadata["Version"] == flink_agents.__version__
    assert SpecifierSet(metadata["Requires-Python"]) == SpecifierSet(">=3.10,<3.13")
    python = SpecifierSet(metadata["Requires-Python"])
    assert [v for v in ("3.9", "3.10", "3.11", "3.12", "3.13") if Version(v) in python] == ["3.10", "3.11", "3.12"]
    classifiers = metadata.get_all("Classifier")
    for minor in ("3.10", "3.11", "3.12"):
        assert f"Programming Language :: Python :: {minor}" in classifiers
    assert "Typing :: Typed" in classifiers
    assert metadata["License-Expression"] == "Apache-2.0"


# Libraries whose internals the runtime uses (pyproject.toml says which), and
# the first release not allowed: their next minor release, or the next major
# where the internals used are documented attributes.
INTERNALS_BOUNDED = {
    "apache-flink": "2.4",  # PyFlink's Java handles and type-info fields
    "aiohttp": "3.15",  # aiohttp.web_protocol.RequestHandler (ingress/protocol.py)
    "psycopg": "4",  # a Connection subclass the pool connects through
    "psycopg-pool": "4",
    "pydantic": "3",  # __pydantic_extra__ / __pydantic_fields_set__ / ...
}


@pytest.mark.parametrize("library", sorted(INTERNALS_BOUNDED))
def test_a_library_whose_internals_we_use_is_bounded_above(metadata: Message, library: str) -> None:
    (requirement,) = [r for r in _requirements(metadata)[library] if r.marker is None]
    first_refused = INTERNALS_BOUNDED[library]
    major, _, minor = first_refused.partition(".")
    last_allowed = f"{major}.{int(minor) - 1}.99" if minor else f"{int(major) - 1}.99"
    assert first_refused not in requirement.specifier, requirement
    assert last_allowed in requirement.specifier, requirement


def test_python_310_gets_the_backports_and_311_does_not_need_them(metadata: Message) -> None:
    required = _requirements(metadata)
    for backport in ("exceptiongroup", "async-timeout"):
        (requirement,) = required[backport]
        assert requirement.marker is not None
        assert requirement.marker.evaluate({"python_version": "3.10", "extra": ""})
        assert not requirement.marker.evaluate({"python_version": "3.11", "extra": ""})


# Tested lines of these frameworks require Python 3.11 (their own metadata).
NEEDS_311 = ("pydantic-ai", "langgraph", "google-adk")


def test_frameworks_needing_python_311_are_left_out_of_the_aggregate_extras_on_310(metadata: Message) -> None:
    aggregated = [r for r in _requirements(metadata)[DISTRIBUTION] if "frameworks" in str(r.marker)]
    on = {python: {e for r in aggregated if r.marker.evaluate({"python_version": python, "extra": "frameworks"})
                   for e in r.extras} for python in ("3.10", "3.11", "3.12")}
    assert on["3.10"] == {"openai-agents"}
    assert on["3.11"] == on["3.12"] == {"openai-agents", *NEEDS_311}
    for extra in NEEDS_311:  # asked for by name it is not dropped on 3.10: pip fails, naming the library
        own = [r for rs in _requirements(metadata).values() for r in rs
               if r.marker is not None and r.marker.evaluate({"python_version": "3.11", "extra": extra})
               and r.name != DISTRIBUTION]
        assert own and all(r.marker.evaluate({"python_version": "3.10", "extra": extra}) for r in own)


def test_the_checkouts_jobs_are_the_packages_jobs() -> None:
    """``flink run -py jobs/review_analysis.py`` and ``import flink_agents.jobs``
    read the same files: flink_agents/jobs links to the top-level jobs/."""
    link = REPO_ROOT / "flink_agents" / "jobs"
    assert link.is_symlink() and Path(os.readlink(link)) == Path("..") / "jobs"
    import flink_agents.jobs.review_analysis as job

    assert Path(job.__file__).resolve() == REPO_ROOT / "jobs" / "review_analysis.py"


def test_flink_agents_run_runs_a_bundled_job_from_the_installed_wheel(wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    wheel.extractall(site)  # a pure-Python wheel installs by unpacking into purelib
    output = tmp_path / "out.jsonl"
    run = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); import flink_agents.jobs.review_analysis as job; "
         "print(job.__file__, job.SAMPLE_INPUT); from flink_agents.cli.main import main; sys.exit(main())",
         str(site), "run", "review-analysis", "--runner", "local", "--output", str(output)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    module, sample = run.stdout.split()
    assert Path(module) == site / "flink_agents" / "jobs" / "review_analysis.py"
    assert Path(sample) == site / "flink_agents" / "jobs" / "data" / "sample_reviews.jsonl"
    assert len(output.read_text().splitlines()) == 60 == len(Path(sample).read_text().splitlines())
