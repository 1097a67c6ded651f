"""The runtime says its version: ``flink_agents.__version__``, the installed
distribution's metadata (``flink-agents-runtime``, pyproject.toml) and
``flink-agents --version`` agree."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

import flink_agents
from flink_agents.cli.main import main


def test_the_version_is_the_distributions_and_the_command_prints_it(capsys: pytest.CaptureFixture) -> None:
    assert flink_agents.__version__ == version("flink-agents-runtime")
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"flink-agents {flink_agents.__version__} ") and "apache-flink" in out


def test_the_package_marks_its_type_hints() -> None:
    assert (Path(flink_agents.__file__).parent / "py.typed").is_file()
