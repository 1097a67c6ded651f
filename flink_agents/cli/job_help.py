"""What a bundled job's ``--help`` says: the command that ran it and the whole
first paragraph of its module docstring.

A job runs as ``flink-agents run NAME`` (``flink_agents.cli.main`` passes that
``prog``) or as ``python -m MODULE`` (the default), and its usage line names
the command the user typed.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["cli_prog", "describe", "job_parser"]


def cli_prog(job: str) -> str:
    """The usage name of a job started by the ``flink-agents`` command."""
    return f"flink-agents run {job}"


def describe(doc: str | None) -> str:
    """The first paragraph of a module docstring as one line ("" for none);
    the paragraph may span several source lines."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def job_parser(module: str, doc: str | None, prog: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` for the job in ``module`` (its ``__name__``):
    ``prog`` if given (``cli_prog(job)``), else ``python -m MODULE``; the
    description is ``describe(doc)``; ``kwargs`` go to ``ArgumentParser``."""
    return argparse.ArgumentParser(prog=prog or f"python -m {module}", description=describe(doc), **kwargs)
