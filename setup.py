"""Packaging for flink_agents: durable AI agents on stock PyFlink."""
from setuptools import find_packages, setup

setup(
    name="flink-agents",
    version="0.1.0",
    description="Durable, event-driven AI agents on Apache Flink, in pure Python",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["flink_agents", "flink_agents.*", "jobs", "jobs.*"]),
    # The bundled sample data ships inside the jobs package (jobs/data is not a
    # Python package, so it is listed as package data, not discovered).
    package_data={"jobs": ["data/*.jsonl", "data/NOTICE"]},
    install_requires=[
        "apache-flink==2.3.0",
        "pydantic>=2.6,<3",
        "docstring-parser>=0.16",  # tool schemas from Google, NumPy and reST docstrings
        "PyYAML>=6",  # SKILL.md front matter (and YAML agents)
        "cloudpickle",  # apache-flink pins the version
        "protobuf",  # apache-flink constrains the version
        "openai>=1.40",
        "tqdm>=4.60",
        "psycopg[binary]>=3.1",  # the PostgreSQL journal store (clusters)
        "aiohttp>=3.9",  # the callback ingress (flink-agents callbacks serve)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.2",
        ],
    },
    entry_points={
        "console_scripts": [
            "flink-agents=flink_agents.cli.main:main",
        ],
    },
)
