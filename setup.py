"""Packaging for flink_agents: durable AI agents on stock PyFlink."""
import re
from pathlib import Path

from setuptools import find_packages, setup

# flink_agents.__version__ is the one place the version is written.
_VERSION = re.search(
    r'^__version__ = "([^"]+)"', (Path(__file__).parent / "flink_agents" / "__init__.py").read_text(encoding="utf-8"),
    re.M,
)[1]

_PROVIDER_EXTRAS = {
    "anthropic": ["anthropic>=0.40"],
    "ollama": ["ollama>=0.4"],
    "tongyi": ["dashscope>=1.20"],
    "azure": [],  # the openai SDK's AzureOpenAI client
    "mcp": ["mcp>=2,<3"],  # MCP servers as tool and prompt sources
    "chroma": ["chromadb>=1.0,<2"],  # the Chroma vector store (embedded or HTTP)
    "mem0": ["mem0ai>=2.2.1,<2.3"],  # Mem0-backed long-term memory (its API changes between minor releases)
    # OpenTelemetry traces of every run (docs/observability.md). Capped at
    # 1.44: google-adk 2.13 (the [google-adk] extra) requires <= 1.44. The
    # exporter goes back to 1.15: from 1.28 it needs protobuf >= 5, which
    # apache-flink 1.20's apache-beam (< 2.49, protobuf < 4.24) cannot share;
    # there pip picks 1.15 beside SDK 1.44 (tests/engine/test_tracing.py).
    "otel": [
        "opentelemetry-api>=1.30,<=1.44",
        "opentelemetry-sdk>=1.30,<=1.44",
        "opentelemetry-exporter-otlp-proto-http>=1.15,<=1.44",
    ],
}

# Agent frameworks run durably inside actions (flink_agents.integrations.frameworks,
# docs/frameworks.md). Bounded to the minor lines tested: each integration uses the
# framework's documented extension points, which move between minor releases.
_FRAMEWORK_EXTRAS = {
    "pydantic-ai": ["pydantic-ai-slim[openai]>=2.68,<2.69"],
    "openai-agents": ["openai-agents>=0.24,<0.25"],
    "langgraph": ["langgraph>=1.2.24,<1.3", "langchain-core>=1.8,<1.9", "langchain-openai>=1.7,<1.8"],
    "google-adk": ["google-adk>=2.13,<2.14"],
}

setup(
    name="flink-agents",
    version=_VERSION,
    description="Durable, event-driven AI agents on Apache Flink, in pure Python",
    license="Apache-2.0",
    python_requires=">=3.11,<3.12",  # the Python tested (docs/compatibility.md)
    packages=find_packages(include=["flink_agents", "flink_agents.*"]),
    # The bundled jobs are flink_agents.jobs (no top-level `jobs` module in
    # site-packages); their sample data is not a Python package, so it is
    # listed as package data, not discovered.
    package_data={
        "flink_agents": ["py.typed"],  # PEP 561: the package ships its type hints
        "flink_agents.jobs": ["data/*.jsonl", "data/NOTICE"],
        # The web inspector's page (flink-agents ui): plain files, no build step.
        "flink_agents.inspection": ["static/*.html", "static/*.js", "static/*.css"],
    },
    install_requires=[
        "apache-flink>=1.20,<2.4",
        "pydantic>=2.11,<3",
        "docstring-parser>=0.16",
        "jsonschema>=4.18",  # structured output against a JSON schema (api.agents.types)  # tool schemas from Google, NumPy and reST docstrings
        "PyYAML>=6",  # SKILL.md front matter (and YAML agents)
        "cloudpickle",  # apache-flink pins the version
        "protobuf",  # apache-flink constrains the version
        "openai>=1.40",
        "tqdm>=4.60",
        "psycopg[binary,pool]>=3.1",  # the PostgreSQL journal store (clusters)
        "aiohttp>=3.9",  # the callback ingress (flink-agents callbacks serve)
        "prometheus-client>=0.20",  # the ingress's GET /metrics (ingress.metrics)
    ],
    # Provider SDKs are optional: a connection whose SDK is missing fails on
    # first use naming its extra (flink_agents.integrations.sdk). OpenAI and
    # Azure OpenAI ride on the openai SDK, which the runtime needs anyway.
    extras_require={
        **_PROVIDER_EXTRAS,
        **_FRAMEWORK_EXTRAS,
        "all": sorted({req for reqs in _PROVIDER_EXTRAS.values() for req in reqs}),
        "frameworks": sorted({req for reqs in _FRAMEWORK_EXTRAS.values() for req in reqs}),
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.2",
            "pytest-xdist>=3.5",  # tools/test.sh: fast tests on both cores beside the e2e tests
            # The web inspector's browser test drives Debian's chromium through its
            # chromedriver (tools/test.sh installs both; selenium-manager is never used).
            "selenium>=4.20,<5",
            *sorted({req for reqs in _PROVIDER_EXTRAS.values() for req in reqs}),
            *sorted({req for reqs in _FRAMEWORK_EXTRAS.values() for req in reqs}),
        ],
    },
    entry_points={
        "console_scripts": [
            "flink-agents=flink_agents.cli.main:main",
        ],
    },
)
