"""The bundled jobs: runnable PyFlink jobs with their agents and sample data.

In a checkout they are the top-level ``jobs/`` directory, run as files the
way Flink runs Python jobs (``flink run -py jobs/review_analysis.py``,
``python jobs/review_analysis.py``). ``flink_agents/jobs`` is a symlink to
it, so they import as ``flink_agents.jobs.*``, the names their agents'
actions carry (plans/*.json, journals), and the wheel installs them as that
subpackage: ``flink-agents run JOB`` runs one from an installed wheel.
"""
