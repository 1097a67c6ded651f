"""``flink-agents run JOB --help`` names the command the user typed and says
what the job does in whole sentences; every option is explained."""

from __future__ import annotations

import argparse
import importlib

import pytest

from flink_agents.cli.job_help import describe
from flink_agents.cli.main import JOBS, main


def _help_of(argv, monkeypatch, capsys):
    """The help text and the parser that printed it."""
    printed = []
    original = argparse.ArgumentParser.print_help

    def record(self, file=None):
        printed.append(self)
        return original(self, file)

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", record)
    with pytest.raises(SystemExit) as done:
        argv()
    assert done.value.code == 0
    return capsys.readouterr().out, printed[-1]


@pytest.mark.parametrize("job", sorted(JOBS))
def test_run_job_help_names_the_cli_command_and_explains_every_option(job, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")   # one line per sentence: the checks read whole phrases
    text, parser = _help_of(lambda: main(["run", job, "--help"]), monkeypatch, capsys)

    assert text.startswith(f"usage: flink-agents run {job} [-h]"), text.splitlines()[0]
    assert "python -m" not in text and "__main__" not in text
    module = importlib.import_module(JOBS[job].partition(":")[0])
    description = describe(module.__doc__)
    assert description.endswith("."), f"{job}: the docstring's first paragraph is not a whole sentence"
    assert description in " ".join(text.split())
    unexplained = [a.option_strings for a in parser._actions if not a.help]
    assert unexplained == [], f"{job}: options without help: {unexplained}"


def test_the_module_form_keeps_naming_python_dash_m(monkeypatch, capsys):
    from flink_agents.jobs import review_triage

    monkeypatch.setenv("COLUMNS", "200")
    text, _ = _help_of(lambda: review_triage.main(["--help"]), monkeypatch, capsys)
    assert text.startswith("usage: python -m flink_agents.jobs.review_triage [-h]")


def test_a_usage_error_names_the_cli_command(capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", "review-triage", "--runner", "yarn"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "flink-agents run review-triage: error: argument --runner: invalid choice: 'yarn'" in err


def test_describe_joins_the_first_paragraph_of_a_docstring():
    doc = """The review-triage job: a parent agent hands negative reviews to two
    sub-agents.

    Details that stay out of the description.
    """
    assert describe(doc) == "The review-triage job: a parent agent hands negative reviews to two sub-agents."
    assert describe(None) == ""


def test_run_without_a_job_asks_for_the_job_only(capsys):
    with pytest.raises(SystemExit) as done:
        main(["run"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("flink-agents run: error: the following arguments are required: job"), err
    assert "job_args" not in err
